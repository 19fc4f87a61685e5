"""The constraint diagnostics every constrained algorithm logs after each update.

Per cost group (:func:`constraint_diagnostics`): J_C, eps, J_C / eps, J_C - eps, mu, sigma, the
normalized and raw constant part of L^VIOL, the correlation of reward and cost advantages, the
sampled J_C. The algorithms add ``penalty_share``: w / (1 + w), with w the weight of the
(normalized) cost advantages against the reward advantages' 1 in the policy gradient of the step
(kappa where the ReLU is active, lambda, nu, ...); 0 means the cost does not act on the policy at
all.
"""

from __future__ import annotations

import math

import torch

from training.algorithms import losses
from training.algorithms.rollout import RolloutStats


def constraint_diagnostics(
    stats: RolloutStats, cost_limits: torch.Tensor, group_names: list[str], gamma: float
) -> dict[str, float]:
    """Per cost group: J_C against eps (``cost_return``, ``cost_limit``, their ratio when eps > 0
    and the gap J_C - eps), the cost advantages' mu and sigma, the normalized constant part of
    L_C^VIOL,N (``violation_offset``: what the paper's ReLU sees) next to its unnormalized
    counterpart (1 - gamma)(J_C - eps), and the correlation of reward and cost advantages."""
    G = len(group_names)
    if not G:
        return {}
    corr = stats.adv_corr[:G] if stats.adv_corr is not None else torch.full((G,), float("nan"))
    gap = stats.cost_return[:G] - cost_limits
    offset = losses.normalized_violation_offset(
        stats.cost_return[:G], cost_limits, stats.cost_adv_mean[:G], stats.cost_adv_std[:G], gamma
    )
    rows = torch.stack(
        [
            stats.cost_return[:G],
            cost_limits,
            gap,
            stats.cost_adv_mean[:G],
            stats.cost_adv_std[:G],
            offset,
            (1.0 - gamma) * gap,
            corr.to(gap),
        ]
    ).tolist()
    out: dict[str, float] = {}
    for g, group in enumerate(group_names):
        out[f"cost_return/{group}"] = rows[0][g]
        out[f"cost_limit/{group}"] = rows[1][g]
        if rows[1][g] > 0:
            out[f"cost_return_over_limit/{group}"] = rows[0][g] / rows[1][g]
        out[f"constraint_gap/{group}"] = rows[2][g]
        out[f"cost_adv_mean/{group}"] = rows[3][g]
        out[f"cost_adv_std/{group}"] = rows[4][g]
        out[f"violation_offset/{group}"] = rows[5][g]
        out[f"violation_offset_raw/{group}"] = rows[6][g]
        if math.isfinite(rows[7][g]):
            out[f"adv_corr/{group}"] = rows[7][g]
    if stats.cost_rate is not None:
        sampled = (stats.cost_rate[:G] / (1.0 - gamma)).tolist()
        for g, group in enumerate(group_names):
            out[f"cost_return_sampled/{group}"] = sampled[g]
    return out
