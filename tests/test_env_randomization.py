"""Domain randomisation switches and command sampling inside the environment."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.envs import make_env

QUIET = {"push_robots": False, "observation_noise": False}


def test_action_latency_applies_previous_action():
    env = make_env("aow_flat", 4, domain_rand={**QUIET, "action_latency": True, "latency_probability": 0.5}, seed=3)
    try:
        env.reset()
        env.delayed[:] = torch.tensor([True, False, True, False])
        a1, a2 = torch.full((4, 16), 0.2), torch.full((4, 16), -0.4)
        env.step(a1)
        assert torch.equal(env.applied_actions[[0, 2]], torch.zeros(2, 16))  # still the reset action
        assert torch.equal(env.applied_actions[[1, 3]], a1[[1, 3]])
        obs, *_ = env.step(a2)
        assert torch.equal(env.applied_actions[[0, 2]], a1[[0, 2]])
        assert torch.equal(env.applied_actions[[1, 3]], a2[[1, 3]])
        # The observation's last action is the policy's own latest action, delayed or not.
        term = env.obs_spec["policy"].term("last_action")
        assert torch.equal(obs["policy"][:, term.slice], a2 * term.scale)
        # Leg targets follow the applied (delayed) action.
        legs = env.leg_ids
        expected = env.action_offset[legs] + env.action_scale[legs] * a1[0, legs]
        assert torch.allclose(env.leg_targets[0], expected)
    finally:
        env.close()


def test_observation_noise_only_on_policy_and_configured_terms():
    env = make_env("aow_flat", 8, domain_rand={"push_robots": False, "observation_noise": True})
    try:
        obs = env.reset()
        layout = env.obs_spec["policy"]
        diff = (obs["policy"] - obs["critic"]).abs()
        for name in ("base_lin_vel", "base_ang_vel", "projected_gravity", "joint_pos", "joint_vel"):
            t = layout.term(name)
            bound = env.cfg.observations.noise[name] * t.scale
            assert (diff[:, t.slice] <= bound + 1e-6).all() and (diff[:, t.slice] > 0).any()
        for name in ("velocity_commands", "last_action"):
            assert (diff[:, layout.term(name).slice] == 0).all()
    finally:
        env.close()


def test_pushes_change_base_velocity_at_the_interval():
    env = make_env(
        "aow_flat",
        6,
        domain_rand={"push_robots": True, "push_interval_s": 0.04, "max_push_vel_xy": 1.0, "observation_noise": False},
        init={"random_episode_start": False, "base_vel_range": 0.0},
    )
    try:
        env.reset()
        zero = torch.zeros(6, env.num_actions)
        env.step(zero)
        before = torch.tensor(np.array([d.qvel[0:2] for d in env.sim.datas]))
        env.step(zero)  # second step: a push (every 2 policy steps)
        after = torch.tensor(np.array([d.qvel[0:2] for d in env.sim.datas]))
        assert (after - before).abs().max() > 0.1
    finally:
        env.close()


def test_commands_ranges_standing_share_and_resampling():
    env = make_env("aow_flat", 50, domain_rand=QUIET, commands={"standing_fraction": 0.25})
    try:
        draws = []
        for _ in range(40):
            env._resample_commands(env._all_ids)
            draws.append(env.commands[:, :3].clone())
        c = torch.cat(draws)
        r = env.robot.commands
        assert (c[:, 0].abs() <= r.lin_vel_x[1]).all() and (c[:, 1].abs() <= r.lin_vel_y[1]).all()
        assert (c[:, 2].abs() <= r.ang_vel_yaw[1]).all()
        standing = (c == 0).all(-1).float().mean().item()
        assert 0.2 < standing < 0.32  # 25 % standing (plus a few short horizontal commands zeroed)
        moving = c[(c != 0).any(-1)]
        assert moving[:, 0].max() > 1.8 and moving[:, 0].min() < -1.8  # the contract's +-2 m/s
    finally:
        env.close()
    env = make_env("aow_flat", 3, domain_rand=QUIET, commands={"resampling_time": 0.04})
    try:
        env.reset()
        first = env.commands.clone()
        env.step(torch.zeros(3, 16))
        assert torch.equal(env.commands, first)
        env.step(torch.zeros(3, 16))  # 2 steps = 0.04 s: new commands
        assert not torch.equal(env.commands, first)
    finally:
        env.close()


def test_heading_mode_turns_towards_the_heading():
    env = make_env("aow_flat", 2, domain_rand=QUIET, commands={"heading_command": True, "standing_fraction": 0.0})
    try:
        env.reset()
        env.commands[:, :2] = torch.tensor([1.0, 0.0])
        env.commands[:, 3] = torch.tensor([1.0, -0.5])  # target headings
        yaw = torch.zeros(2)
        env._update_heading_commands(yaw)
        assert env.commands[:, 2].tolist() == pytest.approx([0.5, -0.25])  # gain 0.5 * error
        env.commands[:, 3] = torch.tensor([math.pi, -math.pi])
        env._update_heading_commands(yaw)
        assert env.commands[:, 2].abs().max() <= 1.5  # clipped to the contract's yaw-rate range
    finally:
        env.close()
