"""The rollout's statistics and its per-sample fields packed for the minibatch loop.

Rollout statistics (reduced over all ranks, so identical everywhere):

- reward advantages are normalized over the whole rollout, ``(A - mean) / (std + 1e-8)``;
- cost advantages per group: ``mu_i``, ``sigma_i`` over the whole rollout (``sigma`` is the
  unbiased standard deviation plus 1e-8);
- ``J_C`` per group, the estimate of the discounted cost return of the rollout policy: the
  mean over every sample of the rollout of the GAE(lambda) cost return
  ``R_C,t = A_C,t + V_C(s_t)``, i.e. the discounted cost-to-go from the states the policy
  visits (time-outs bootstrapped with the cost critic). (1 - gamma) * J_C is then the
  per-step cost rate the constraint terms use.
- the correlation of the reward and cost advantages per group (``adv_corr``);
- the sampled cost rate per group: ``cost_rate / (1 - gamma)`` estimates the same J_C without the
  cost critic (logged as ``cost_return_sampled``; a lagging critic makes the GAE estimate low).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.distributed import DistContext
from training.storage import Batch

ADV_EPS = 1e-8


@dataclass
class RolloutStats:
    """Statistics of one rollout, identical on every rank."""

    adv_mean: torch.Tensor  # scalar
    adv_std: torch.Tensor  # scalar
    cost_adv_mean: torch.Tensor  # [G]  mu_C
    cost_adv_std: torch.Tensor  # [G]  sigma_C
    cost_return: torch.Tensor  # [G]  J_C
    num_samples: int
    # [G] correlation of the reward and cost advantages over the rollout (None: not computed)
    adv_corr: torch.Tensor | None = None
    # [G] mean sampled cost per step of the rollout (None: not recorded); cost_rate / (1 - gamma)
    # is a critic-free estimate of J_C (the discounted cost-to-go of a stationary rollout)
    cost_rate: torch.Tensor | None = None


def rollout_statistics(batch: Batch, dist: DistContext) -> RolloutStats:
    """Moments of the advantages and the J_C estimate, reduced over ranks in one all-reduce."""
    adv = batch.advantages.double().unsqueeze(-1)
    cadv = batch.cost_advantages.double()
    both = torch.cat([adv, cadv], dim=-1)  # [B, 1 + G]
    G = cadv.shape[-1]
    rate = getattr(batch, "cost_rate", None)
    rate_sums = (rate.double() * both.shape[0]) if rate is not None else torch.zeros(G, dtype=torch.float64)
    rate_sums = rate_sums.to(both.device)
    sums = torch.cat(
        [
            torch.tensor([float(both.shape[0])], dtype=torch.float64, device=both.device),
            both.sum(0),
            both.square().sum(0),
            batch.cost_returns.double().sum(0),
            (adv * cadv).sum(0),
            rate_sums,
        ]
    )
    dist.all_reduce_sum(sums)
    n = sums[0]
    total, sq = sums[1 : 2 + G], sums[2 + G : 3 + 2 * G]
    mean = total / n
    var = ((sq - n * mean.square()) / (n - 1).clamp(min=1)).clamp(min=0)
    std = var.sqrt() + ADV_EPS
    dtype = batch.advantages.dtype
    cross = sums[3 + 3 * G : 3 + 4 * G]
    cov = (cross - n * mean[0] * mean[1:]) / (n - 1).clamp(min=1)
    return RolloutStats(
        adv_mean=mean[0].to(dtype),
        adv_std=std[0].to(dtype),
        cost_adv_mean=mean[1:].to(dtype),
        cost_adv_std=std[1:].to(dtype),
        cost_return=(sums[3 + 2 * G : 3 + 3 * G] / n).to(dtype),
        num_samples=int(n.item()),
        adv_corr=(cov / (std[0] * std[1:])).clamp(-1.0, 1.0).to(dtype),
        cost_rate=(sums[3 + 4 * G :] / n).to(dtype) if rate is not None else None,
    )


@dataclass
class PreparedRollout:
    """A rollout ready for the minibatch loop.

    ``packed`` holds every per-sample field side by side ([B, columns], ``columns`` names the
    slices) so that a minibatch is ONE gather whatever the number of cost groups."""

    batch: Batch
    stats: RolloutStats
    packed: torch.Tensor
    columns: dict[str, slice]
    normalized_violation_offsets: torch.Tensor  # [G] ((1 - gamma)(J_C - eps) + mu) / sigma
    iteration: int
    entropy_coef: float

    def take(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.packed.index_select(0, idx)
        return {name: rows[:, cols] for name, cols in self.columns.items()}
