"""The registered tasks: the paper's robot experiment (flat and rough) and its comparison
experiment (plain ANYmal C, flat ground, joint speed constraint only)."""

from __future__ import annotations

from collections.abc import Callable

from training.envs.config import (
    TASK_REWARDS,
    CommandsConfig,
    CostsConfig,
    CostTermConfig,
    DomainRandConfig,
    ObservationsConfig,
    RewardsConfig,
    TaskConfig,
)
from training.sim.terrain import TerrainConfig

TASKS: dict[str, Callable[[], TaskConfig]] = {}


def register_task(name: str, factory: Callable[[], TaskConfig]) -> None:
    """Register a task config factory under ``name`` (refuses to replace one silently)."""
    if name in TASKS:
        raise ValueError(f"task {name!r} is already registered")
    TASKS[name] = factory


def aow_flat() -> TaskConfig:
    """Wheeled ANYmal C on flat ground, blind (proprioception only), all the paper's constraints."""
    return TaskConfig(name="aow_flat", wheeled=True, terrain=TerrainConfig(kind="plane"))


def aow_rough() -> TaskConfig:
    """The robot experiment: rough terrain with curriculum, 187-point height scan, all constraints."""
    return TaskConfig(
        name="aow_rough",
        wheeled=True,
        terrain=TerrainConfig(kind="rough"),
        observations=ObservationsConfig(height_scan=True),
    )


def anymal_flat_speed_limit() -> TaskConfig:
    """The comparison experiment (Section IV-A): plain ANYmal C, flat ground, one constraint,
    joint speed <= 6.0 rad/s (indicator cost)."""
    return TaskConfig(
        name="anymal_flat_speed_limit",
        wheeled=False,
        terrain=TerrainConfig(kind="plane"),
        costs=CostsConfig(terms={"joint_speed": CostTermConfig("joint_speed", "indicator")}),
    )


def legged_gym_flat_rewards() -> RewardsConfig:
    """legged_gym's anymal_c_flat reward set: tracking exp(-err^2 / 0.25) (lin 1.0, yaw 0.5),
    lin_vel_z -2, ang_vel_xy -0.05, orientation -5, torques -2.5e-5, dof_acc -2.5e-7,
    action_rate -0.01, feet_air_time 2.0 (|v_xy cmd| > 0.1), total clipped at 0. (Its collision
    term is covered here by the thigh-contact termination.)"""
    return RewardsConfig(
        weights={
            "lin_vel": 1.0,
            "yaw_rate": 0.5,
            "torque": -2.5e-5,
            "joint_acc": -2.5e-7,
            "lin_vel_z": -2.0,
            "ang_vel_xy": -0.05,
            "orientation": -5.0,
            "action_rate": -0.01,
            "feet_air_time": 2.0,
        },
        tracking_sharpness=4.0,
        air_time_gate="command",
        only_positive=True,
    )


def anymal_flat_legged_gym() -> TaskConfig:
    """The comparison robot (plain ANYmal C, flat ground, joint speed <= 6 rad/s) with legged_gym's
    ANYmal C MDP (issue 23, 1a: the stack against legged_gym's result): anymal_c_flat's rewards;
    anymal_c_rough's commands (in [-1, 1] m/s, m/s, rad/s, heading control, new every 10 s; its
    flat config turns heading off, resamples every 4 s with yaw rates up to 1.5); friction in
    [0.5, 1.25] (legged_gym's flat [0, 1.5] averaged with the foot's 1.0 by PhysX)."""
    task = anymal_flat_speed_limit()
    task.name = "anymal_flat_legged_gym"
    task.rewards = legged_gym_flat_rewards()
    task.commands = CommandsConfig(
        resampling_time=10.0,
        standing_fraction=0.0,
        heading_command=True,
        ranges={"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-1.0, 1.0), "ang_vel_yaw": (-1.0, 1.0)},
    )
    return task


def omni_rewards() -> RewardsConfig:
    """Table I's rewards plus the style term the reference policies add: feet air time (1.0,
    target 0.5 s) paid only for commands that wheels cannot follow by rolling straight (sideways
    or turning), so the robot steps where it must and rolls where it can."""
    weights = dict(TASK_REWARDS)
    weights["feet_air_time"] = 1.0
    return RewardsConfig(weights=weights, air_time_gate="stepping")


def omni_commands() -> CommandsConfig:
    """Commands every 5 s; 20 % pure forward, 20 % pure sideways, 20 % turning in place, the rest
    in the contract's full box; 10 % standing."""
    return CommandsConfig(resampling_time=5.0, mode_shares={"forward": 0.2, "sideways": 0.2, "turn": 0.2})


def _with_levers(task: TaskConfig, name: str, rewards: RewardsConfig) -> TaskConfig:
    """``task`` renamed, with ``rewards``, the omnidirectional command modes and friction 0.5-1.5:
    the changes every reference-policy task of issue 23 makes to the paper's task."""
    task.name = name
    task.rewards = rewards
    task.commands = omni_commands()
    task.domain_rand = DomainRandConfig(friction=(0.5, 1.5))
    return task


def aow_flat_omni() -> TaskConfig:
    """The flat reference policies' task (issue 23): ``aow_flat`` (Table I, all constraints) with
    the omnidirectional command modes, the stepping air-time term and friction up to 1.5, so that
    skidding does not pay where the deployment's ground (friction 1.0) grips."""
    return _with_levers(aow_flat(), "aow_flat_omni", omni_rewards())


def aow_rough_omni() -> TaskConfig:
    """The rough-terrain reference policies' task: ``aow_rough`` (height scan, curriculum) with the
    same additions as ``aow_flat_omni``."""
    return _with_levers(aow_rough(), "aow_rough_omni", omni_rewards())


def style_rewards() -> RewardsConfig:
    """The reward set that made the legs-only robot walk in this stack (``legged_gym_flat_rewards``),
    with the air time paid only for commands that wheels cannot follow by rolling straight
    (sideways, turning): Table I's tracking and stability terms give way to legged_gym's."""
    rewards = legged_gym_flat_rewards()
    rewards.air_time_gate = "stepping"
    return rewards


def aow_flat_style() -> TaskConfig:
    """``aow_flat`` (blind, all the paper's constraints as costs) with legged_gym's flat reward set,
    the stepping air-time gate, the omnidirectional command modes and friction 0.5-1.5."""
    return _with_levers(aow_flat(), "aow_flat_style", style_rewards())


def aow_rough_style() -> TaskConfig:
    """``aow_rough`` (height scan, curriculum, all the paper's constraints as costs) with the rough
    counterpart of ``aow_flat_style``: legged_gym's rough reward scales (no orientation term: slopes
    tilt the base; torques -1e-5, air time 1.0), the stepping gate, command modes, friction 0.5-1.5."""
    rewards = style_rewards()
    del rewards.weights["orientation"]
    rewards.weights["torque"] = -1.0e-5
    rewards.weights["feet_air_time"] = 1.0
    return _with_levers(aow_rough(), "aow_rough_style", rewards)


register_task("aow_flat", aow_flat)
register_task("aow_rough", aow_rough)
register_task("anymal_flat_speed_limit", anymal_flat_speed_limit)
register_task("anymal_flat_legged_gym", anymal_flat_legged_gym)
register_task("aow_flat_omni", aow_flat_omni)
register_task("aow_rough_omni", aow_rough_omni)
register_task("aow_flat_style", aow_flat_style)
register_task("aow_rough_style", aow_rough_style)
