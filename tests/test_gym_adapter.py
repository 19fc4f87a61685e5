"""The Gymnasium adapter: costs from info["cost"] (and final_info on the last step), the
Safety-Gymnasium six-tuple, time-outs and terminal observations, refusals, and training."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from training.config import TrainConfig, apply_override
from training.gym_adapter import GymAdapterError, GymnasiumCMDP, make_gym_env
from training.runner import Runner


def test_costs_time_outs_and_terminal_observations():
    env = make_gym_env("AoWPointMassCost-v0", 3, seed=0)
    assert env.num_envs == 3 and env.num_actions == 1 and env.max_episode_length == 64
    assert env.cost_names == ["cost"] and env.cost_groups == {"cost": ["cost"]}
    obs = env.reset()
    assert obs["policy"].shape == (3, 2) and obs["policy"].dtype == torch.float32
    full = torch.ones(3, 1) * 5.0  # clipped to the action space's high (1.0)
    violations = torch.zeros(3)
    for step in range(1, 65):
        before = obs["policy"][:, 0].clone()
        obs, rewards, costs, dones, infos = env.step(full)
        expected_speed = 0.9 * before + 0.3  # the force was clipped to 1
        assert costs.shape == (3, 1)
        if step < 64:
            assert not dones.any()
            torch.testing.assert_close(obs["policy"][:, 0], expected_speed)
            assert costs[:, 0].tolist() == (expected_speed.abs() > 1.0).float().tolist()
            torch.testing.assert_close(rewards, expected_speed)
        else:  # truncation: post-reset observations, the last ones in terminal_obs, the cost from final_info
            assert dones.all() and infos["time_outs"].all()
            terminal = infos["terminal_obs"]["critic"][:, 0]
            torch.testing.assert_close(terminal, expected_speed)
            assert costs[:, 0].tolist() == (terminal.abs() > 1.0).float().tolist()
            assert (obs["policy"][:, 1] == 0).all()  # reset: last action 0
            assert infos["episode"]["length"] == 64
            assert infos["episode"]["violations/cost"] == pytest.approx(float(violations.mean() + costs[:, 0].mean()))
        violations += costs[:, 0]
    env.close()


def test_next_step_autoreset_is_refused():
    vec = gym.make_vec("AoWPointMassCost-v0", num_envs=2, vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP})
    with pytest.raises(GymAdapterError, match="SAME_STEP"):
        GymnasiumCMDP(vec)
    vec.close()


class SafetyStyleVectorEnv:
    """Duck-typed Safety-Gymnasium vector env: step returns (obs, reward, cost, terminated, truncated, info)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012
    num_envs = 2
    single_observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    single_action_space = gym.spaces.Box(-2, 2, (2,), np.float32)

    def __init__(self, with_cost: bool = True):
        self.with_cost = with_cost
        self.last_action = None

    def reset(self, seed=None):
        return np.zeros((2, 3), np.float32), {}

    def step(self, action):
        self.last_action = action
        obs = np.ones((2, 3), np.float32)
        done = np.array([False, True])
        if self.with_cost:
            return obs, np.array([1.0, 2.0]), np.array([0.0, 3.0]), np.zeros(2, bool), done, {}
        return obs, np.array([1.0, 2.0]), np.zeros(2, bool), done, {}


def test_safety_gymnasium_six_tuple_and_missing_costs():
    env = GymnasiumCMDP(SafetyStyleVectorEnv(), max_episode_length=10)
    env.reset()
    _, rewards, costs, dones, infos = env.step(torch.tensor([[5.0, -5.0], [0.5, 0.0]]))
    assert env.vec_env.last_action.tolist() == [[2.0, -2.0], [0.5, 0.0]]  # clipped to the action space
    assert costs[:, 0].tolist() == [0.0, 3.0] and rewards.tolist() == [1.0, 2.0]
    assert dones.tolist() == [False, True] and infos["time_outs"].tolist() == [False, True]
    assert infos["episode"]["violations/cost"] == 1.0 and infos["episode"]["cost/cost"] == 3.0
    no_cost = GymnasiumCMDP(SafetyStyleVectorEnv(with_cost=False))
    no_cost.reset()
    with pytest.raises(GymAdapterError, match="info lacks 'cost'"):
        no_cost.step(torch.zeros(2, 2))


def test_runner_trains_on_a_gymnasium_task(tmp_path):
    data = TrainConfig(
        task="gym:AoWPointMassCost-v0", algo="np3o", num_envs=4, num_steps_per_env=16, iterations=2
    ).to_dict()
    for a in ("network.actor_hidden=[16,16]", "network.critic_hidden=[16,16]", "network.cost_critic_hidden=[16]"):
        apply_override(data, a)
    r = Runner(TrainConfig.from_dict(data), tmp_path, progress=False, tensorboard=False)
    history = r.learn()
    assert len(history) == 2 and "cost_return/cost" in history[-1] and "kappa" in history[-1]
    assert (tmp_path / "model_2.pt").is_file()


def test_unknown_gymnasium_task_is_refused_before_anything_runs():
    from training.config import ConfigError
    from training.runner import check_task

    check_task("gym:AoWPointMassCost-v0")
    with pytest.raises(ConfigError, match="Nope"):
        check_task("gym:Nope-v9")
