"""CRPO (Xu et al. 2021) as in the paper's appendix D.

Before every minibatch step, i.e. after every previous minibatch update, each constraint is
re-estimated for the current policy pi' with the reformulation (eq. 5) on the minibatch::

    J_Ci(pi') ~= J_Ci(pi) + mean(r A_Ci) / (1 - gamma)

(raw cost advantages, importance ratio r of the current policy; the mean is averaged over
ranks so every rank takes the same decision). If every estimate is within its limit the step
maximizes the reward objective L_R^CLIP,N; otherwise it minimizes the normalized cost
surrogate sum_{i violated} L_Ci^CLIP,N of the violated constraints. Default eps = 0.01.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from training.algorithms.base import ConstrainedPPO, MinibatchContext


class CRPO(ConstrainedPPO):
    name: ClassVar[str] = "crpo"
    uses_cost_critics: ClassVar[bool] = True

    def constraint_estimates(self, ctx: MinibatchContext) -> torch.Tensor:
        """J_C(pi') per group by eq. 5, [G] (identical on all ranks)."""
        with torch.no_grad():
            shift = (ctx.ratio.detach().unsqueeze(-1) * ctx.raw_cost_advantages).mean(0)
            shift = self.dist.all_reduce_mean(shift.clone())
            return ctx.stats.cost_return + shift / (1.0 - ctx.gamma)

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        estimates = self.constraint_estimates(ctx)
        violated = estimates > ctx.cost_limits
        ctx.info["reward_step"] = (~violated.any()).float()
        ctx.info["penalty_share"] = violated.any().float()  # a cost step: the cost alone acts
        ctx.info["violation"] = estimates - ctx.cost_limits  # J_C(pi') - eps per group
        if bool(violated.any()):
            return (ctx.cost_surrogates * violated).sum()
        return -ctx.reward_surrogate
