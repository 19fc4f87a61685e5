"""Policy, reward critic and Softplus cost critics as in the paper's appendix (Table IV).

Perceptive variant: the height scan goes through its own encoder, ELU(128) -> ELU(64), is
concatenated with the proprioceptive observation, then ELU(256) -> ELU(64) -> output for the
policy and the reward critic; each cost critic has its own encoder and ELU(128) -> Softplus,
so its value estimate is never negative (appendix B). Without a height scan in the layout, the
encoder is dropped (the proprioception-only variant for flat tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from aow_policy.layout import ObservationLayout


@dataclass
class NetworkConfig:
    scan_encoder: tuple[int, ...] = (128, 64)
    actor_hidden: tuple[int, ...] = (256, 64)
    critic_hidden: tuple[int, ...] = (256, 64)
    cost_critic_hidden: tuple[int, ...] = (128,)
    init_noise_std: float = 1.0
    normalize_obs: bool = True

    def validate(self) -> None:
        for name in ("scan_encoder", "actor_hidden", "critic_hidden", "cost_critic_hidden"):
            sizes = getattr(self, name)
            if not sizes or any(int(s) <= 0 for s in sizes):
                raise ValueError(f"network.{name}: expected positive layer sizes, got {sizes!r}")
        if not self.init_noise_std > 0:
            raise ValueError(f"network.init_noise_std: must be positive, got {self.init_noise_std}")


def mlp(sizes: Sequence[int], activate_last: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if activate_last or i < len(sizes) - 2:
            layers.append(nn.ELU())
    return nn.Sequential(*layers)


class ScanTrunk(nn.Module):
    """Splits the observation into proprioception and height scan, encodes the scan, concatenates."""

    def __init__(self, layout: ObservationLayout, encoder: Sequence[int], hidden: Sequence[int]):
        super().__init__()
        self.obs_dim = layout.dim
        if layout.has("height_scan"):
            scan = layout.term("height_scan")
            scan_idx = torch.arange(scan.offset, scan.offset + scan.size)
            keep = torch.ones(layout.dim, dtype=torch.bool)
            keep[scan_idx] = False
            self.register_buffer("scan_idx", scan_idx, persistent=False)
            self.register_buffer("proprio_idx", torch.nonzero(keep).squeeze(-1), persistent=False)
            self.encoder: nn.Module | None = mlp([scan.size, *encoder])
            in_dim = int(keep.sum()) + encoder[-1]
        else:
            self.encoder = None
            in_dim = layout.dim
        self.body = mlp([in_dim, *hidden])
        self.out_dim = hidden[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.encoder is None:
            return self.body(obs)
        proprio = obs.index_select(-1, self.proprio_idx)
        scan = self.encoder(obs.index_select(-1, self.scan_idx))
        return self.body(torch.cat([proprio, scan], dim=-1))


class ObsNormalizer(nn.Module):
    """Running mean and variance of observations (parallel Welford), applied as (x - mean) / std.

    Statistics are buffers, so they are saved in checkpoints and folded into the exported graph.
    `update` takes the batch moments so that distributed training can reduce them across ranks.
    """

    def __init__(self, dim: int, eps: float = 1e-2, clip: float = 5.0):
        super().__init__()
        self.eps, self.clip = eps, clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update_from_moments(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: float) -> None:
        total = self.count + batch_count
        delta = batch_mean - self.mean
        w = float(batch_count / total)
        m2 = self.var * float(self.count) + batch_var * batch_count + delta.pow(2) * float(self.count) * w
        self.mean += delta * w
        self.var.copy_(m2 / float(total))
        self.count.fill_(float(total))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1])
        self.update_from_moments(x.mean(0), x.var(0, unbiased=False), x.shape[0])


class Actor(nn.Module):
    """Gaussian policy: mean from the network, state-independent log standard deviation."""

    def __init__(self, layout: ObservationLayout, num_actions: int, cfg: NetworkConfig):
        super().__init__()
        self.normalizer = ObsNormalizer(layout.dim) if cfg.normalize_obs else nn.Identity()
        self.trunk = ScanTrunk(layout, cfg.scan_encoder, cfg.actor_hidden)
        self.mean_head = nn.Linear(self.trunk.out_dim, num_actions)
        self.log_std = nn.Parameter(torch.full((num_actions,), float(torch.log(torch.tensor(cfg.init_noise_std)))))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean): what is exported and deployed."""
        return self.mean_head(self.trunk(self.normalizer(obs)))

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.forward(obs)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))


class ValueCritic(nn.Module):
    """Reward value function V_R(s)."""

    def __init__(self, layout: ObservationLayout, cfg: NetworkConfig):
        super().__init__()
        self.normalizer = ObsNormalizer(layout.dim) if cfg.normalize_obs else nn.Identity()
        self.trunk = ScanTrunk(layout, cfg.scan_encoder, cfg.critic_hidden)
        self.head = nn.Linear(self.trunk.out_dim, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.normalizer(obs))).squeeze(-1)


class CostCritic(nn.Module):
    """Cost value function V_C(s) >= 0 through a Softplus output (appendix B of the paper)."""

    def __init__(self, layout: ObservationLayout, cfg: NetworkConfig):
        super().__init__()
        self.trunk = ScanTrunk(layout, cfg.scan_encoder, cfg.cost_critic_hidden)
        self.head = nn.Linear(self.trunk.out_dim, 1)

    def forward(self, normalized_obs: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(self.head(self.trunk(normalized_obs))).squeeze(-1)


class ActorCritic(nn.Module):
    """The policy, the reward critic and one cost critic per cost group."""

    def __init__(
        self,
        policy_layout: ObservationLayout,
        critic_layout: ObservationLayout,
        num_actions: int,
        num_cost_groups: int,
        cfg: NetworkConfig,
    ):
        super().__init__()
        cfg.validate()
        self.actor = Actor(policy_layout, num_actions, cfg)
        self.critic = ValueCritic(critic_layout, cfg)
        self.cost_critics = nn.ModuleList(CostCritic(critic_layout, cfg) for _ in range(num_cost_groups))

    def cost_values(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """[batch, groups] cost values; the cost critics share the reward critic's normalizer."""
        normalized = self.critic.normalizer(critic_obs)
        if not len(self.cost_critics):
            return critic_obs.new_zeros(critic_obs.shape[0], 0)
        return torch.stack([c(normalized) for c in self.cost_critics], dim=-1)
