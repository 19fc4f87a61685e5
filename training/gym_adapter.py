"""Run any Gymnasium vector environment with a cost signal through the training runner.

Costs follow the Safety-Gymnasium conventions: either ``step`` returns six values
``(obs, reward, cost, terminated, truncated, info)`` (Safety-Gymnasium's native API), or it
returns Gymnasium's five and each sub-environment's ``info`` carries ``"cost"`` (what
Safety-Gymnasium's Gymnasium-compatibility wrapper produces). The vector environment must
auto-reset in ``SAME_STEP`` mode (returned observations are post-reset, the last ones are in
``info["final_obs"]`` and the last step's info in ``info["final_info"]``), which is what this
project's environment API promises too; :func:`make_gym_env` builds one that way.

In the runner, ``--task gym:<env id>`` uses this adapter (for example
``aow-train --task gym:AoWPointMassCost-v0 --algo np3o``; a Safety-Gymnasium task id works the
same way once ``safety_gymnasium`` is installed and imported, e.g. via
``gym:safety_gymnasium:SafetyPointGoal1Gymnasium-v0``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from aow_policy.layout import ObservationLayout
from aow_policy.violations import over_limit


class GymAdapterError(ValueError):
    """The Gymnasium environment does not fit the adapter; the message says why."""


class GymnasiumCMDP:
    """Gymnasium ``VectorEnv`` -> the toolkit's environment API (torch tensors, costs, stats)."""

    def __init__(
        self,
        vec_env: gym.vector.VectorEnv,
        device: str | torch.device = "cpu",
        seed: int | None = 0,
        cost_key: str = "cost",
        max_episode_length: int | None = None,
    ):
        self.vec_env = vec_env
        self.device = torch.device(device)
        self.seed = seed
        self.cost_key = cost_key
        mode = vec_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise GymAdapterError(
                f"vector env auto-resets in mode {mode!r}; the adapter needs AutoresetMode.SAME_STEP "
                "(make it with gymnasium.make_vec(..., vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP}))"
            )
        obs_space, act_space = vec_env.single_observation_space, vec_env.single_action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise GymAdapterError(f"observation space must be a Box, got {obs_space}")
        if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
            raise GymAdapterError(f"action space must be a 1-D Box, got {act_space}")
        self.num_envs = vec_env.num_envs
        self.num_actions = int(act_space.shape[0])
        obs_dim = int(np.prod(obs_space.shape))
        layout = ObservationLayout.build([{"name": "gym_obs", "size": obs_dim}])
        self.obs_spec = {"policy": layout, "critic": layout}
        self.cost_names = ["cost"]
        self.cost_groups = {"cost": ["cost"]}
        self._low = act_space.low.astype(np.float64)
        self._high = act_space.high.astype(np.float64)
        self.action_layout = {
            "joint_names": [f"action_{i}" for i in range(self.num_actions)],
            "kinds": ["gym"] * self.num_actions,
            "scales": [1.0] * self.num_actions,
            "offsets": [0.0] * self.num_actions,
            "low": self._low.tolist(),
            "high": self._high.tolist(),
        }
        spec = getattr(vec_env, "spec", None)
        self.max_episode_length = int(max_episode_length or getattr(spec, "max_episode_steps", None) or 1000)
        self.cfg = {"env_id": getattr(spec, "id", None), "num_envs": self.num_envs, "cost_key": cost_key}
        self._episode_reward = np.zeros(self.num_envs)
        self._episode_cost = np.zeros(self.num_envs)
        self._episode_violations = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs)

    def _tensor(self, x: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device).reshape(self.num_envs, -1)

    def _obs(self, obs: Any) -> dict[str, torch.Tensor]:
        t = self._tensor(obs)
        return {"policy": t, "critic": t.clone()}

    def reset(self) -> dict[str, torch.Tensor]:
        obs, _ = self.vec_env.reset(seed=self.seed)
        self._episode_reward[:] = self._episode_cost[:] = self._episode_violations[:] = self._episode_length[:] = 0
        return self._obs(obs)

    def _costs_from_info(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray:
        costs = np.zeros(self.num_envs)
        present = np.zeros(self.num_envs, dtype=bool)
        if self.cost_key in info:
            mask = info.get(f"_{self.cost_key}", np.ones(self.num_envs, dtype=bool))
            costs[mask] = np.asarray(info[self.cost_key], dtype=np.float64)[mask]
            present |= mask
        final = info.get("final_info")
        if isinstance(final, dict) and self.cost_key in final:
            # On the last step of an episode the step's info is in final_info (SAME_STEP mode).
            mask = final.get(f"_{self.cost_key}", np.ones(self.num_envs, dtype=bool)) & done
            costs[mask] = np.asarray(final[self.cost_key], dtype=np.float64)[mask]
            present |= mask
        if not present.all():
            missing = np.flatnonzero(~present).tolist()
            raise GymAdapterError(f"info lacks {self.cost_key!r} for sub-environment(s) {missing}")
        return costs

    def step(self, actions: torch.Tensor):
        a = np.clip(actions.detach().cpu().numpy().astype(np.float64), self._low, self._high)
        result = self.vec_env.step(a.astype(self.vec_env.single_action_space.dtype))
        if len(result) == 6:  # Safety-Gymnasium native: (obs, reward, cost, terminated, truncated, info)
            obs, reward, cost, terminated, truncated, info = result
            cost = np.asarray(cost, dtype=np.float64)
        else:
            obs, reward, terminated, truncated, info = result
            cost = None
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        if cost is None:
            cost = self._costs_from_info(info, done)
        reward = np.asarray(reward, dtype=np.float64)
        self._episode_reward += reward
        self._episode_cost += cost
        self._episode_violations += cost > 0
        self._episode_length += 1
        infos: dict[str, Any] = {
            "time_outs": torch.as_tensor(truncated & ~terminated, device=self.device),
            "episode": {},
        }
        if done.any():
            ids = np.flatnonzero(done)
            infos["episode"] = {
                "rew/total": float(self._episode_reward[ids].mean()),
                "cost/cost": float(self._episode_cost[ids].mean()),
                "violations/cost": float(self._episode_violations[ids].mean()),
                "length": float(self._episode_length[ids].mean()),
            }
            for arr in (self._episode_reward, self._episode_cost, self._episode_violations, self._episode_length):
                arr[ids] = 0
            if "final_obs" in info:
                terminal = np.array(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1))
                for i in ids:
                    terminal[i] = np.asarray(info["final_obs"][i], dtype=np.float32).reshape(-1)
                infos["terminal_obs"] = self._obs(terminal)
        return (
            self._obs(obs),
            torch.as_tensor(reward, dtype=torch.float32, device=self.device),
            torch.as_tensor(cost, dtype=torch.float32, device=self.device).unsqueeze(-1),
            torch.as_tensor(done, device=self.device),
            infos,
        )

    def close(self) -> None:
        self.vec_env.close()


def make_gym_env(
    env_id: str, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, **kwargs: Any
) -> GymnasiumCMDP:
    """``gymnasium.make_vec`` in SAME_STEP auto-reset mode, wrapped for the runner."""
    try:
        vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **kwargs,
        )
    except gym.error.Error as e:
        raise GymAdapterError(f"gymnasium cannot make {env_id!r}: {e}") from None
    return GymnasiumCMDP(vec, device=device, seed=seed)


class PointMassCostEnv(gym.Env):
    """A single point mass with a speed limit, reporting ``info["cost"]`` (Safety-Gymnasium
    style): the Gymnasium twin of :mod:`training.toy_cmdp`, for testing the adapter."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, speed_limit: float = 1.0, retention: float = 0.9, force_gain: float = 0.3):
        self.speed_limit, self.retention, self.force_gain = speed_limit, retention, force_gain
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.speed = 0.0
        self.last_action = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.speed, self.last_action], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.speed = float(self.np_random.uniform(-0.2, 0.5))
        self.last_action = 0.0
        return self._obs(), {}

    def step(self, action):
        force = float(np.clip(np.asarray(action).reshape(-1)[0], -1.0, 1.0))
        self.speed = self.retention * self.speed + self.force_gain * force
        self.last_action = force
        cost = float(over_limit(np.float64(self.speed), self.speed_limit))
        return self._obs(), self.speed, False, False, {"cost": cost}


if "AoWPointMassCost-v0" not in gym.registry:
    gym.register("AoWPointMassCost-v0", entry_point=PointMassCostEnv, max_episode_steps=64)

import training.benchmarks  # noqa: E402, F401 (registers the Safety-Gymnasium velocity tasks)
