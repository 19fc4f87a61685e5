"""Cost terms of the paper's constraints (Section III-A), each with a selectable cost type.

The cost types are the appendix's table (indicator, number of joints, ReLU, ReLU^2): given the
per-joint excess of a quantity over its limit, they reduce it to one cost per environment.
Which joints exceed a limit is decided by :mod:`aow_policy.violations`, the same definition
the online monitor and the bag replay use (strictly greater than the limit).
"""

from __future__ import annotations

from enum import StrEnum

import torch

from aow_policy.violations import any_over, joints_over, outside_range, overrun


class CostType(StrEnum):
    INDICATOR = "indicator"  # 1 if any joint violates, else 0
    COUNT = "count"  # number of joints violating
    RELU = "relu"  # sum_i max(0, |x_i| - limit_i)
    RELU2 = "relu2"  # sum_i max(0, |x_i| - limit_i)^2


def parse_cost_type(value: str | CostType, term: str = "cost") -> CostType:
    try:
        return CostType(value)
    except ValueError:
        raise ValueError(
            f"{term}: unknown cost type {value!r} (expected one of {[t.value for t in CostType]})"
        ) from None


def _sum_excess(excess: torch.Tensor, cost_type: CostType) -> torch.Tensor:
    return excess.sum(-1) if cost_type is CostType.RELU else excess.square().sum(-1)


def limit_cost(values: torch.Tensor, limits: torch.Tensor, cost_type: CostType) -> torch.Tensor:
    """Cost of |values| over per-joint limits [N, J] -> [N] (joint speed, joint torque)."""
    if cost_type is CostType.INDICATOR:
        return any_over(values, limits).to(values.dtype)
    if cost_type is CostType.COUNT:
        return joints_over(values, limits).to(values.dtype)
    return _sum_excess(overrun(values, limits), cost_type)


def position_range_cost(
    joint_pos: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, cost_type: CostType
) -> torch.Tensor:
    """Cost of joint positions outside [lower, upper] (the hip position constraint c_q)."""
    if cost_type is CostType.INDICATOR:
        return outside_range(joint_pos, lower, upper).any(-1).to(joint_pos.dtype)
    if cost_type is CostType.COUNT:
        return outside_range(joint_pos, lower, upper).sum(-1).to(joint_pos.dtype)
    excess = (joint_pos - upper).clamp(min=0.0) + (lower - joint_pos).clamp(min=0.0)
    return _sum_excess(excess, cost_type)


def command_rate(target: torch.Tensor, last_target: torch.Tensor, dt: float) -> torch.Tensor:
    """(q^des_t - q^des_{t-1}) / dt per joint: the quantity of command smoothness c1."""
    return (target - last_target) / dt


def command_second_rate(
    target: torch.Tensor, last_target: torch.Tensor, second_last_target: torch.Tensor, dt: float
) -> torch.Tensor:
    """(q^des_t - 2 q^des_{t-1} + q^des_{t-2}) / dt^2 per joint: the quantity of c2."""
    return (target - 2.0 * last_target + second_last_target) / (dt * dt)


def smoothness_thresholds(speed_limits: torch.Tensor, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's thresholds: qdot* = half the joint speed limit, qddot* = qdot* / dt.

    Joints without a speed constraint (limit +inf) get +inf thresholds: never a cost.
    """
    rate = 0.5 * speed_limits
    return rate, rate / dt


def body_contact_cost(undesired_contacts: torch.Tensor, cost_type: CostType) -> torch.Tensor:
    """Undesired body contact [N, bodies] (counts or flags) -> [N].

    indicator: 1 if any body other than wheels or feet touches anything (self-collision
    included); count: the number of such bodies. ReLU types have no meaning for contacts.
    """
    touching = undesired_contacts > 0
    dtype = torch.get_default_dtype()
    if cost_type is CostType.INDICATOR:
        return touching.any(-1).to(dtype)
    if cost_type is CostType.COUNT:
        return touching.sum(-1).to(dtype)
    raise ValueError(
        f"body_contact: cost type {cost_type.value!r} is not defined for contacts (use indicator or count)"
    )
