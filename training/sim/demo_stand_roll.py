"""Drop the AoW onto flat ground, let it stand in the default pose, then roll it forward; print what happened.

``python -m training.sim.demo_stand_roll`` is what ``make demo`` runs until the training pipeline exists.

Standing: the legs' position actuators target the contract's default pose with the contract's gains. The
wheel actuators are velocity loops without a position term, so a wheel commanded to zero speed still
turns under a steady push; at kp 80 the legs' sag pushes the front and hind wheels apart and a robot whose
wheels are only commanded to zero speed rolls into a split (base 0.56 m at 1 s -> 0.40 m at 5 s). A parked
robot holds its wheel angles instead: the standing phase commands each wheel a speed proportional to its
angle error from the contract's default (``wheel_hold_gain``), as a stand-still controller would.
Rolling: every wheel is commanded ``wheel_speed`` and the legs keep their default targets.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import mujoco
import numpy as np

from aow_policy.robot import Robot, load_robot
from training.sim.model import build_model, model_info


@dataclass(frozen=True)
class StandRollConfig:
    drop_height: float = 0.05  # m above the keyframe's standing height
    stand_seconds: float = 5.0
    roll_seconds: float = 5.0
    wheel_speed: float = 5.0  # rad/s while rolling
    wheel_hold_gain: float = 10.0  # (rad/s)/rad while standing
    settle_seconds: float = 1.0  # measurements of the standing phase start here


@dataclass(frozen=True)
class StandRollResult:
    time: np.ndarray  # (T,) s, after each physics step
    rolling: np.ndarray  # (T,) bool, the rolling phase
    base_position: np.ndarray  # (T, 3) world
    base_up_z: np.ndarray  # (T,) world z of the base's z axis (1 = level, 0 = on its side)
    leg_speeds: np.ndarray  # (T, 12) |q̇| of the leg joints, contract order
    leg_speed_limits: np.ndarray  # (12,) the contract's constraint limits
    undesired_contacts: np.ndarray  # (T,) ground contacts of anything but wheels/feet
    total_mass: float  # kg
    standing_height: float  # keyframe base height (m)
    settle_seconds: float  # standing measurements start here
    roll_start_x: float  # base x when the rolling phase began
    wall_seconds: float  # spent in mj_step

    @property
    def settled_height(self) -> float:
        """Mean base height over the last second of standing."""
        stand = ~self.rolling
        last = stand & (self.time > self.time[stand][-1] - 1.0)
        return float(self.base_position[last, 2].mean())

    @property
    def after_settling(self) -> np.ndarray:
        return ~self.rolling & (self.time >= self.settle_seconds)

    @property
    def max_leg_speed_after_settling(self) -> float:
        return float(self.leg_speeds[self.after_settling].max())

    @property
    def distance_rolled(self) -> float:
        """Base displacement along world x over the rolling phase (m)."""
        if not self.rolling.any():
            return 0.0
        return float(self.base_position[-1, 0] - self.roll_start_x)

    @property
    def steps_per_second(self) -> float:
        return len(self.time) / self.wall_seconds

    @property
    def real_time_factor(self) -> float:
        return float(self.time[-1]) / self.wall_seconds


def simulate_stand_and_roll(config: StandRollConfig | None = None, robot: Robot | None = None) -> StandRollResult:
    """Run the drop, stand and roll scenario on the wheeled model and record it."""
    config = config or StandRollConfig()
    robot = robot if robot is not None else load_robot()
    model = build_model(wheeled=True, robot=robot)
    info = model_info(model, robot)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, info.default_key_id)
    data.qpos[info.base_qpos_adr + 2] += config.drop_height
    mujoco.mj_forward(model, data)

    legs = info.leg_joint_mask
    wheel_act, wheel_qpos = info.actuator_ids[~legs], info.qpos_adr[~legs]
    wheel_default = robot.default_positions[info.contract_indices[~legs]]
    leg_qvel = info.qvel_adr[legs]
    undesired = np.zeros(model.ngeom, dtype=bool)
    undesired[info.undesired_contact_geom_ids] = True

    dt = model.opt.timestep
    n_stand, n_roll = round(config.stand_seconds / dt), round(config.roll_seconds / dt)
    steps = n_stand + n_roll
    base_position = np.empty((steps, 3))
    base_up_z = np.empty(steps)
    leg_speeds = np.empty((steps, int(legs.sum())))
    undesired_contacts = np.zeros(steps, dtype=np.int64)
    rolling = np.arange(steps) >= n_stand
    wall = 0.0
    roll_start_x = float(data.xpos[info.base_body_id, 0])
    for k in range(steps):
        if k == n_stand:
            roll_start_x = float(data.xpos[info.base_body_id, 0])
        if rolling[k]:
            data.ctrl[wheel_act] = config.wheel_speed
        else:
            data.ctrl[wheel_act] = config.wheel_hold_gain * (wheel_default - data.qpos[wheel_qpos])
        start = time.perf_counter()
        mujoco.mj_step(model, data)
        wall += time.perf_counter() - start
        base_position[k] = data.xpos[info.base_body_id]
        base_up_z[k] = data.xmat[info.base_body_id, 8]
        leg_speeds[k] = np.abs(data.qvel[leg_qvel])
        contacts = data.contact[: data.ncon]
        floor_pairs = (contacts.geom1 == info.floor_geom_id) | (contacts.geom2 == info.floor_geom_id)
        undesired_contacts[k] = int(np.sum(floor_pairs & (undesired[contacts.geom1] | undesired[contacts.geom2])))
    return StandRollResult(
        time=dt * np.arange(1, steps + 1),
        rolling=rolling,
        base_position=base_position,
        base_up_z=base_up_z,
        leg_speeds=leg_speeds,
        leg_speed_limits=robot.constraint_velocity_limits[info.contract_indices[legs]],
        undesired_contacts=undesired_contacts,
        total_mass=float(model.body_subtreemass[info.base_body_id]),
        standing_height=info.standing_height,
        settle_seconds=config.settle_seconds,
        roll_start_x=roll_start_x,
        wall_seconds=wall,
    )


def report(result: StandRollResult, config: StandRollConfig) -> str:
    stand = ~result.rolling
    after = result.after_settling
    heights = result.base_position[after, 2]
    tilt = np.degrees(np.arccos(np.clip(result.base_up_z, -1.0, 1.0)))
    lines = [
        f"AoW (wheeled ANYmal C), total mass {result.total_mass:.2f} kg",
        f"keyframe standing height        {result.standing_height:.3f} m (dropped from +{config.drop_height:.2f} m)",
        f"settled base height             {result.settled_height:.3f} m "
        f"(range {heights.min():.3f}-{heights.max():.3f} m after {config.settle_seconds:.0f} s)",
        f"{f'max leg joint speed after {config.settle_seconds:.0f} s':<32}"
        f"{result.max_leg_speed_after_settling:.3f} rad/s "
        f"(constraint limit {result.leg_speed_limits.min():.1f})",
        f"max tilt standing / rolling     {tilt[stand].max():.2f} / {tilt[result.rolling].max():.2f} deg",
        f"{f'distance rolled at {config.wheel_speed:+.1f} rad/s':<32}{result.distance_rolled:.3f} m "
        f"in {config.roll_seconds:.1f} s (base height at end {result.base_position[-1, 2]:.3f} m)",
        f"non-wheel ground contacts       {int(result.undesired_contacts.sum())} (contact-steps)",
        f"physics                         {result.steps_per_second:,.0f} steps/s, "
        f"real-time factor {result.real_time_factor:.0f}x (one MjData, one thread)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--stand-seconds", type=float, default=StandRollConfig.stand_seconds)
    parser.add_argument("--roll-seconds", type=float, default=StandRollConfig.roll_seconds)
    parser.add_argument("--wheel-speed", type=float, default=StandRollConfig.wheel_speed, help="rad/s while rolling")
    parser.add_argument("--drop-height", type=float, default=StandRollConfig.drop_height, help="m above standing")
    args = parser.parse_args(argv)
    if args.drop_height < 0:
        parser.error("--drop-height must not be negative")
    if args.roll_seconds <= 0:
        parser.error("--roll-seconds must be positive")
    if args.stand_seconds < 2 * StandRollConfig.settle_seconds:
        parser.error(f"--stand-seconds must be at least {2 * StandRollConfig.settle_seconds:.0f} s")
    config = StandRollConfig(
        drop_height=args.drop_height,
        stand_seconds=args.stand_seconds,
        roll_seconds=args.roll_seconds,
        wheel_speed=args.wheel_speed,
    )
    result = simulate_stand_and_roll(config)
    print(report(result, config))


if __name__ == "__main__":
    main()
