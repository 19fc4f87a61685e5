"""Conversions between ROS 2 messages and numpy arrays, for rclpy's and rosbags' message classes.

One module per message family; this one re-exports them all, the import every caller uses:

* :mod:`aow_policy.msg_common` -- :class:`MessageError`, sequence views, time stamps;
* :mod:`aow_policy.msg_joint_state` -- JointState -> arrays in contract order, by name;
* :mod:`aow_policy.msg_odometry` -- Odometry -> base state (REP 105 twist frame);
* :mod:`aow_policy.msg_twist` -- Twist -> velocity command;
* :mod:`aow_policy.msg_grid_map` -- GridMap -> one layer's storage;
* :mod:`aow_policy.msg_builders` -- outgoing messages through a :class:`MessageFactory`;
* :mod:`aow_policy.ros2_control` -- the command split for ros2_control's forward controllers.

Incoming messages are read by field names only, so an rclpy message object and a rosbags
dataclass convert alike. Joints are matched by name everywhere.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from aow_policy import msg_grid_map as _msg_grid_map
from aow_policy import msg_joint_state as _msg_joint_state
from aow_policy.msg_builders import (
    MessageFactory,
    float64_multi_array_msg,
    float64_multi_array_to_array,
    grid_map_msg,
    joint_command_msg,
    joint_state_msg,
    odometry_msg,
    twist_msg,
)
from aow_policy.msg_common import MessageError, as_array, seconds_to_sec_nanosec, stamp_to_seconds
from aow_policy.msg_grid_map import GridMapLayer, grid_map_layer
from aow_policy.msg_joint_state import JointStateArrays, JointStateReader, MissingJointsError, joint_state_to_arrays
from aow_policy.msg_odometry import TWIST_FRAMES, BaseState, odometry_to_base_state, read_odometry
from aow_policy.msg_twist import twist_to_command
from aow_policy.ros2_control import Ros2ControlCommands

# the bound C GridMap readers, one dict shared with msg_grid_map (tests look into it here)
_grid_map_readers = _msg_grid_map._grid_map_readers

__all__ = [
    "TWIST_FRAMES",
    "BaseState",
    "GridMapLayer",
    "JointStateArrays",
    "JointStateReader",
    "MessageError",
    "MessageFactory",
    "MissingJointsError",
    "Ros2ControlCommands",
    "as_array",
    "float64_multi_array_msg",
    "float64_multi_array_to_array",
    "grid_map_layer",
    "grid_map_msg",
    "joint_command_msg",
    "joint_state_msg",
    "joint_state_to_arrays",
    "odometry_msg",
    "odometry_to_base_state",
    "read_odometry",
    "seconds_to_sec_nanosec",
    "stamp_to_seconds",
    "twist_msg",
    "twist_to_command",
]


class _Messages(types.ModuleType):
    """``aow_policy.messages._native`` is where the C gathers are switched off (the tests set it to
    None to compare the C and NumPy paths); setting it here sets it in each module that has a C path,
    as when they were one module."""

    @property
    def _native(self) -> Any:
        return _msg_joint_state._native

    @_native.setter
    def _native(self, value: Any) -> None:
        _msg_joint_state._native = value
        _msg_grid_map._native = value


sys.modules[__name__].__class__ = _Messages
