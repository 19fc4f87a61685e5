"""Rollouts on the C MuJoCo backend: finite outputs, independent resets, exact time-outs,
episode statistics, contact sensing and the curriculum wired into the environment."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from training.envs import make_env
from training.mdp.math import quat_from_yaw

NO_FAIL = {"base_thigh_contact": False, "max_roll": math.pi, "max_pitch": math.pi / 2}


def finite(x) -> bool:
    if isinstance(x, dict):
        return all(finite(v) for v in x.values())
    if isinstance(x, torch.Tensor):
        return bool(torch.isfinite(x.float()).all())
    return math.isfinite(float(x))


def test_64_envs_random_actions_300_steps_all_finite():
    env = make_env("aow_flat", 64, seed=3)
    gen = torch.Generator().manual_seed(0)
    try:
        obs = env.reset()
        assert finite(obs)
        episodes = 0
        for _ in range(300):
            obs, rewards, costs, dones, infos = env.step(torch.randn(64, env.num_actions, generator=gen))
            assert finite(obs) and finite(rewards) and finite(costs)
            assert not torch.isnan(dones.float()).any()
            assert (costs >= 0).all()
            if infos["episode"]:
                episodes += 1
                assert finite(infos["episode"])
                assert finite(infos["terminal_obs"])
        # Random actions break the constraints and knock robots over: episodes end and are logged.
        assert episodes > 0
        assert (env.episode_violations >= 0).all()
    finally:
        env.close()


def test_resetting_a_subset_leaves_the_others_untouched():
    kw = dict(
        seed=5,
        domain_rand={"push_robots": False, "observation_noise": False},
        terminations=NO_FAIL,
        init={"random_episode_start": False},  # no time-out (and fresh random start) within the test
    )
    a, b = make_env("aow_flat", 6, **kw), make_env("aow_flat", 6, **kw)
    gen = torch.Generator().manual_seed(1)
    actions = [0.3 * torch.randn(6, 16, generator=gen) for _ in range(15)]
    try:
        a.reset(), b.reset()
        for t in range(15):
            if t == 5:
                b._reset_envs(torch.tensor([1, 4]))
            a.step(actions[t])
            b.step(actions[t])
        others = [0, 2, 3, 5]
        for i in others:
            assert np.array_equal(a.sim.datas[i].qpos, b.sim.datas[i].qpos)
            assert np.array_equal(a.sim.datas[i].qvel, b.sim.datas[i].qvel)
        sa, sb = a.sim.state(), b.sim.state()
        assert torch.equal(sa.joint_pos[others], sb.joint_pos[others])
        assert not torch.equal(sa.joint_pos[[1, 4]], sb.joint_pos[[1, 4]])
        assert torch.equal(b.steps_since_reset, torch.tensor([15, 10, 15, 15, 10, 15]))
    finally:
        a.close(), b.close()


def test_time_out_at_exactly_1000_steps():
    env = make_env(
        "aow_flat",
        2,
        domain_rand={"push_robots": False},
        terminations=NO_FAIL,
        init={"random_episode_start": False},
    )
    try:
        env.reset()
        zero = torch.zeros(2, env.num_actions)
        for step in range(1, 1001):
            _, _, _, dones, infos = env.step(zero)
            if step < 1000:
                assert not dones.any(), f"episode ended early at step {step}"
        assert dones.all() and infos["time_outs"].all()
        assert infos["episode"]["length"] == 1000.0
        assert env.episode_length.tolist() == [0, 0]  # auto-reset
    finally:
        env.close()


def test_episode_sums_match_per_step_values():
    env = make_env("aow_flat", 4, seed=2, domain_rand={"push_robots": False}, init={"random_episode_start": False})
    gen = torch.Generator().manual_seed(4)
    try:
        env.reset()
        total_rew = torch.zeros(4)
        total_cost = torch.zeros(4, len(env.cost_names))
        for _ in range(10):
            _, rewards, costs, dones, _ = env.step(0.5 * torch.randn(4, env.num_actions, generator=gen))
            assert not dones.any()
            total_rew += rewards
            total_cost += costs
        assert torch.allclose(env.episode_rewards.sum(-1), total_rew, atol=1e-4)
        assert torch.allclose(env.episode_costs, total_cost, rtol=1e-5)
        speed = env.cost_names.index("joint_speed")
        assert torch.equal(env.episode_violations[:, speed], env.episode_costs[:, speed])  # indicator cost
    finally:
        env.close()


def lay_on_belly(env, ids: list[int], height: float = 0.12) -> None:
    n = len(ids)
    pos = torch.tensor([[0.0, 0.0, height]] * n)
    zero = torch.zeros(n, 3)
    env.sim.reset(
        torch.tensor(ids),
        pos,
        quat_from_yaw(torch.zeros(n)),
        zero,
        zero,
        env.default_joint_pos.expand(n, -1),
        0 * env.default_joint_pos.expand(n, -1),
    )


def test_body_contact_and_termination_from_contact_sensors():
    env = make_env("aow_flat", 3, domain_rand={"push_robots": False}, init={"random_episode_start": False})
    try:
        env.reset()
        lay_on_belly(env, [1], height=0.12)  # legs through the floor: thighs and shanks touch, base not
        lay_on_belly(env, [2], height=0.05)  # base on the ground
        s = env.sim.state()
        names = env.sim.contact_names
        assert s.contacts[0].sum() == 0  # standing robot: only the wheels touch, and they are not watched
        assert s.contacts[1, names.index("LF_THIGH_link")] > 0 and s.contacts[1, names.index("base_trunk")] == 0
        assert s.contacts[2, names.index("base_trunk")] > 0
        assert not any("WHEEL" in n for n in names)
        _, _, costs, dones, infos = env.step(torch.zeros(3, env.num_actions))
        k = env.cost_names.index("body_contact")
        assert costs[:, k].tolist() == [0.0, 1.0, 1.0]
        assert dones.tolist() == [False, True, True] and not infos["time_outs"].any()
    finally:
        env.close()


def test_rough_env_scan_is_the_collision_surface():
    small = {"kind": "rough", "num_rows": 3, "num_cols": 4, "tile_size": 4.0, "border": 1.0}
    env = make_env("aow_rough", 2, seed=4, terrain=small, domain_rand={"push_robots": False})
    try:
        obs = env.reset()
        model, data = env.sim.env_models[0], env.sim.datas[0]
        assert model.geom_type[env.sim.scene.floor_geom_id] == mujoco.mjtGeom.mjGEOM_HFIELD
        # Randomised physics variants are copies of the scene's model: the same field in each.
        assert len(env.sim.models) > 1
        for variant in env.sim.models:
            assert np.array_equal(variant.hfield_data, env.sim.model.hfield_data)
        s = env.sim.state()
        yaw = torch.atan2(
            2 * (s.base_quat[0, 0] * s.base_quat[0, 3] + s.base_quat[0, 1] * s.base_quat[0, 2]),
            1 - 2 * (s.base_quat[0, 2] ** 2 + s.base_quat[0, 3] ** 2),
        ).item()
        pts = env.robot.height_scan.points
        c, sn = math.cos(yaw), math.sin(yaw)
        x, y, z = s.base_pos[0].tolist()
        term = env.obs_spec["critic"].term("height_scan")
        scan = obs["critic"][0, term.slice].numpy()
        floor = env.sim.scene.floor_geom_id
        for k in range(0, 187, 17):  # a ray against the very field the wheels collide with
            wx, wy = x + c * pts[k, 0] - sn * pts[k, 1], y + sn * pts[k, 0] + c * pts[k, 1]
            dist = mujoco.mj_rayHfield(model, data, floor, np.array([wx, wy, 5.0]), np.array([0, 0, -1.0]))
            h = 5.0 - dist
            expected = np.clip(z - 0.5 - h, -1.0, 1.0) * 5.0
            assert scan[k] == pytest.approx(expected, abs=1e-3)
    finally:
        env.close()


def test_curriculum_in_env_after_long_walk_and_fall():
    small = {"kind": "rough", "num_rows": 4, "num_cols": 2, "tile_size": 4.0, "border": 2.0, "max_init_level": 1}
    env = make_env(
        "aow_rough", 2, terrain=small, domain_rand={"push_robots": False}, init={"random_episode_start": False}
    )
    try:
        env.reset()
        env.curriculum.levels[:] = 1
        env.reset()
        zero = torch.zeros(2, env.num_actions)
        # Robot 0 "walked" 3 m (more than half a 4 m tile) and times out; robot 1 falls over.
        o = env.origins
        pos = torch.stack([o[0] + torch.tensor([3.0, 0.0, 0.62]), o[1] + torch.tensor([0.0, 0.0, 0.62])])
        upside_down = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
        env.sim.reset(
            torch.tensor([0, 1]),
            pos,
            upside_down,
            torch.zeros(2, 3),
            torch.zeros(2, 3),
            env.default_joint_pos.expand(2, -1),
            torch.zeros(2, env.num_actions),
        )
        env.episode_length[0] = env.max_episode_length - 1
        by_kind = env.curriculum.mean_level_by_kind()  # the levels the ending episodes were on
        _, _, _, dones, infos = env.step(zero)
        assert dones.tolist() == [True, True] and infos["time_outs"].tolist() == [True, False]
        assert env.curriculum.levels.tolist() == [2, 0]
        assert "terrain_level" in infos["episode"]
        # One episode timed out, the other was upside down: half and half, nothing else.
        ends = {k: v for k, v in infos["episode"].items() if k.startswith("ends/")}
        assert ends == {
            "ends/sim_failure": 0.0,
            "ends/orientation": 0.5,
            "ends/contact": 0.0,  # reset upside down 0.62 m up: nothing touches yet
            "ends/time_out": 0.5,
        }
        assert by_kind and all(infos["episode"][f"terrain_level/{k}"] == v for k, v in by_kind.items())
    finally:
        env.close()


def test_the_joint_speed_trip_ends_the_episode_where_a_joint_passes_its_bound():
    """A 0.5 rad step of a knee's target moves it fast: with the trip at 0.2 x the actuator
    limit (1.5 rad/s for a 7.5 rad/s knee) the episode ends as a failure, not a time-out; without
    the trip, or at the controller's 2 x, the same motion runs on."""
    ended = {}
    for trip in (None, 2.0, 0.2):
        env = make_env(
            "aow_flat",
            1,
            seed=2,
            domain_rand={"push_robots": False, "observation_noise": False},
            terminations={**NO_FAIL, "joint_speed_trip": trip},
            init={"random_episode_start": False, "base_vel_range": 0.0, "joint_pos_scale": (1.0, 1.0)},
        )
        try:
            env.reset()
            kick = torch.zeros(1, env.num_actions)
            kick[0, env.joint_names.index("LF_KFE")] = 1.0  # +0.5 rad of target
            done_at = None
            for step in range(1, 11):
                _, _, _, dones, infos = env.step(kick)
                if dones.any():
                    assert not infos["time_outs"].any()
                    assert infos["episode"]["ends/joint_speed_trip"] == 1.0 and infos["episode"]["ends/time_out"] == 0.0
                    done_at = step
                    break
            ended[trip] = done_at
        finally:
            env.close()
    assert ended[None] is None and ended[2.0] is None
    assert ended[0.2] is not None and ended[0.2] <= 3
