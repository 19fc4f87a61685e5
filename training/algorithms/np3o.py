"""N-P3O: P3O with per-cost normalized cost advantages (the paper's method, Section III-B).

Per cost group i, with the rollout's cost-advantage mean mu_i and standard deviation sigma_i
(over the whole rollout and all ranks) and normalized advantages A~ = (A - mu) / sigma::

    L_Ci^CLIP,N = mean(max(r A~_Ci, clip(r) A~_Ci))
    L_Ci^VIOL,N = L_Ci^CLIP,N + ((1 - gamma)(J_Ci - eps_i) + mu_i) / sigma_i
    loss        = -L_R^CLIP,N + sum_i kappa * max(0, L_Ci^VIOL,N)

The ReLU is applied to the minibatch mean (the violation of the constraint estimate), not per
sample. J_Ci is estimated as the mean GAE cost return over the rollout (see
:mod:`training.algorithms.base`).

kappa schedule (appendix C, "Scheduling Constraint Minimization"): a closed form in the
iteration number i (0 for the first update), never compounded step by step::

    kappa_i = min(kappa_max, kappa_init * kappa_growth**i)

The appendix's schedule is min(0.2, 0.1 * 1.0004**i): kappa starts at half its cap and
reaches it after ln 2 / ln 1.0004 = 1733 iterations. Table III reports one kappa per run
(N-P3O: 1, P3O: 120); we read it as the schedule's cap kappa_max and keep the appendix's shape,
so the defaults are kappa_max = 1 (N-P3O) or 120 (P3O), kappa_init = kappa_max / 2,
kappa_growth = 1.0004. The appendix's literal numbers are kappa_init = 0.1, kappa_max = 0.2;
kappa_growth = 1 gives a constant kappa = kappa_init.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from training.algorithms import losses
from training.algorithms.base import ConstrainedPPO, MinibatchContext, RolloutStats


class NP3O(ConstrainedPPO):
    name: ClassVar[str] = "np3o"
    uses_cost_critics: ClassVar[bool] = True
    normalize_cost_advantages: ClassVar[bool] = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kappa = self.kappa_at(0)

    @property
    def kappa_init(self) -> float:
        p = self.params
        return p.kappa_max / 2.0 if p.kappa_init is None else p.kappa_init

    def kappa_at(self, iteration: int) -> float:
        p = self.params
        return losses.kappa_schedule(iteration, self.kappa_init, p.kappa_max, p.kappa_growth)

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        self.kappa = self.kappa_at(iteration)

    def violations(self, ctx: MinibatchContext) -> torch.Tensor:
        """L_C^VIOL,N per cost group, [G]."""
        return ctx.cost_surrogates_plus(ctx.violation_offsets)

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        reward = ctx.reward_surrogate
        viol = self.violations(ctx)
        penalty = self.kappa * torch.relu(viol).sum()
        ctx.info["penalty"] = penalty  # logged under no_grad: no copy needed
        ctx.info["violation"] = viol  # one value per cost group
        return -reward + penalty

    def penalty_scalars(self) -> dict[str, float]:
        return {"kappa": float(self.kappa)}
