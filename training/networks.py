"""Policy, reward critic and Softplus cost critics as in the paper's appendix (Table IV).

Perceptive variant: the height scan goes through its own encoder, ELU(128) -> ELU(64), is
concatenated with the proprioceptive observation, then ELU(256) -> ELU(64) -> output for the
policy and the reward critic; each cost critic has its own encoder and ELU(128) -> Softplus,
so its value estimate is never negative (appendix B); the cost critics' parameters are stored
stacked over the groups (:class:`CostCritics`). Without a height scan in the layout, the
encoder is dropped (the proprioception-only variant for flat tasks).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from aow_policy.layout import ObservationLayout


@dataclass
class NetworkConfig:
    scan_encoder: tuple[int, ...] = (128, 64)
    actor_hidden: tuple[int, ...] = (256, 64)
    critic_hidden: tuple[int, ...] = (256, 64)
    cost_critic_hidden: tuple[int, ...] = (128,)
    init_noise_std: float = 1.0
    normalize_obs: bool = True
    # A left-right symmetric policy by construction (issue 23): the mean is the average of the
    # network's answer and the mirror of its answer on the mirrored observation, so a gait found
    # to one side exists to the other (training.mdp.symmetry; the mirror is set by the runner and
    # saved with the weights).
    symmetric_actor: bool = False

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


def scan_split(layout: ObservationLayout) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(height-scan indices, proprioception indices) of an observation; None without a scan."""
    if not layout.has("height_scan"):
        return None
    scan = layout.term("height_scan")
    scan_idx = torch.arange(scan.offset, scan.offset + scan.size)
    keep = torch.ones(layout.dim, dtype=torch.bool)
    keep[scan_idx] = False
    return scan_idx, torch.nonzero(keep).squeeze(-1)


class ScanTrunk(nn.Module):
    """Splits the observation into proprioception and height scan, encodes the scan, concatenates."""

    def __init__(self, layout: ObservationLayout, encoder: Sequence[int], hidden: Sequence[int]):
        super().__init__()
        self.obs_dim = layout.dim
        split = scan_split(layout)
        if split is not None:
            self.register_buffer("scan_idx", split[0], persistent=False)
            self.register_buffer("proprio_idx", split[1], persistent=False)
            self.encoder: nn.Module | None = mlp([len(split[0]), *encoder])
            in_dim = len(split[1]) + encoder[-1]
        else:
            self.encoder = None
            in_dim = layout.dim
        self.body = mlp([in_dim, *hidden])
        self.out_dim = hidden[-1]

    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(proprioception, height scan) of an observation; (obs, None) without a scan."""
        if self.encoder is None:
            return obs, None
        return obs.index_select(-1, self.proprio_idx), obs.index_select(-1, self.scan_idx)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.from_parts(*self.split(obs))

    def from_parts(self, proprio: torch.Tensor, scan: torch.Tensor | None) -> torch.Tensor:
        if scan is None:
            return self.body(proprio)
        return self.body(torch.cat([proprio, self.encoder(scan)], dim=-1))


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
        self.symmetric = bool(cfg.symmetric_actor)
        if self.symmetric:
            # Identity until set_mirror (the runner sets them; checkpoints carry them).
            self.register_buffer("mirror_obs_index", torch.arange(layout.dim))
            self.register_buffer("mirror_obs_sign", torch.ones(layout.dim))
            self.register_buffer("mirror_action_index", torch.arange(num_actions))
            self.register_buffer("mirror_action_sign", torch.ones(num_actions))

    def set_mirror(
        self, obs_index: torch.Tensor, obs_sign: torch.Tensor, action_index: torch.Tensor, action_sign: torch.Tensor
    ) -> None:
        """The signed permutations of the observation and the action (training.mdp.symmetry.Mirror)."""
        if not self.symmetric:
            raise ValueError("set_mirror: this actor is not symmetric (network.symmetric_actor is false)")
        for name, value in (
            ("mirror_obs_index", obs_index),
            ("mirror_obs_sign", obs_sign),
            ("mirror_action_index", action_index),
            ("mirror_action_sign", action_sign),
        ):
            buffer = getattr(self, name)
            if tuple(value.shape) != tuple(buffer.shape):
                raise ValueError(f"set_mirror: {name} has shape {tuple(value.shape)}, expected {tuple(buffer.shape)}")
            buffer.copy_(value.to(buffer.dtype))

    def _mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean_head(self.trunk(self.normalizer(obs)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean): what is exported and deployed."""
        mean = self._mean(obs)
        if not self.symmetric:
            return mean
        mirrored_obs = obs.index_select(-1, self.mirror_obs_index) * self.mirror_obs_sign
        answer = self._mean(mirrored_obs)
        return 0.5 * (mean + answer.index_select(-1, self.mirror_action_index) * self.mirror_action_sign)

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


def _weight_grad_chunks(batch: int, device: torch.device) -> int:
    """How many pieces the sample dimension of a weight gradient is cut into on a GPU.

    A batched product whose reduction runs over the samples (x^T @ grad per group) has only a
    few output tiles per group, and cuBLAS does not split the reduction of batched products: on
    an H100 those products took three times the whole PPO update's kernel time. Cut into pieces
    they become many small products summed afterwards (a hand-made split-K)."""
    if device.type != "cuda":
        return 1
    chunks = 1
    while chunks < 64 and batch % (2 * chunks) == 0 and batch // (2 * chunks) >= 256:
        chunks *= 2
    return chunks


class _GroupedLinear(torch.autograd.Function):
    """y[g] = x[g] @ w[g] + b[g] for every group g (x [G, B, in], w [G, in, out], b [G, 1, out])."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias, x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.bmm(grad, weight.transpose(1, 2))
        if ctx.needs_input_grad[1]:
            groups, batch, n_in = x.shape
            chunks = _weight_grad_chunks(batch, grad.device)
            if chunks == 1:
                grad_w = torch.bmm(x.transpose(1, 2), grad)
            else:
                xs = x.reshape(groups * chunks, batch // chunks, n_in).transpose(1, 2)
                gs = grad.reshape(groups * chunks, batch // chunks, grad.shape[-1])
                grad_w = torch.bmm(xs, gs).view(groups, chunks, n_in, -1).sum(1)
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(1, keepdim=True)
        return grad_x, grad_w, grad_b


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One linear layer for G independent networks at once: [G, B, in] -> [G, B, out]."""
    return _GroupedLinear.apply(x, weight, bias)


class CostCritics(nn.Module):
    """The G cost value functions V_Ci(s) >= 0 (Softplus output, appendix B of the paper).

    Each group has its own network (own scan encoder, ELU(128), Softplus head), but they are
    evaluated together: every layer of all G critics is ONE batched product (:func:`grouped_linear`),
    so the operations of a training step do not grow with the number of cost groups. All their
    parameters live in one tensor ``params`` [G, P], row g holding group g's weights and biases;
    :meth:`layers` cuts it into per-layer views, weight [G, in, out] and bias [G, 1, out]. One
    tensor means one gradient to accumulate and one to clip per group, whatever the depth.
    Checkpoints written with one module per critic (keys ``cost_critics.<g>.trunk...``) load too.
    """

    def __init__(self, layout: ObservationLayout, cfg: NetworkConfig, num_groups: int):
        super().__init__()
        self.num_groups = num_groups
        split = scan_split(layout)
        if split is not None:
            self.register_buffer("scan_idx", split[0], persistent=False)
            self.register_buffer("proprio_idx", split[1], persistent=False)
            encoder = [len(split[0]), *cfg.scan_encoder]
            body = [len(split[1]) + cfg.scan_encoder[-1], *cfg.cost_critic_hidden]
        else:
            self.scan_idx = self.proprio_idx = None
            encoder = []
            body = [layout.dim, *cfg.cost_critic_hidden]
        self.num_encoder_layers = max(len(encoder) - 1, 0)
        self.layer_sizes = [*itertools.pairwise(encoder), *itertools.pairwise(body), (body[-1], 1)]
        size = sum(i * o + o for i, o in self.layer_sizes)
        # Without cost groups (plain PPO) no parameter at all: nothing to train, save or clip.
        self.params = nn.Parameter(torch.empty(num_groups, size)) if num_groups else None
        self.reset_parameters()

    def layers(self, flat: torch.Tensor | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(weight [G, in, out], bias [G, 1, out]) views of ``flat`` (default: the parameters;
        also their gradient) per layer: encoder layers, body layers, head."""
        flat = self.params if flat is None else flat
        G, out, start = flat.shape[0], [], 0
        for i, o in self.layer_sizes:
            w = flat[:, start : start + i * o].view(G, i, o)
            b = flat[:, start + i * o : start + i * o + o].view(G, 1, o)
            out.append((w, b))
            start += i * o + o
        return out

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nn.Linear's default initialization, per group: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
        if not self.num_groups:
            return
        for w, b in self.layers():
            bound = 1.0 / math.sqrt(w.shape[1])
            w.uniform_(-bound, bound)
            b.uniform_(-bound, bound)

    def __len__(self) -> int:
        return self.num_groups

    def forward(self, normalized_obs: torch.Tensor) -> torch.Tensor:
        """[batch, obs] (already normalized) -> [batch, groups] non-negative cost values."""
        if self.scan_idx is None:
            return self.from_parts(normalized_obs, None)
        return self.from_parts(
            normalized_obs.index_select(-1, self.proprio_idx), normalized_obs.index_select(-1, self.scan_idx)
        )

    def from_parts(self, proprio: torch.Tensor, scan: torch.Tensor | None) -> torch.Tensor:
        """The same from the observation already split into proprioception and height scan (the
        split of :meth:`ScanTrunk.split`; ``scan`` None without one)."""
        G, B = self.num_groups, proprio.shape[0]
        layers = self.layers()
        if scan is None:
            h = proprio.expand(G, B, proprio.shape[-1])
        else:
            h = scan.expand(G, B, scan.shape[-1])
            for w, b in layers[: self.num_encoder_layers]:
                h = F.elu(grouped_linear(h, w, b))
            h = torch.cat([proprio.expand(G, B, proprio.shape[-1]), h], dim=-1)
        for w, b in layers[self.num_encoder_layers : -1]:
            h = F.elu(grouped_linear(h, w, b))
        w, b = layers[-1]
        return F.softplus(grouped_linear(h, w, b)).squeeze(-1).t()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        convert_legacy_cost_critics(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)


def convert_legacy_cost_critics(state_dict: dict, prefix: str) -> None:
    """In place: per-critic keys ``<prefix><g>.trunk.{encoder,body}.<i>.*`` / ``<g>.head.*`` (one
    nn.Linear per layer, weight [out, in]) -> ``<prefix>params`` [G, P] in :class:`CostCritics`'
    order (per layer: weight as [in, out], then bias)."""
    legacy = [k for k in state_dict if k.startswith(prefix) and k[len(prefix) :].split(".")[0].isdigit()]
    if not legacy:
        return
    per_group: dict[int, dict[str, torch.Tensor]] = {}
    for key in legacy:
        g, rest = key[len(prefix) :].split(".", 1)
        per_group.setdefault(int(g), {})[rest] = state_dict.pop(key)

    def layer_order(name: str) -> tuple[int, int]:
        part = name.split(".")
        if part[0] == "head":
            return (2, 0)
        return (0 if part[1] == "encoder" else 1, int(part[2]))

    groups = [per_group[g] for g in sorted(per_group)]
    names = sorted({r.rsplit(".", 1)[0] for r in groups[0]}, key=layer_order)
    state_dict[f"{prefix}params"] = legacy_rows(
        [[t for n in names for t in (grp[f"{n}.weight"], grp[f"{n}.bias"])] for grp in groups]
    )


def legacy_rows(per_group: list[list[torch.Tensor]]) -> torch.Tensor:
    """[G, P] from each group's per-layer tensors in the old modules' order (weight [out, in],
    bias [out], layer by layer): the parameters, or Adam's moments of them."""
    return torch.stack(
        [torch.cat([t.t().reshape(-1) if t.dim() == 2 else t.reshape(-1) for t in tensors]) for tensors in per_group]
    )


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
        self.cost_critics = CostCritics(critic_layout, cfg, num_cost_groups)

    def critic_values(self, critic_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(reward values [batch], cost values [batch, groups])."""
        return critic_values(self.critic, self.cost_critics, critic_obs)

    def cost_values(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """[batch, groups] cost values (on the reward critic's normalization)."""
        if not len(self.cost_critics):
            return critic_obs.new_zeros(critic_obs.shape[0], 0)
        return self.cost_critics(self.critic.normalizer(critic_obs))


def critic_values(
    critic: ValueCritic, cost_critics: CostCritics, critic_obs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(reward values [batch], cost values [batch, groups]) from one normalization and one
    scan/proprioception split: the cost critics share the reward critic's normalizer."""
    parts = critic.trunk.split(critic.normalizer(critic_obs))
    values = critic.head(critic.trunk.from_parts(*parts)).squeeze(-1)
    if not len(cost_critics):
        return values, critic_obs.new_zeros(critic_obs.shape[0], 0)
    return values, cost_critics.from_parts(*parts)
