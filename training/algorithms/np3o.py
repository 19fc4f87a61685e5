"""N-P3O: P3O with per-cost normalized cost advantages (the paper's method, Section III-B).

Per cost group i, with the rollout's cost-advantage mean mu_i and standard deviation sigma_i
(over the whole rollout and all ranks) and normalized advantages A~ = (A - mu) / sigma::

    L_Ci^CLIP,N = mean(max(r A~_Ci, clip(r) A~_Ci))
    L_Ci^VIOL,N = L_Ci^CLIP,N + ((1 - gamma)(J_Ci - eps_i) + mu_i) / sigma_i
    loss        = -L_R^CLIP,N + sum_i kappa * max(0, L_Ci^VIOL,N)

The ReLU is applied to the minibatch mean (the violation of the constraint estimate), not per
sample. J_Ci is estimated as the mean GAE cost return over the rollout (see
:mod:`training.algorithms.rollout`).

kappa schedule (appendix C, "Scheduling Constraint Minimization"): a closed form in the
iteration number i (0 for the first update), never compounded step by step::

    kappa_i = min(kappa_max, kappa_init * kappa_growth**i)

The appendix's schedule is min(0.2, 0.1 * 1.0004**i): kappa starts at half its cap and
reaches it after ln 2 / ln 1.0004 = 1733 iterations. Table III reports one kappa per run
(N-P3O: 1, P3O: 120); we read it as the schedule's cap kappa_max and keep the appendix's shape,
so the defaults are kappa_max = 1 (N-P3O) or 120 (P3O), kappa_init = kappa_max / 2,
kappa_growth = 1.0004. The appendix's literal numbers are kappa_init = 0.1, kappa_max = 0.2;
kappa_growth = 1 gives a constant kappa = kappa_init.

``kappa_adapt`` makes kappa an exact penalty whose weight is raised until it is large enough, as
exact penalty methods update their penalty parameter: per cost group, kappa_i = schedule_i *
scale_i, and after every rollout whose sampled constraint estimate cost_rate_i / (1 - gamma)
exceeds eps_i, scale_i *= 1 + kappa_adapt_i; by default it is never lowered (inside the constraint
the ReLU switches the penalty off whatever its weight; lowering it after satisfied rollouts let the
cost sit above the limit for no return on the toy CMDP, and on Hopper over 3 M steps traded holding
the limit for return: docs/benchmarks.md), and kappa_i stays at most ``kappa_adapt_max``.
``kappa_relax_margin`` m (opt-in) also divides scale_i by 1 + kappa_adapt_i after every rollout
whose estimate is below (1 - m) eps_i, never below 1 (the schedule). Default (``kappa_adapt`` not
set): 0.05 for every cost group with a positive limit eps_i, 0 (the paper's schedule) for a group
with eps_i = 0, the paper's robot setting; an explicit ``kappa_adapt``, 0 included, applies to
every group. Why: P3O's penalty max(0, L^VIOL) is exact only when kappa exceeds the constraint's
optimal Lagrange multiplier; normalizing the cost advantages fixes kappa's scale against the
reward's (kappa = 1: equal weights) but not that multiplier. An active penalty's gradient is kappa
times that of the normalized cost surrogate whatever the size of the violation (the constant part
of L^VIOL,N only switches the ReLU, and its division by sigma_C shrinks as the violation grows), so
a task whose reward pays for the cost more than kappa penalizes it (a velocity limit on a task that
rewards speed) keeps breaking the constraint at any J_C (docs/benchmarks.md). The sampled cost
rate, not the GAE estimate J_C, decides "violated": a lagging cost critic makes J_C low. With eps_i
= 0 any cost violates, so an explicit kappa_adapt there raises kappa to its cap (which is why the
default leaves it off).
"""

from __future__ import annotations

from typing import Any, ClassVar

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
        # [G] multiplier of the scheduled kappa per group (``kappa_adapt``; stays 1 without it)
        self.kappa_scale = torch.ones(self.num_cost_groups, device=self.device)
        # [G] kappa_adapt per group, resolved from the limits (KappaParams.kappa_adapt_rates)
        rates = self.params.kappa_adapt_rates(self.cost_limits.tolist())
        self.kappa_adapt_rates = torch.tensor(rates, dtype=torch.float32, device=self.device)

    @property
    def kappa_init(self) -> float:
        p = self.params
        return p.kappa_max / 2.0 if p.kappa_init is None else p.kappa_init

    def kappa_at(self, iteration: int) -> float:
        p = self.params
        return losses.kappa_schedule(iteration, self.kappa_init, p.kappa_max, p.kappa_growth)

    @property
    def adapts_kappa(self) -> bool:
        """Whether any cost group's kappa is raised after violating rollouts."""
        return bool((self.kappa_adapt_rates > 0).any())

    def begin_update(self, stats: RolloutStats, iteration: int) -> None:
        self.kappa = self.kappa_at(iteration)
        G = self.num_cost_groups
        if self.adapts_kappa:
            if stats.cost_rate is not None:
                estimate = stats.cost_rate[:G] / (1.0 - self.cfg.gamma)
            else:
                estimate = stats.cost_return[:G]
            violated = estimate > self.cost_limits
            raised = self.kappa_scale * (1.0 + self.kappa_adapt_rates)  # rate 0: unchanged
            cap = self.params.kappa_adapt_max / max(self.kappa, 1e-12)
            self.kappa_scale = torch.where(violated, raised, self.kappa_scale).clamp(max=max(cap, 1.0))
            margin = self.params.kappa_relax_margin
            if margin is not None:  # opt-in: lowered inside the limit with a margin, never below the schedule
                inside = estimate < (1.0 - margin) * self.cost_limits  # eps = 0: never inside
                lowered = (self.kappa_scale / (1.0 + self.kappa_adapt_rates)).clamp(min=1.0)
                self.kappa_scale = torch.where(inside, lowered, self.kappa_scale)

    def cost_advantage_scale(self, stats: RolloutStats) -> torch.Tensor | float:
        """Scale of the cost advantages in the loss relative to normalized ones (1: normalized)."""
        return 1.0

    def kappas(self) -> torch.Tensor:
        """The penalty weight of every cost group, [G]: the scheduled kappa times its scale."""
        return self.kappa * self.kappa_scale

    def violations(self, ctx: MinibatchContext) -> torch.Tensor:
        """L_C^VIOL,N per cost group, [G]."""
        return ctx.cost_surrogates_plus(ctx.violation_offsets)

    def policy_loss(self, ctx: MinibatchContext) -> torch.Tensor:
        reward = ctx.reward_surrogate
        viol = self.violations(ctx)
        kappas = self.kappas()
        penalty = (kappas * torch.relu(viol)).sum()
        with torch.no_grad():
            weight = (kappas * (viol > 0) * self.cost_advantage_scale(ctx.stats)).sum()
            ctx.info["penalty_share"] = weight / (1.0 + weight)
            ctx.info["violation_active"] = (viol > 0).float()
        ctx.info["penalty"] = penalty  # logged under no_grad: no copy needed
        ctx.info["violation"] = viol  # one value per cost group
        return -reward + penalty

    def penalty_scalars(self) -> dict[str, float]:
        out = {"kappa": float(self.kappa)}
        if self.adapts_kappa:
            for name, k in zip(self.group_names, self.kappas().tolist(), strict=True):
                out[f"kappa_eff/{name}"] = k
        return out

    def extra_state(self) -> dict[str, Any]:
        return {
            "kappa_scale": self.kappa_scale.detach().cpu().clone(),
            # what the run was trained with, so that a resume continues with the same rates
            "kappa_adapt_rates": self.kappa_adapt_rates.detach().cpu().clone(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if "kappa_adapt_rates" in state:
            self.kappa_adapt_rates = state["kappa_adapt_rates"].to(self.device).clone()
        elif "kappa_scale" not in state:
            # Written before kappa_adapt existed, so trained on the paper's schedule; its config
            # holds no kappa_adapt and would now resolve to the automatic default.
            self.kappa_adapt_rates = torch.zeros_like(self.kappa_adapt_rates)
        # (kappa_scale without rates: written while kappa_adapt had to be given, so its config holds
        # the explicit value the rates were resolved from above.)
        if "kappa_scale" in state:  # checkpoints from before kappa_adapt hold none (scale 1)
            self.kappa_scale = state["kappa_scale"].to(self.device).clone()
