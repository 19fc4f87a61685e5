"""Velocity commands (vx, vy, yaw rate in the base frame): sampling and heading control."""

from __future__ import annotations

import torch

from training.mdp.math import wrap_to_pi


def sample_uniform(
    n: int, low: torch.Tensor, high: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """n commands drawn uniformly in the box [low, high] (per component), [n, len(low)]."""
    u = torch.rand((n, low.shape[0]), generator=generator, device=low.device, dtype=low.dtype)
    return low + (high - low) * u


def apply_modes(commands: torch.Tensor, modes: torch.Tensor) -> torch.Tensor:
    """Commands [n, >=3] with pure modes applied: per row ``modes`` [n] (long) is 0 for the full
    box, 1 forward (vx only), 2 sideways (vy only), 3 turn (yaw rate only)."""
    keep = torch.ones_like(commands[:, :3])
    for mode, component in ((1, 0), (2, 1), (3, 2)):
        rows = modes == mode
        keep[rows] = 0.0
        keep[rows, component] = 1.0
    out = commands.clone()
    out[:, :3] = commands[:, :3] * keep
    return out


def draw_modes(n: int, shares: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """[n] mode indices: 1..len(shares) with the given probabilities, 0 (the full box) otherwise."""
    u = torch.rand(n, generator=generator, device=shares.device)
    edges = torch.cumsum(shares, 0)
    return torch.searchsorted(edges, u, right=True).add(1).remainder(shares.numel() + 1)


def zero_standing(commands: torch.Tensor, standing: torch.Tensor) -> torch.Tensor:
    """Commands with the rows flagged in ``standing`` [n] set to zero (stand still)."""
    return commands * (~standing)[:, None].to(commands.dtype)


def zero_small_linear(commands: torch.Tensor, threshold: float) -> torch.Tensor:
    """Drop horizontal commands shorter than ``threshold`` (m/s): too small to track or see."""
    keep = (commands[:, :2].norm(dim=-1) >= threshold).to(commands.dtype)
    out = commands.clone()
    out[:, :2] *= keep[:, None]
    return out


def reverse_where(
    new: torch.Tensor, current: torch.Tensor, reverse: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """``new`` [n, k] with the rows flagged in ``reverse`` [n] replaced by ``-current``, clipped
    to [low, high] per component (a range need not be symmetric: 2 m/s forward, 1 m/s back)."""
    reversed_ = torch.maximum(torch.minimum(-current, high), low)
    return torch.where(reverse[:, None], reversed_, new)


def heading_to_yaw_rate(
    target_heading: torch.Tensor, yaw: torch.Tensor, gain: float, low: float, high: float
) -> torch.Tensor:
    """Heading mode: yaw-rate command clip(gain * wrap(heading - yaw), low, high)."""
    return (gain * wrap_to_pi(target_heading - yaw)).clamp(low, high)
