"""Batched rotation helpers (quaternions as (w, x, y, z), MuJoCo's convention)."""

from __future__ import annotations

import torch


def quat_rotate(quat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Rotate vectors by unit quaternions: v' = q v q*. Shapes (..., 4) and (..., 3)."""
    w = quat[..., :1]
    xyz = quat[..., 1:]
    t = 2.0 * torch.linalg.cross(xyz, vec, dim=-1)
    return vec + w * t + torch.linalg.cross(xyz, t, dim=-1)


def quat_rotate_inverse(quat: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """Rotate world vectors into the frame of ``quat`` (q* v q): world -> body."""
    w = quat[..., :1]
    xyz = quat[..., 1:]
    t = 2.0 * torch.linalg.cross(xyz, vec, dim=-1)
    return vec - w * t + torch.linalg.cross(xyz, t, dim=-1)


def yaw_from_quat(quat: torch.Tensor) -> torch.Tensor:
    """Heading angle (rotation about world z) of each quaternion, in (-pi, pi]."""
    w, x, y, z = quat.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def roll_pitch_from_quat(quat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll and pitch (ZYX Euler convention) of each quaternion."""
    w, x, y, z = quat.unbind(-1)
    roll = torch.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = torch.asin((2.0 * (w * y - z * x)).clamp(-1.0, 1.0))
    return roll, pitch


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """Quaternions of pure rotations about z by ``yaw``; shape (..., 4)."""
    half = 0.5 * yaw
    zero = torch.zeros_like(half)
    return torch.stack([torch.cos(half), zero, zero, torch.sin(half)], dim=-1)


def wrap_to_pi(angle: torch.Tensor) -> torch.Tensor:
    """Angles mapped into [-pi, pi)."""
    return torch.remainder(angle + torch.pi, 2.0 * torch.pi) - torch.pi


def yaw_rotate_xy(yaw: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Rotate 2-D points (P, 2) by each yaw (N,) about z: returns (N, P, 2)."""
    c = torch.cos(yaw)[:, None]
    s = torch.sin(yaw)[:, None]
    px, py = points[:, 0][None, :], points[:, 1][None, :]
    return torch.stack([c * px - s * py, s * px + c * py], dim=-1)
