"""The environment API of INTERFACES.md section 1 on every registered task."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aow_policy.layout import KNOWN_OBS_TERMS, ObservationLayout
from aow_policy.robot import load_robot
from training.envs import TASKS, make_env, task_config


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_task_api(task, robot):
    env = make_env(task, 3, seed=1, domain_rand={"push_robots": False})
    try:
        wheeled = env.cfg.wheeled
        assert env.num_envs == 3 and env.device == torch.device("cpu")
        assert env.num_actions == (16 if wheeled else 12)
        assert env.max_episode_length == 1000  # 20 s at 50 Hz
        for group in ("policy", "critic"):
            layout = env.obs_spec[group]
            assert isinstance(layout, ObservationLayout)
            assert set(layout.names) <= set(KNOWN_OBS_TERMS)
            assert ObservationLayout.from_list(layout.to_list()) == layout  # round-trips for export
        layout = env.obs_spec["policy"]
        assert layout.has("height_scan") == task.startswith("aow_rough")
        assert list(layout.term("joint_vel").joints) == list(env.action_layout["joint_names"])
        assert all(robot.joint(n).kind == "leg" for n in layout.term("joint_pos").joints)
        al = env.action_layout
        assert set(al) == {"joint_names", "kinds", "scales", "offsets", "low", "high"}
        assert al["joint_names"] == [n for n in robot.joint_names if n in al["joint_names"]]  # contract order
        for i, name in enumerate(al["joint_names"]):
            j = robot.joint(name)
            assert al["scales"][i] == j.action_scale
            if j.kind == "leg":
                assert (al["offsets"][i], al["low"][i], al["high"][i]) == (j.default_position, *j.position_limits)
            else:
                assert (al["offsets"][i], al["low"][i], al["high"][i]) == (0.0, -j.velocity_limit, j.velocity_limit)
        grouped = [n for names in env.cost_groups.values() for n in names]
        assert sorted(grouped) == sorted(env.cost_names)
        if task.startswith("anymal_flat"):
            assert env.cost_names == ["joint_speed"] and env.cost_groups == {"limits": ["joint_speed"]}
        else:
            assert list(env.cost_groups) == ["smoothness", "limits"]
            assert env.cost_groups["smoothness"] == ["smoothness_1", "smoothness_2"]
            assert set(env.cost_names) == {
                "smoothness_1",
                "smoothness_2",
                "joint_speed",
                "joint_torque",
                "hip_position",
                "body_contact",
            }
        dataclasses.asdict(env.cfg)  # saved with runs

        obs = env.reset()
        assert obs["policy"].shape == (3, layout.dim) and obs["critic"].shape == (3, env.obs_spec["critic"].dim)
        obs, rewards, costs, dones, infos = env.step(torch.zeros(3, env.num_actions))
        assert rewards.shape == (3,) and costs.shape == (3, len(env.cost_names))
        assert dones.dtype == torch.bool and infos["time_outs"].dtype == torch.bool
        assert isinstance(infos["episode"], dict)
        with pytest.raises(ValueError, match="actions: expected shape"):
            env.step(torch.zeros(2, env.num_actions))
    finally:
        env.close()


def test_default_observation_values_standing(robot):
    env = make_env("aow_flat", 2, domain_rand={"observation_noise": False, "push_robots": False})
    try:
        env.reset()
        obs, *_ = env.step(torch.zeros(2, env.num_actions))
        layout = env.obs_spec["policy"]
        o = obs["policy"]
        g = o[:, layout.term("projected_gravity").slice]
        assert torch.allclose(g[:, 2], torch.full((2,), -1.0), atol=0.1)
        assert torch.equal(o[:, layout.term("last_action").slice], torch.zeros(2, env.num_actions))
        cmd = o[:, layout.term("velocity_commands").slice]
        assert torch.equal(cmd, env.commands[:, :3] * layout.term("velocity_commands").scale)
        assert torch.equal(obs["policy"], obs["critic"])  # no noise configured
    finally:
        env.close()


def test_overrides_and_bad_names():
    cfg = task_config("aow_flat", episode_length_s=5.0, rewards={"constraint_rewards": True})
    assert cfg.episode_length_s == 5.0 and cfg.rewards.constraint_rewards
    cfg = task_config("aow_flat", **{"costs.terms.joint_speed.type": "relu2"}, domain_rand__friction=[0.2, 0.3])
    assert cfg.costs.terms["joint_speed"].type == "relu2"
    assert cfg.domain_rand.friction == (0.2, 0.3)
    with pytest.raises(ValueError, match=r"override rewards\.constraint_reward: unknown field"):
        task_config("aow_flat", rewards={"constraint_reward": True})
    with pytest.raises(ValueError, match="unknown task 'aow_moon'"):
        task_config("aow_moon")
    with pytest.raises(ValueError, match=r"costs\.terms\.body_contact\.type"):
        task_config("aow_flat", costs={"terms": {"body_contact": {"kind": "body_contact", "type": "relu"}}})
    with pytest.raises(ValueError, match="backend: unknown simulator backend 'bullet'"):
        make_env("aow_flat", 1, backend="bullet")


def test_constraint_rewards_switch_adds_table_one_block():
    env = make_env("aow_flat", 2, rewards={"constraint_rewards": True}, domain_rand={"push_robots": False})
    try:
        for name in (
            "smoothness_1",
            "smoothness_2",
            "torque_limits",
            "speed_limits",
            "pos_upper_limits",
            "pos_lower_limits",
            "body_contact",
        ):
            assert name in env.reward_names
        weights = dict(zip(env.reward_names, env.reward_weights.tolist(), strict=True))
        assert weights["speed_limits"] == pytest.approx(-0.1 * env.dt)
        assert weights["pos_upper_limits"] == pytest.approx(-10.0 * env.dt)
        assert weights["base_height"] == pytest.approx(-0.5 * env.dt)
    finally:
        env.close()


def test_observation_order_and_scales_come_from_the_config():
    order = ["projected_gravity", "base_ang_vel", "joint_pos", "joint_vel", "velocity_commands", "last_action"]
    env = make_env("aow_flat", 1, observations={"order": order, "scales": {**_scales(), "joint_vel": 0.1}})
    try:
        layout = env.obs_spec["policy"]
        assert list(layout.names) == order
        assert layout.term("joint_vel").scale == 0.1
        assert layout.dim == 3 + 3 + 12 + 16 + 3 + 16
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"observations\.order: unknown term"):
        task_config("aow_flat", observations={"order": ["base_lin_vel", "foot_forces"]})


def _scales() -> dict[str, float]:
    return dict(task_config("aow_flat").observations.scales)


def test_hip_range_reward_is_the_hip_position_constraint_as_a_penalty():
    """``hip_range`` pays 1 on a step where any hip is outside its range, else 0: the hip_position
    cost's definition, hand-set joint positions (inside, at the limit, 0.01 rad past either end)."""
    env = make_env("aow_flat_style", 4, **{"rewards.weights.hip_range": -1.0})
    try:
        env.reset()
        k = env.reward_names.index("hip_range")
        weights = dict(zip(env.reward_names, env.reward_weights.tolist(), strict=True))
        assert weights["hip_range"] == pytest.approx(-1.0 * env.dt)
        s = env.sim.state()
        hips = env.hip_ids
        lo, hi = env.pos_lower[hips], env.pos_upper[hips]
        q = s.joint_pos.clone()
        q[:, hips] = 0.0  # robot 0: every hip inside
        q[1, hips] = hi  # robot 1: every hip exactly at its upper limit (not outside)
        q[2, hips[3]] = hi[3] + 0.01  # robot 2: one hip past its upper limit
        q[3, hips[0]] = lo[0] - 0.01  # robot 3: one hip past its lower limit
        s.joint_pos = q
        gravity = torch.tensor([0.0, 0.0, -1.0]).expand(4, 3)
        terms = env._reward_terms(s, s.base_pos[:, 2], gravity)
        assert terms[:, k].tolist() == [0.0, 0.0, 1.0, 1.0]
        # The same steps as the hip_position cost sees them.
        costs, _ = env._cost_terms(s)
        assert costs[:, env.cost_names.index("hip_position")].tolist() == [0.0, 0.0, 1.0, 1.0]
    finally:
        env.close()
    assert "hip_range" not in make_env_reward_names("aow_flat_style")  # off unless a config names it


def make_env_reward_names(task: str) -> list[str]:
    env = make_env(task, 1)
    try:
        return list(env.reward_names)
    finally:
        env.close()
