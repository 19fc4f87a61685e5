"""Violation definitions shared by the training costs, the online monitor and the bag replay.

These functions use only operators that numpy arrays and torch tensors both support
(``abs``, comparisons, ``clip(min=...)``, ``any(-1)``, ``sum(-1)``), so the training costs
(torch, batched) and the monitor and replay (numpy) evaluate the very same expressions.
Limits are per joint in contract order, +inf where a joint is not constrained
(see :attr:`aow_policy.robot.Robot.constraint_velocity_limits`).

A sample "violates" a limit when ``|value| > limit`` (strictly greater: a joint exactly at
its limit is within it), as in the paper's cost definitions (Section III-A).
"""

from __future__ import annotations

from typing import TypeVar

Array = TypeVar("Array")  # numpy.ndarray or torch.Tensor


def over_limit(values: Array, limits: Array) -> Array:
    """Per-joint boolean: |value| > limit. Shapes broadcast: (..., joints)."""
    return abs(values) > limits


def overrun(values: Array, limits: Array) -> Array:
    """Per-joint amount beyond the limit, max(0, |value| - limit); 0 for unconstrained joints."""
    excess = abs(values) - limits
    # inf limits give -inf here, which clip turns into 0.
    return excess.clip(min=0)


def any_over(values: Array, limits: Array) -> Array:
    """Indicator per sample: any joint over its limit (the paper's c_qv and c_tau)."""
    return over_limit(values, limits).any(-1)


def joints_over(values: Array, limits: Array) -> Array:
    """Number of joints over their limits per sample (the appendix's 'number of joints')."""
    return over_limit(values, limits).sum(-1)


def outside_range(values: Array, lower: Array, upper: Array) -> Array:
    """Per-joint boolean: value above its upper or below its lower bound (position limits)."""
    return (values > upper) | (values < lower)
