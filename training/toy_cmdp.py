"""A small CMDP on the environment API of ``training.envs``: a point mass with a speed limit.

A batch of point masses on a line. The action is a force (clipped to [-1, 1]); the speed
follows ``v' = retention * v + force_gain * force`` (drag; full throttle settles at
``force_gain / (1 - retention)`` = 3 m/s). The reward tracks a target speed of 1.5 m/s,
``exp(-((v' - 1.5) / 1)^2)``; the cost ``speed_limit`` is the overrun ``max(0, |v'| - 1)`` above
the 1 m/s limit (ReLU, one of the appendix's cost types; ``speed_cost="indicator"`` gives the
joint-speed constraint's indicator instead), both via :mod:`aow_policy.violations`. The
unconstrained optimum (1.5 m/s) breaks the constraint on every step; the constrained optimum
holds the speed just under 1 m/s, which the reward still pays for (exp(-0.25) = 0.78 per step),
as in locomotion, where speed tracking is possible within the joint limits.

Optional second cost group ``smoothness`` (``smoothness_cost=True``): the action rate above a
threshold, ``max(0, |a_t - a_{t-1}| - action_rate_limit)``. ``constraint_rewards=True`` turns
the costs into negative reward terms instead (the paper's PPO baseline with constraint rewards).

Registered as task ``toy_speed_limit``: ``aow-train --task toy_speed_limit --algo np3o ...``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from aow_policy.layout import ObservationLayout
from aow_policy.violations import any_over, overrun


@dataclass
class ToySpeedLimitConfig:
    speed_limit: float = 1.0
    retention: float = 0.9
    force_gain: float = 0.3
    max_force: float = 1.0
    episode_length: int = 64  # policy steps
    initial_speed: tuple[float, float] = (-0.2, 0.5)
    target_speed: float = 1.5  # reward exp(-((v' - target) / width)^2): the target is above the limit
    target_width: float = 1.0
    speed_cost: str = "relu"  # "relu": max(0, |v'| - limit); "indicator": 1 if |v'| > limit
    smoothness_cost: bool = False
    action_rate_limit: float = 0.5
    constraint_rewards: bool = False
    constraint_reward_weight: float = 2.0

    def validate(self) -> None:
        for name in (
            "speed_limit",
            "force_gain",
            "max_force",
            "target_width",
            "action_rate_limit",
            "constraint_reward_weight",
        ):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"env.{name}: must be positive, got {v!r}")
        if not 0 <= self.retention < 1:
            raise ValueError(f"env.retention: must be in [0, 1), got {self.retention!r}")
        if not (isinstance(self.episode_length, int) and self.episode_length > 0):
            raise ValueError(f"env.episode_length: must be a positive integer, got {self.episode_length!r}")
        if self.speed_cost not in ("relu", "indicator"):
            raise ValueError(f"env.speed_cost: must be 'relu' or 'indicator', got {self.speed_cost!r}")
        lo, hi = self.initial_speed
        if not lo <= hi:
            raise ValueError(f"env.initial_speed: expected (low, high) with low <= high, got {self.initial_speed!r}")


class ToySpeedLimitEnv:
    """Batched, torch-only; follows the environment API of /work/INTERFACES.md section 1."""

    resume_exact = True  # state_dict() holds the whole state: resumed runs continue exactly

    def __init__(
        self, num_envs: int, device: str | torch.device = "cpu", seed: int = 0, cfg: ToySpeedLimitConfig | None = None
    ):
        self.cfg = cfg or ToySpeedLimitConfig()
        self.cfg.validate()
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.num_envs = num_envs
        self.num_actions = 1
        self.device = torch.device(device)
        self.max_episode_length = self.cfg.episode_length
        layout = ObservationLayout.build([{"name": "base_lin_vel", "size": 1}, {"name": "last_action", "size": 1}])
        self.obs_spec = {"policy": layout, "critic": layout}
        self.cost_names = ["speed_limit"] + (["action_rate"] if self.cfg.smoothness_cost else [])
        self.cost_groups = (
            {"smoothness": ["action_rate"], "limits": ["speed_limit"]}
            if self.cfg.smoothness_cost
            else {"limits": ["speed_limit"]}
        )
        self.action_layout = {
            "joint_names": ["point_mass"],
            "kinds": ["force"],
            "scales": [1.0],
            "offsets": [0.0],
            "low": [-self.cfg.max_force],
            "high": [self.cfg.max_force],
        }
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        z = dict(device=self.device)
        self.speed = torch.zeros(num_envs, **z)
        self.last_action = torch.zeros(num_envs, **z)
        self.episode_step = torch.zeros(num_envs, dtype=torch.long, **z)
        self.episode_reward = torch.zeros(num_envs, **z)
        self.episode_costs = torch.zeros(num_envs, len(self.cost_names), **z)
        self.episode_violations = torch.zeros(num_envs, len(self.cost_names), **z)

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = torch.stack([self.speed, self.last_action], dim=-1)
        return {"policy": obs, "critic": obs.clone()}

    def _reset_envs(self, ids: torch.Tensor) -> None:
        lo, hi = self.cfg.initial_speed
        n = ids.numel()
        self.speed[ids] = lo + (hi - lo) * torch.rand(n, generator=self.generator, device=self.device)
        self.last_action[ids] = 0.0
        self.episode_step[ids] = 0
        self.episode_reward[ids] = 0.0
        self.episode_costs[ids] = 0.0
        self.episode_violations[ids] = 0.0

    def reset(self) -> dict[str, torch.Tensor]:
        self._reset_envs(torch.arange(self.num_envs, device=self.device))
        # Spread the episodes' phases so time-outs do not all fall on the same step.
        self.episode_step[:] = torch.randint(
            0, self.max_episode_length, (self.num_envs,), generator=self.generator, device=self.device
        )
        return self._observe()

    def step(self, actions: torch.Tensor):
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions: expected shape {(self.num_envs, self.num_actions)}, got {tuple(actions.shape)}")
        cfg = self.cfg
        force = actions[:, 0].clamp(-cfg.max_force, cfg.max_force)
        self.speed = cfg.retention * self.speed + cfg.force_gain * force
        rewards = torch.exp(-((self.speed - cfg.target_speed) / cfg.target_width).square())
        limit = torch.tensor([cfg.speed_limit], device=self.device)
        speed = self.speed.unsqueeze(-1)
        if cfg.speed_cost == "indicator":
            cost_columns = [any_over(speed, limit).float()]
        else:
            cost_columns = [overrun(speed, limit)[:, 0]]
        if cfg.smoothness_cost:
            rate = (force - self.last_action).unsqueeze(-1)
            cost_columns.append(overrun(rate, torch.tensor([cfg.action_rate_limit], device=self.device))[:, 0])
        costs = torch.stack(cost_columns, dim=-1)
        if cfg.constraint_rewards:
            rewards = rewards - cfg.constraint_reward_weight * costs.sum(-1)
        self.last_action = force
        self.episode_step += 1
        self.episode_reward += rewards
        self.episode_costs += costs
        self.episode_violations += (costs > 0).float()
        time_outs = self.episode_step >= self.max_episode_length
        dones = time_outs.clone()
        infos: dict[str, Any] = {"time_outs": time_outs, "episode": {}}
        if bool(dones.any()):
            ids = dones.nonzero().squeeze(-1)
            terminal = self._observe()
            infos["terminal_obs"] = terminal
            episode = {
                "rew/speed": float(self.episode_reward[ids].mean()),
                "length": float(self.episode_step[ids].float().mean()),
            }
            for k, name in enumerate(self.cost_names):
                episode[f"cost/{name}"] = float(self.episode_costs[ids, k].mean())
                episode[f"violations/{name}"] = float(self.episode_violations[ids, k].mean())
            infos["episode"] = episode
            self._reset_envs(ids)
        return self._observe(), rewards, costs, dones, infos

    # Exact resume: the runner saves this with its checkpoints.
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "generator": self.generator.get_state(),
            "speed": self.speed.clone(),
            "last_action": self.last_action.clone(),
            "episode_step": self.episode_step.clone(),
            "episode_reward": self.episode_reward.clone(),
            "episode_costs": self.episode_costs.clone(),
            "episode_violations": self.episode_violations.clone(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if state["speed"].shape != self.speed.shape:
            raise ValueError(f"environment state is for {state['speed'].shape[0]} envs, this env has {self.num_envs}")
        self.generator.set_state(state["generator"])
        for key in ("speed", "last_action", "episode_step", "episode_reward", "episode_costs", "episode_violations"):
            setattr(self, key, state[key].to(self.device).clone())


TOY_TASKS = {"toy_speed_limit": (ToySpeedLimitEnv, ToySpeedLimitConfig)}


def make_toy_env(
    task: str,
    num_envs: int,
    backend: str = "torch",
    device: str | torch.device = "cpu",
    seed: int = 0,
    **overrides: Any,
) -> ToySpeedLimitEnv:
    """Build a toy task; ``overrides`` set fields of its config (unknown names are refused)."""
    if task not in TOY_TASKS:
        raise ValueError(f"unknown toy task {task!r} (known: {sorted(TOY_TASKS)})")
    env_cls, cfg_cls = TOY_TASKS[task]
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"env_overrides.{unknown[0]}: unknown field of {cfg_cls.__name__} (known: {sorted(fields)})")
    if "initial_speed" in overrides:
        overrides["initial_speed"] = tuple(overrides["initial_speed"])
    return env_cls(num_envs, device=device, seed=seed, cfg=cfg_cls(**overrides))
