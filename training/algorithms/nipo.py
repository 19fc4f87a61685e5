"""N-IPO: IPO's log barrier on the normalized constraint estimate, with the appendix's recovery.

With L_Ci^VIOL,N as in N-P3O (normalized advantages, eps = 0.1 by default) and
phi(x) = log(-x) / k::

    loss = -L_R^CLIP,N - sum_{i: VIOL_i < 0} phi(L_Ci^VIOL,N) + lambda_rec * sum_{i: VIOL_i >= 0} L_Ci^CLIP,N

A constraint counts as satisfied when its estimate J_Ci(pi') <= eps_i, i.e. L_Ci^VIOL,N < 0
(eq. 7), evaluated on each minibatch with the current policy; the barrier is undefined
otherwise, so those constraints get the recovery term, which minimizes their cost surrogate.
(The appendix prints the recovery term with a plus sign inside the objective to be maximized,
which would increase the cost; it is minimized here, as its name and purpose say.)
Defaults (Table III): eps = 0.1, k = 20, lambda_rec = 1.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from training.algorithms.base import ConstrainedPPO, MinibatchContext


class NIPO(ConstrainedPPO):
    name: ClassVar[str] = "nipo"
    uses_cost_critics: ClassVar[bool] = True

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        reward = ctx.reward_surrogate
        surrogate = ctx.cost_surrogates
        viol = surrogate + ctx.violation_offsets
        satisfied = viol.detach() < 0
        barrier = -torch.log((-viol).clamp(min=torch.finfo(viol.dtype).tiny)) / self.params.barrier_k
        recovery = self.params.recovery_coef * surrogate
        penalty = torch.where(satisfied, barrier, recovery).sum()
        ctx.info["penalty"] = penalty  # logged under no_grad: no copy needed
        ctx.info["satisfied_fraction"] = satisfied.float().mean()
        ctx.info["violation"] = viol  # L^VIOL,N per group
        with torch.no_grad():  # d penalty / d L_C^CLIP,N: the barrier's slope, or lambda_rec
            slope = torch.where(
                satisfied, 1.0 / (self.params.barrier_k * (-viol).clamp(min=1e-6)), self.params.recovery_coef
            )
            weight = slope.sum()
            ctx.info["penalty_share"] = weight / (1.0 + weight)
        return -reward + penalty
