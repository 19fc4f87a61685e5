"""Binding the C kernels of :mod:`aow_policy._control` to the controller core's preallocated buffers.

Each kernel is bound once, at the core's construction, to the arrays it reads and writes; a
bound kernel is then called with no array arguments in the control step (no conversions, no
allocation). They do the NumPy path's arithmetic in the same order, so commands are identical
bit for bit; the core keeps the NumPy path for everything a kernel does not cover and words every
error itself. ``kernels`` is the module (the core passes its own reference, which tests switch off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from aow_policy.controller_config import ControllerConfig


@dataclass(frozen=True)
class OdometryKernel:
    """``read(msg)`` -> 0 (accepted, written into the inputs) or the refusal code (1: non-finite,
    2: quaternion norm, 3: implausible speed); ``scratch[fields[k]]`` holds yaw, quaternion norm,
    linear speed and angular speed for the wording."""

    read: Callable[[Any], int]
    scratch: np.ndarray
    fields: tuple[int, int, int, int]


def bind_odometry(kernels: ModuleType, base_inputs: np.ndarray, config: ControllerConfig) -> OdometryKernel:
    """The Odometry conversion and its checks, writing position, linear and angular velocity and
    projected gravity into ``base_inputs`` (the observation inputs' block in that order)."""
    # position, linear, angular, gravity (= the inputs block), quaternion, then the scalars
    # at ODOM_YAW, ODOM_QUATERNION_NORM, ODOM_LINEAR_SPEED, ODOM_ANGULAR_SPEED
    scratch = np.full(kernels.ODOM_SIZE, np.nan)
    k = kernels
    fields = (k.ODOM_YAW, k.ODOM_QUATERNION_NORM, k.ODOM_LINEAR_SPEED, k.ODOM_ANGULAR_SPEED)
    read = kernels.odometry(
        scratch,
        base_inputs,
        config.twist_frame == "parent",
        config.quaternion_norm_tolerance,
        config.max_base_linear_speed,
        config.max_base_angular_speed,
    )
    return OdometryKernel(read, scratch, fields)


def bind_joint_check(
    kernels: ModuleType, read: np.ndarray, center: np.ndarray, half: np.ndarray, measured: np.ndarray
) -> Callable[[], bool]:
    """``|read - center| <= half`` for every value (position and velocity rows); copies ``read``
    into ``measured`` only if all pass."""
    return kernels.plausible_copy(read, center, half, measured)


def bind_action_targets(
    kernels: ModuleType,
    *,
    policy_out: np.ndarray,
    clip_low: np.ndarray | None,
    clip_high: np.ndarray | None,
    scale: np.ndarray,
    offset: np.ndarray,
    action: np.ndarray,
    last_action: np.ndarray,
    measured_position: np.ndarray,
    target_sources: np.ndarray,
    target_gather: np.ndarray,
    command_targets: np.ndarray,
    targets_low: np.ndarray,
    targets_high: np.ndarray,
) -> Callable[[], bool]:
    """The policy output -> clipped joint targets (the core's NumPy path in one call); False on a
    non-finite action."""
    return kernels.action_targets(
        policy_out,
        clip_low,
        clip_high,
        scale,
        offset,
        action,
        last_action,
        measured_position,
        target_sources,
        target_gather,
        command_targets,
        targets_low,
        targets_high,
    )
