"""Issue 23's new MDP terms against hand-computed values: foot air time, the command gate, the
legged_gym style rewards, the pure command modes, and their wiring into the environment."""

from __future__ import annotations

import math

import pytest
import torch

from training.envs import make_env, task_config
from training.envs.config import CommandsConfig, RewardsConfig
from training.mdp import commands as cmd
from training.mdp import gait, rewards

DT = 0.02


def _run_air_time(contacts: list[int], target: float = 0.5) -> tuple[list[float], list[float]]:
    """Feeds one foot's contact sequence through the bookkeeping; returns the air time after each
    step and the reward of each step (gate open)."""
    air = torch.zeros(1, 1)
    last = torch.ones(1, 1, dtype=torch.bool)
    airs, paid = [], []
    for c in contacts:
        upd = gait.update_air_time(air, last, torch.tensor([[float(c)]]), DT)
        air, last = upd.air_time, upd.last_contact
        airs.append(float(air))
        paid.append(float(gait.feet_air_time(upd.landed_air_time, target, torch.tensor([True]))))
    return airs, paid


def test_a_planted_foot_earns_nothing():
    airs, paid = _run_air_time([1] * 50)
    assert airs == [0.0] * 50 and paid == [0.0] * 50


@pytest.mark.parametrize("air_steps", [15, 35])  # 0.3 s and 0.7 s in the air
def test_a_step_pays_its_air_time_minus_the_target_when_it_lands(air_steps):
    airs, paid = _run_air_time([1] * 5 + [0] * air_steps + [1] * 5)
    # The first airborne step still counts as contact (OR with the previous reading): the air
    # time then grows by dt per step and the landing step pays (air_steps * dt - 0.5), once.
    assert airs[5] == 0.0
    assert airs[5 + air_steps - 1] == pytest.approx((air_steps - 1) * DT)
    landing = 5 + air_steps
    assert paid[landing] == pytest.approx(air_steps * DT - 0.5)
    assert [p for i, p in enumerate(paid) if i != landing] == [0.0] * (len(paid) - 1)
    assert airs[landing] == 0.0
    expected = -0.2 if air_steps == 15 else 0.2
    assert paid[landing] == pytest.approx(expected)


def test_a_foot_that_never_lands_is_not_paid():
    _, paid = _run_air_time([1] * 3 + [0] * 40)
    assert paid == [0.0] * 43


def test_the_gate_closes_the_reward_and_sums_feet():
    landed = torch.tensor([[0.6, 0.0, 0.8, 0.0], [0.6, 0.0, 0.8, 0.0]])
    out = gait.feet_air_time(landed, 0.5, torch.tensor([True, False]))
    assert out.tolist() == pytest.approx([0.1 + 0.3, 0.0])


def test_air_time_gates():
    c = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0], [0.05, 0.05, 0.05], [0.0, 0.0, 0.0]])
    assert gait.air_time_gate(c, "command").tolist() == [True, True, False, False, False]
    assert gait.air_time_gate(c, "stepping").tolist() == [False, True, True, False, False]
    assert gait.air_time_gate(c, "moving").tolist() == [True, True, True, False, False]
    with pytest.raises(ValueError, match="air-time gate"):
        gait.air_time_gate(c, "always")


def test_style_reward_kernels():
    assert rewards.lin_vel_z_squared(torch.tensor([0.5])).item() == 0.25
    assert rewards.ang_vel_xy_squared(torch.tensor([[1.0, 2.0]])).item() == 5.0
    g = torch.tensor([[0.0, 0.0, -1.0], [math.sin(0.3), 0.0, -math.cos(0.3)]])
    assert rewards.orientation_squared(g).tolist() == pytest.approx([0.0, math.sin(0.3) ** 2])
    a, last = torch.tensor([[1.0, -1.0]]), torch.tensor([[0.5, 0.0]])
    assert rewards.action_rate_squared(a, last).item() == 1.25


def test_command_modes_zero_the_other_components():
    c = torch.tensor([[1.0, 0.5, 0.25, 2.0]] * 4)
    out = cmd.apply_modes(c, torch.tensor([0, 1, 2, 3]))
    assert out.tolist() == [[1.0, 0.5, 0.25, 2.0], [1.0, 0.0, 0.0, 2.0], [0.0, 0.5, 0.0, 2.0], [0.0, 0.0, 0.25, 2.0]]


def test_drawn_modes_have_the_stated_shares():
    g = torch.Generator().manual_seed(0)
    modes = cmd.draw_modes(200_000, torch.tensor([0.2, 0.0, 0.3]), g)
    shares = [float((modes == m).float().mean()) for m in range(4)]
    assert shares == pytest.approx([0.5, 0.2, 0.0, 0.3], abs=0.005)


def test_environment_commands_follow_the_modes_and_ranges():
    ranges = {"lin_vel_x": (-1.0, 1.0), "lin_vel_y": (-0.5, 0.5), "ang_vel_yaw": (-1.0, 1.0)}
    shares = {"forward": 0.25, "sideways": 0.25, "turn": 0.25}
    env = make_env(
        "aow_flat",
        2,
        seed=3,
        commands={"mode_shares": shares, "ranges": ranges, "standing_fraction": 0.0, "small_command_threshold": 0.0},
    )
    try:
        n = 40_000  # many draws through the env's own sampler
        env.commands = torch.zeros(n, 4)
        env._resample_commands(torch.arange(n))
        c = env.commands[:, :3]
        nonzero = c != 0
        forward = nonzero[:, 0] & ~nonzero[:, 1] & ~nonzero[:, 2]
        sideways = ~nonzero[:, 0] & nonzero[:, 1] & ~nonzero[:, 2]
        turn = ~nonzero[:, 0] & ~nonzero[:, 1] & nonzero[:, 2]
        box = nonzero.all(-1)
        for mask, share in ((forward, 0.25), (sideways, 0.25), (turn, 0.25), (box, 0.25)):
            assert float(mask.float().mean()) == pytest.approx(share, abs=0.01)
        for k, (lo, hi) in enumerate(ranges.values()):
            assert float(c[:, k].min()) >= lo and float(c[:, k].max()) <= hi
            assert float(c[:, k].min()) < lo + 0.01 and float(c[:, k].max()) > hi - 0.01
    finally:
        env.close()


def test_reversal_negates_the_flagged_rows_within_the_ranges():
    new = torch.tensor([[0.3, 0.0, 0.0], [0.3, 0.0, 0.0], [0.3, 0.0, 0.0]])
    current = torch.tensor([[0.0, 1.0, 0.0], [2.0, -0.5, 1.5], [0.5, 0.5, -1.0]])
    low, high = torch.tensor([-1.0, -1.0, -1.5]), torch.tensor([2.0, 1.0, 1.5])
    out = cmd.reverse_where(new, current, torch.tensor([True, True, False]), low, high)
    # row 0: left 1.0 -> right 1.0; row 1: 2 m/s forward reverses to the 1 m/s backward limit; row 2 kept
    assert torch.equal(out, torch.tensor([[0.0, -1.0, 0.0], [-1.0, 0.5, -1.5], [0.3, 0.0, 0.0]]))


def test_timed_resamples_reverse_the_stated_share_and_resets_never():
    env = make_env("aow_flat", 2, seed=5, commands={"reversal_share": 0.3, "standing_fraction": 0.0})
    try:
        n = 40_000
        running = torch.tensor([0.0, 0.8, 0.0, 0.0]).repeat(n, 1)  # left 0.8 m/s everywhere
        env.commands = running.clone()
        env._resample_commands(torch.arange(n), timed=True)
        reversed_ = (env.commands[:, :3] == torch.tensor([0.0, -0.8, 0.0])).all(-1)
        assert float(reversed_.float().mean()) == pytest.approx(0.3, abs=0.01)
        env.commands = running.clone()
        env._resample_commands(torch.arange(n))  # a reset's draw
        assert not (env.commands[:, :3] == torch.tensor([0.0, -0.8, 0.0])).all(-1).any()
    finally:
        env.close()


def test_config_refuses_bad_modes_ranges_and_gates():
    with pytest.raises(ValueError, match=r"commands\.mode_shares"):
        CommandsConfig(mode_shares={"backflip": 0.1}).validate()
    with pytest.raises(ValueError, match=r"add up to 1\.2"):
        CommandsConfig(mode_shares={"forward": 0.6, "turn": 0.6}).validate()
    with pytest.raises(ValueError, match=r"commands\.reversal_share"):
        CommandsConfig(reversal_share=1.5).validate()
    with pytest.raises(ValueError, match=r"commands\.ranges\.lin_vel_x"):
        CommandsConfig(ranges={"lin_vel_x": (1.0, -1.0)}).validate()
    with pytest.raises(ValueError, match=r"commands\.ranges"):
        CommandsConfig(ranges={"lin_vel_z": (0.0, 1.0)}).validate()
    with pytest.raises(ValueError, match=r"rewards\.air_time_gate"):
        RewardsConfig(air_time_gate="sometimes").validate()
    with pytest.raises(ValueError, match=r"rewards\.weights"):
        RewardsConfig(weights={"feet_air_tme": 1.0}).validate()


def test_paper_tasks_keep_table_one():
    for name in ("aow_flat", "aow_rough", "anymal_flat_speed_limit"):
        cfg = task_config(name)
        assert set(cfg.rewards.weights) == {
            "lin_vel",
            "yaw_rate",
            "base_stability",
            "base_height",
            "torque",
            "joint_vel",
            "joint_acc",
        }
        assert not cfg.commands.mode_shares and cfg.commands.ranges is None and not cfg.rewards.only_positive


@pytest.mark.parametrize("task", ["aow_flat_omni", "anymal_flat_legged_gym"])
def test_air_time_is_tracked_in_the_environment(task):
    """Robots dropped from a height: every foot is in the air, lands, and the landing is paid
    (the gate forced open by a command every robot gets)."""
    env = make_env(task, 2, seed=0, domain_rand={"push_robots": False, "observation_noise": False})
    try:
        env.reset()
        assert "feet_air_time" in env.reward_names
        env.cfg.init.spawn_clearance = 0.3  # drop from 30 cm: ~0.25 s in the air
        env._reset_envs(torch.arange(2))
        env.commands[:, :3] = torch.tensor([0.0, 0.8, 0.5])  # sideways and turning: both gates open
        env.cfg.commands.resampling_time = 1e6
        env.resample_steps = 10**9
        k = env.reward_names.index("feet_air_time")
        w = env.cfg.rewards.weights["feet_air_time"] * env.dt
        expected, landings, max_air = torch.zeros(2), torch.zeros(2), 0.0
        for _ in range(40):
            env.step(torch.zeros(2, env.num_actions))
            max_air = max(max_air, float(env.feet_air_time.max()))
            landed = env.landed_air_time
            landings += (landed > 0).sum(-1)
            expected += w * torch.where(landed > 0, landed - 0.5, torch.zeros_like(landed)).sum(-1)
        assert max_air > 0.1  # the feet were in the air for a while
        assert (landings >= 4).all()  # every foot landed (some bounced and landed again)
        # Every landing came after < 0.5 s in the air: the episode's sum is negative and equals
        # weight * dt * sum(air time - 0.5) over the landings.
        assert (env.episode_rewards[:, k] < 0).all()
        assert env.episode_rewards[:, k].tolist() == pytest.approx(expected.tolist(), rel=1e-5)
    finally:
        env.close()


def test_only_positive_clips_the_total_reward():
    env = make_env("anymal_flat_legged_gym", 2, seed=0, domain_rand={"push_robots": False})
    try:
        env.reset()
        for _ in range(5):
            _, r, _, _, _ = env.step(torch.full((2, env.num_actions), 3.0))
            assert (r >= 0).all()
    finally:
        env.close()


@pytest.mark.parametrize("yaw_sharpness", [None, 1.0])
def test_yaw_tracking_has_its_own_sharpness(yaw_sharpness):
    """``rewards.yaw_tracking_sharpness`` sets the yaw kernel alone (None: the shared one, 4 in
    the style tasks): a robot standing still under a 1 rad/s turn command is paid
    weight * dt * exp(-s (1 - yaw rate)^2)."""
    env = make_env(
        "aow_flat_style",
        2,
        seed=0,
        domain_rand={"push_robots": False, "observation_noise": False},
        rewards={"yaw_tracking_sharpness": yaw_sharpness},
        init={"random_episode_start": False},  # no time-out (and its reset) on the first step
    )
    try:
        env.reset()
        env.resample_steps = 10**9
        env.commands[:, :3] = torch.tensor([0.0, 0.0, 1.0])
        before = env.episode_rewards.clone()
        env.step(torch.zeros(2, env.num_actions))
        k = env.reward_names.index("yaw_rate")
        yaw_rate = env.sim.state().base_ang_vel[:, 2]
        sharpness = 4.0 if yaw_sharpness is None else yaw_sharpness
        expected = 0.5 * env.dt * torch.exp(-sharpness * (1.0 - yaw_rate) ** 2)
        assert (env.episode_rewards[:, k] - before[:, k]).tolist() == pytest.approx(expected.tolist(), rel=1e-5)
        assert env.cfg.rewards.yaw_sharpness == sharpness
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"rewards\.yaw_tracking_sharpness"):
        RewardsConfig(yaw_tracking_sharpness=0.0).validate()
