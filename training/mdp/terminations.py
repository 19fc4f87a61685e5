"""Termination conditions: each returns a bool tensor [N] (True = end the episode)."""

from __future__ import annotations

import math

import torch


def contact(contacts: torch.Tensor) -> torch.Tensor:
    """Any of the watched bodies (e.g. base, thighs) touching something; contacts [N, B]."""
    return (contacts > 0).any(-1)


def bad_orientation(roll: torch.Tensor, pitch: torch.Tensor, max_roll: float, max_pitch: float) -> torch.Tensor:
    """Roll or pitch beyond its bound (rad)."""
    return (roll.abs() > max_roll) | (pitch.abs() > max_pitch)


def bad_orientation_from_gravity(gravity: torch.Tensor, max_roll: float, max_pitch: float) -> torch.Tensor:
    """The same test on the projected gravity g_b = (sin p, -sin r cos p, -cos r cos p) (ZYX
    Euler angles), which the observation needs anyway: |p| > max_pitch iff |g_x| > sin(max_pitch)
    (max_pitch <= pi/2), and r = atan2(-g_y, -g_z)."""
    roll = torch.atan2(-gravity[:, 1], -gravity[:, 2])
    return (roll.abs() > max_roll) | (gravity[:, 0].abs() > math.sin(max_pitch))


def joint_speed_trip(joint_vel: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """Any joint faster than its bound (rad/s), joint_vel [N, J], bound [J]: the deployment
    controller's plausibility check, past which the node stops the policy and damps."""
    return joints_over(joint_vel, bound).any(-1)


def joints_over(joint_vel: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """[N, J]: which joints are faster than their bound (the ones that trip)."""
    return joint_vel.abs() > bound


def nonfinite(*tensors: torch.Tensor) -> torch.Tensor:
    """Rows with a NaN or inf in any of the given [N, ...] tensors: a simulator blow-up.

    Row sums carry any NaN or inf (inf - inf is NaN), so one finiteness test per row suffices;
    the sums are taken in float64, where the states' magnitudes cannot overflow.
    """
    total = tensors[0].reshape(tensors[0].shape[0], -1).sum(-1, dtype=torch.float64)
    for t in tensors[1:]:
        total = total + t.reshape(t.shape[0], -1).sum(-1, dtype=torch.float64)
    return ~torch.isfinite(total)


def time_out(episode_length: torch.Tensor, max_episode_length: int) -> torch.Tensor:
    """Truncation at the episode length (policy steps): bootstrap, do not treat as failure."""
    return episode_length >= max_episode_length
