"""Rollout storage with a reward track and one track per cost group, and their GAE.

The reward and the cost groups are stacked into one ``[T, N, 1 + G]`` tensor (column 0 the
reward, columns 1.. the cost groups) so that one vectorized GAE pass computes the advantages
and returns of all of them.

Time-outs (truncation, not termination) are bootstrapped: the step's reward gets
``gamma * V_R(s')`` added and each cost group's cost gets ``gamma * V_Ci(s')``, where ``s'`` is the
state the episode was cut at (``terminal_obs`` when the environment provides it, otherwise the
step's own state as rsl_rl does). Costs are bootstrapped with the cost critic's value, never
with the cost itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """A rollout flattened to ``[T * N, ...]`` for the update."""

    obs: torch.Tensor
    critic_obs: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_action_mean: torch.Tensor
    old_action_std: torch.Tensor  # [A]: the policy's std is state-independent
    old_values: torch.Tensor  # [B]
    old_cost_values: torch.Tensor  # [B, G]
    returns: torch.Tensor  # [B]
    cost_returns: torch.Tensor  # [B, G]
    advantages: torch.Tensor  # [B] raw reward advantages
    cost_advantages: torch.Tensor  # [B, G] raw cost advantages
    cost_rate: torch.Tensor | None = None  # [G] mean cost per step of the rollout (the sampled costs)

    @property
    def size(self) -> int:
        return self.obs.shape[0]


class RolloutStorage:
    def __init__(
        self,
        num_envs: int,
        num_steps: int,
        obs_dim: int,
        critic_obs_dim: int,
        num_actions: int,
        num_cost_groups: int,
        device: torch.device | str = "cpu",
    ):
        T, N, G = num_steps, num_envs, num_cost_groups
        self.num_steps, self.num_envs, self.num_cost_groups = T, N, G
        self.device = torch.device(device)
        z = dict(device=self.device)
        self.obs = torch.zeros(T, N, obs_dim, **z)
        self.critic_obs = torch.zeros(T, N, critic_obs_dim, **z)
        self.actions = torch.zeros(T, N, num_actions, **z)
        self.log_probs = torch.zeros(T, N, **z)
        self.action_mean = torch.zeros(T, N, num_actions, **z)
        self.action_std = torch.ones(num_actions, **z)
        # Column 0: reward track; columns 1..G: cost groups.
        self.signals = torch.zeros(T, N, 1 + G, **z)
        self.values = torch.zeros(T, N, 1 + G, **z)
        self.dones = torch.zeros(T, N, **z)
        self.returns = torch.zeros(T, N, 1 + G, **z)
        self.advantages = torch.zeros(T, N, 1 + G, **z)
        self.cost_sum = torch.zeros(G, **z)  # the sampled costs of the rollout, per group
        self.step = 0

    def clear(self) -> None:
        self.step = 0
        self.cost_sum.zero_()

    @torch.no_grad()
    def add(
        self,
        obs: torch.Tensor,
        critic_obs: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        action_mean: torch.Tensor,
        action_std: torch.Tensor,
        rewards: torch.Tensor,
        costs_by_group: torch.Tensor,
        dones: torch.Tensor,
        time_outs: torch.Tensor,
        values: torch.Tensor,
        cost_values: torch.Tensor,
        gamma: float,
        bootstrap_values: torch.Tensor | None = None,
        bootstrap_cost_values: torch.Tensor | None = None,
    ) -> None:
        """Record one step. ``bootstrap_*``: critic values at the state a time-out cut the episode
        at, ``[N]`` and ``[N, G]`` (default: the step's own values)."""
        if self.step >= self.num_steps:
            raise RuntimeError(f"rollout storage is full ({self.num_steps} steps); call clear() first")
        t = self.step
        self.obs[t] = obs
        self.critic_obs[t] = critic_obs
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.action_mean[t] = action_mean
        self.action_std.copy_(action_std)
        self.values[t, :, 0] = values
        self.values[t, :, 1:] = cost_values
        boot = self.values[t].clone()
        if bootstrap_values is not None:
            boot[:, 0] = bootstrap_values
        if bootstrap_cost_values is not None:
            boot[:, 1:] = bootstrap_cost_values
        self.signals[t, :, 0] = rewards
        self.signals[t, :, 1:] = costs_by_group
        self.cost_sum += costs_by_group.sum(0)
        self.signals[t] += gamma * time_outs.to(boot.dtype).unsqueeze(-1) * boot
        self.dones[t] = dones.to(self.dones.dtype)
        self.step += 1

    @torch.no_grad()
    def compute_returns(
        self, last_values: torch.Tensor, last_cost_values: torch.Tensor, gamma: float, lam: float
    ) -> None:
        """GAE(lambda) for the reward and every cost group in one pass (values of the state after
        the last step: ``last_values`` [N], ``last_cost_values`` [N, G])."""
        if self.step != self.num_steps:
            raise RuntimeError(f"rollout holds {self.step} of {self.num_steps} steps")
        next_values = torch.cat([last_values.unsqueeze(-1), last_cost_values], dim=-1)
        advantage = torch.zeros_like(next_values)
        for t in reversed(range(self.num_steps)):
            not_done = (1.0 - self.dones[t]).unsqueeze(-1)
            delta = self.signals[t] + not_done * gamma * next_values - self.values[t]
            advantage = delta + not_done * gamma * lam * advantage
            self.advantages[t] = advantage
            self.returns[t] = advantage + self.values[t]
            next_values = self.values[t]

    def batch(self) -> Batch:
        B = self.num_steps * self.num_envs

        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(B, *x.shape[2:])

        return Batch(
            obs=flat(self.obs),
            critic_obs=flat(self.critic_obs),
            actions=flat(self.actions),
            old_log_probs=flat(self.log_probs),
            old_action_mean=flat(self.action_mean),
            old_action_std=self.action_std.clone(),
            old_values=flat(self.values[..., 0]),
            old_cost_values=flat(self.values[..., 1:]),
            returns=flat(self.returns[..., 0]),
            cost_returns=flat(self.returns[..., 1:]),
            advantages=flat(self.advantages[..., 0]),
            cost_advantages=flat(self.advantages[..., 1:]),
            cost_rate=self.cost_sum / float(B),
        )


def minibatch_indices(
    batch_size: int, num_minibatches: int, num_epochs: int, generator: torch.Generator | None = None
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(epoch, minibatch, indices): a fresh permutation per epoch; every sample once per epoch."""
    size = batch_size // num_minibatches
    for epoch in range(num_epochs):
        perm = torch.randperm(batch_size, generator=generator, device=generator.device if generator else None)
        for m in range(num_minibatches):
            end = batch_size if m == num_minibatches - 1 else (m + 1) * size
            yield epoch, m, perm[m * size : end]
