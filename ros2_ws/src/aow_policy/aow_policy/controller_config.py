"""The controller core's settings (:class:`ControllerConfig`), each checked against its range.

The node exposes each setting as a parameter of the same name (``node_support.CONTROLLER_PARAMS``
declares them from these fields); sim-to-sim passes them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from aow_policy.heightmap import SAMPLING_METHODS
from aow_policy.messages import TWIST_FRAMES


class ConfigError(ValueError):
    """A controller setting is out of its range; the message names it."""


@dataclass(frozen=True)
class ControllerConfig:
    """Settings of the core (the node exposes each as a parameter of the same name)."""

    stand_up_duration: float = 2.0  # s, measured pose -> default pose
    initial_state: str = "ZERO_TORQUE"  # or DAMPING
    joint_states_max_age: float = 0.05  # s since the last accepted JointState
    odometry_max_age: float = 0.05  # s since the last accepted Odometry
    height_map_max_age: float = 0.5  # s since the last accepted GridMap
    height_map_stamp_max_age: float = 1.0  # s between the map's header stamp and now; <= 0: unchecked
    command_max_age: float = 0.5  # s; older -> zero velocity command
    height_map_layer: str = "elevation"
    height_sampling: str = "bilinear"  # or nearest
    min_height_valid_fraction: float = 0.5  # share of scan points that must have map data
    twist_frame: str = "child"  # Odometry twist frame: child (REP 105) or parent
    joint_position_margin: float = 0.2  # rad a measurement may lie beyond the position limits
    joint_velocity_factor: float = 2.0  # |measured velocity| up to this times the actuator limit
    max_base_linear_speed: float = 10.0  # m/s, plausibility of odometry
    max_base_angular_speed: float = 20.0  # rad/s
    quaternion_norm_tolerance: float = 0.1  # | |q| - 1 | above this: corrupt orientation
    check_frames: bool = True  # odometry header.frame_id must equal the map's frame_id

    def __post_init__(self) -> None:
        positive = (
            "joint_states_max_age",
            "odometry_max_age",
            "height_map_max_age",
            "command_max_age",
            "joint_position_margin",
            "quaternion_norm_tolerance",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"controller setting {name} must be a positive number, got {value!r}")
        if not (math.isfinite(self.stand_up_duration) and self.stand_up_duration >= 0):
            raise ConfigError(f"stand_up_duration must be >= 0 s, got {self.stand_up_duration!r}")
        for name in ("joint_velocity_factor", "max_base_linear_speed", "max_base_angular_speed"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"controller setting {name} must be positive, got {getattr(self, name)!r}")
        if self.initial_state not in ("ZERO_TORQUE", "DAMPING"):
            raise ConfigError(f"initial_state must be ZERO_TORQUE or DAMPING, got {self.initial_state!r}")
        if self.height_sampling not in SAMPLING_METHODS:
            raise ConfigError(f"height_sampling must be one of {SAMPLING_METHODS}, got {self.height_sampling!r}")
        if not 0 < self.min_height_valid_fraction <= 1:
            raise ConfigError(f"min_height_valid_fraction must be in (0, 1], got {self.min_height_valid_fraction!r}")
        if self.twist_frame not in TWIST_FRAMES:
            raise ConfigError(f"twist_frame must be one of {TWIST_FRAMES}, got {self.twist_frame!r}")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> ControllerConfig:
        """Build from a parameter dict, ignoring keys that are not core settings."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})
