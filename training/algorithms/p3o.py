"""P3O (Shen et al. 2022) with unnormalized cost advantages, as in the paper's comparison::

    L_Ci^VIOL = mean(max(r A_Ci, clip(r) A_Ci)) + (1 - gamma)(J_Ci - eps_i)
    loss      = -L_R^CLIP + sum_i kappa * max(0, L_Ci^VIOL)

Only the cost advantages differ from N-P3O (the reward advantages are normalized in both), which
is what makes kappa depend on the cost scale (Table III: kappa = 120). The kappa schedule and
J_C estimate are those of :mod:`training.algorithms.np3o`.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from training.algorithms import losses
from training.algorithms.base import MinibatchContext, RolloutStats
from training.algorithms.np3o import NP3O


class P3O(NP3O):
    name: ClassVar[str] = "p3o"
    normalize_cost_advantages: ClassVar[bool] = False

    def cost_advantage_scale(self, stats: RolloutStats) -> torch.Tensor | float:
        return stats.cost_adv_std[: self.num_cost_groups]  # raw cost advantages: sigma times normalized

    def violations(self, ctx: MinibatchContext) -> torch.Tensor:
        return losses.violation(ctx.cost_surrogates, ctx.stats.cost_return, ctx.cost_limits, ctx.gamma)
