"""FOCOPS (Zhang et al. 2020), first order, with normalized advantages as in the paper.

Per sample, with the per-state KL(pi' || pi) of the current to the rollout policy::

    loss = mean[(KL_s - (1 / lambda) r (A~_R - sum_i nu_i A~_Ci)) * 1(KL_s <= delta)]

Samples whose KL already exceeds delta drop out of the loss (FOCOPS's trust region). nu_i is
updated once per iteration, nu_i <- clip(nu_i + alpha_nu (J_Ci - eps_i), 0, nu_max).
Defaults (Table III, best run): nu = 0.1, alpha_nu = 0 (fixed), lambda = 0.5; delta = 0.02 and
nu_max = 2 as in Zhang et al.; eps = 0.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from training.algorithms import losses
from training.algorithms.base import ConstrainedPPO, MinibatchContext, RolloutStats


class FOCOPS(ConstrainedPPO):
    name: ClassVar[str] = "focops"
    uses_cost_critics: ClassVar[bool] = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.nu = torch.full((self.num_cost_groups,), float(self.params.nu_init), device=self.device)

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        p = self.params
        if p.nu_lr > 0:
            self.nu = (self.nu + p.nu_lr * (stats.cost_return - self.cost_limits)).clamp(0.0, p.nu_max)

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        p = self.params
        kl = losses.gaussian_kl(ctx.action_mean, ctx.action_std, ctx.old_action_mean, ctx.old_action_std)
        combined = ctx.advantages - (ctx.cost_advantages * self.nu).sum(-1)
        inside = (kl.detach() <= p.kl_bound).to(kl.dtype)
        ctx.info["inside_fraction"] = inside.mean()
        weight = self.nu.sum()
        ctx.info["penalty_share"] = weight / (1.0 + weight)
        return ((kl - ctx.ratio * combined / p.temperature) * inside).mean()

    def penalty_scalars(self) -> dict[str, float]:
        return {f"nu/{n}": float(v) for n, v in zip(self.group_names, self.nu, strict=True)}

    def extra_state(self) -> dict[str, Any]:
        return {"nu": self.nu.clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.nu = state["nu"].to(self.device).clone()
