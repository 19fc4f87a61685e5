"""PPO-Lagrangian (Ray et al. 2019) as in the paper's appendix D.

    loss     = -L_R^CLIP,N + sum_i lambda_i L_Ci^CLIP,N          (normalized cost advantages)
    lambda_i = softplus(l_i)

Once per iteration, before the policy update, the unconstrained l_i take one Adam step
(learning rate alpha_lambda) of gradient ascent along J_Ci - eps_i (the paper's eq. 10 with
Adam), and Softplus keeps lambda_i non-negative. Defaults (Table III): l_init = -1.3 (lambda =
softplus(-1.3) = 0.241), alpha_lambda = 0.001, eps = 0. With eps = 0, lambda keeps growing while
any cost remains, as the paper notes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch.nn import functional as F

from training.algorithms.base import ConstrainedPPO, MinibatchContext, RolloutStats


class PPOLagrangian(ConstrainedPPO):
    name: ClassVar[str] = "ppo_lag"
    uses_cost_critics: ClassVar[bool] = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lambda_raw = torch.full(
            (self.num_cost_groups,), float(self.params.lambda_init), device=self.device, requires_grad=True
        )
        self.lambda_optimizer = torch.optim.Adam([self.lambda_raw], lr=self.params.lambda_lr)

    @property
    def multipliers(self) -> torch.Tensor:
        return F.softplus(self.lambda_raw.detach())

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        if self.params.lambda_lr <= 0:
            return
        self.lambda_optimizer.zero_grad(set_to_none=True)
        # Minimizing -l * (J_C - eps) is gradient ascent of l along the constraint violation.
        (-(self.lambda_raw * (stats.cost_return - self.cost_limits).detach()).sum()).backward()
        self.lambda_optimizer.step()

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        reward = ctx.reward_surrogate
        multipliers = self.multipliers
        penalty = (multipliers * ctx.cost_surrogates).sum()
        ctx.info["penalty"] = penalty  # logged under no_grad: no copy needed
        weight = multipliers.sum()
        ctx.info["penalty_share"] = weight / (1.0 + weight)
        return -reward + penalty

    def penalty_scalars(self) -> dict[str, float]:
        return {f"lambda/{n}": float(v) for n, v in zip(self.group_names, self.multipliers, strict=True)}

    def extra_state(self) -> dict[str, Any]:
        return {"lambda_raw": self.lambda_raw.detach().clone(), "lambda_optimizer": self.lambda_optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.lambda_raw.copy_(state["lambda_raw"])
        self.lambda_optimizer.load_state_dict(state["lambda_optimizer"])
