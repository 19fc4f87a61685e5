"""Outgoing messages: a :class:`MessageFactory` over either flavour of message classes, and builders.

The factory holds the message classes (a rosbags typestore's ``types`` or rclpy's generated
classes) and knows which sequence type each flavour wants, so one builder serves both: the
node's commands, the sim bridge's robot state, the tests' and benchmarks' messages.
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aow_policy.msg_common import MessageError, as_array, seconds_to_sec_nanosec
from aow_policy.msg_defs import GRID_MAP, register_grid_map_types


class MessageFactory:
    """Builds messages from a mapping of type names ("sensor_msgs/msg/JointState") to classes.

    rosbags classes (dataclasses with ``__msgtype__``) take numpy arrays for sequences and need
    every field; rclpy's classes take ``array.array`` for unbounded numeric sequences. Builders
    below always pass every field, so one code path serves both.
    """

    def __init__(self, types: Mapping[str, Any], numpy_sequences: bool | None = None):
        self.types = types
        if numpy_sequences is None:
            numpy_sequences = hasattr(types["sensor_msgs/msg/JointState"], "__msgtype__")
        self.numpy_sequences = numpy_sequences

    @classmethod
    def from_typestore(cls, typestore: Any) -> MessageFactory:
        """A factory over a rosbags typestore (grid_map_msgs are registered into it)."""
        register_grid_map_types(typestore)
        return cls(typestore.types, numpy_sequences=True)

    def new(self, typename: str, **fields: Any) -> Any:
        try:
            cls = self.types[typename]
        except KeyError:
            raise MessageError(f"message type {typename!r} is not available to this factory") from None
        return cls(**fields)

    def float64s(self, values: Any) -> Any:
        a = np.ascontiguousarray(values, dtype=np.float64)
        if self.numpy_sequences:
            return a.copy()
        out = array.array("d")
        out.frombytes(a.tobytes())
        return out

    def float32s(self, values: Any) -> Any:
        a = np.ascontiguousarray(values, dtype=np.float32)
        if self.numpy_sequences:
            return a.copy()
        out = array.array("f")
        out.frombytes(a.tobytes())
        return out

    def time(self, t: float) -> Any:
        sec, nanosec = seconds_to_sec_nanosec(t)
        return self.new("builtin_interfaces/msg/Time", sec=sec, nanosec=nanosec)

    def header(self, t: float, frame_id: str = "") -> Any:
        return self.new("std_msgs/msg/Header", stamp=self.time(t), frame_id=frame_id)

    def vector3(self, x: float, y: float, z: float) -> Any:
        return self.new("geometry_msgs/msg/Vector3", x=float(x), y=float(y), z=float(z))


def joint_state_msg(
    factory: MessageFactory,
    names: Sequence[str],
    position: Any,
    velocity: Any = (),
    effort: Any = (),
    stamp: float = 0.0,
    frame_id: str = "",
) -> Any:
    """sensor_msgs/JointState from arrays (empty velocity/effort allowed, as the message allows)."""
    return factory.new(
        "sensor_msgs/msg/JointState",
        header=factory.header(stamp, frame_id),
        name=list(names),
        position=factory.float64s(position),
        velocity=factory.float64s(velocity),
        effort=factory.float64s(effort),
    )


def float64_multi_array_msg(factory: MessageFactory, values: Any, label: str = "") -> Any:
    """std_msgs/Float64MultiArray with one dimension (as ros2_control's forward controllers read)."""
    data = factory.float64s(values)
    dim = factory.new("std_msgs/msg/MultiArrayDimension", label=label, size=len(data), stride=len(data))
    layout = factory.new("std_msgs/msg/MultiArrayLayout", dim=[dim], data_offset=0)
    return factory.new("std_msgs/msg/Float64MultiArray", layout=layout, data=data)


def float64_multi_array_to_array(msg: Any) -> np.ndarray:
    """std_msgs/Float64MultiArray -> its data (after data_offset)."""
    return as_array(msg.data)[int(msg.layout.data_offset) :]


def twist_msg(factory: MessageFactory, vx: float, vy: float, yaw_rate: float) -> Any:
    return factory.new(
        "geometry_msgs/msg/Twist",
        linear=factory.vector3(vx, vy, 0.0),
        angular=factory.vector3(0.0, 0.0, yaw_rate),
    )


def odometry_msg(
    factory: MessageFactory,
    position: Sequence[float],
    orientation_xyzw: Sequence[float],
    linear_velocity: Sequence[float],
    angular_velocity: Sequence[float],
    stamp: float = 0.0,
    frame_id: str = "odom",
    child_frame_id: str = "base",
) -> Any:
    """nav_msgs/Odometry; velocities are in the base (child) frame, as REP 105 specifies."""
    f = factory
    pose = f.new(
        "geometry_msgs/msg/Pose",
        position=f.new("geometry_msgs/msg/Point", x=float(position[0]), y=float(position[1]), z=float(position[2])),
        orientation=f.new(
            "geometry_msgs/msg/Quaternion", **dict(zip("xyzw", map(float, orientation_xyzw), strict=True))
        ),
    )
    twist = f.new(
        "geometry_msgs/msg/Twist",
        linear=f.vector3(*linear_velocity),
        angular=f.vector3(*angular_velocity),
    )
    return f.new(
        "nav_msgs/msg/Odometry",
        header=f.header(stamp, frame_id),
        child_frame_id=child_frame_id,
        pose=f.new("geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=np.zeros(36)),
        twist=f.new("geometry_msgs/msg/TwistWithCovariance", twist=twist, covariance=np.zeros(36)),
    )


def grid_map_msg(
    factory: MessageFactory,
    layers: Mapping[str, np.ndarray],
    resolution: float,
    center_xy: Sequence[float],
    stamp: float = 0.0,
    frame_id: str = "odom",
    outer_start: int = 0,
    inner_start: int = 0,
    row_major: bool = False,
) -> Any:
    """grid_map_msgs/GridMap from (rows, cols) arrays indexed by the unwrapped index k.

    ``layers[name][kx, ky]`` is the height of the cell centred at
    ``center + 0.5 * length - 0.5 * resolution - resolution * k`` (so [0, 0] is the +x, +y corner),
    stored at buffer index ``(k + start) mod size``, column-major unless ``row_major``.
    """
    if GRID_MAP not in factory.types:
        raise MessageError(f"{GRID_MAP} is not registered with this factory (see aow_policy.msg_defs)")
    shapes = {np.shape(v) for v in layers.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise MessageError(f"grid map layers must be 2-D arrays of one shape, got shapes {sorted(shapes)}")
    rows, cols = next(iter(shapes))
    f = factory
    data = []
    for values in layers.values():
        buffer = np.roll(np.asarray(values, dtype=np.float32), (outer_start, inner_start), axis=(0, 1))
        if row_major:
            flat = buffer.ravel(order="C")
            dims = [("row_index", rows, rows * cols), ("column_index", cols, cols)]
        else:
            flat = buffer.ravel(order="F")
            dims = [("column_index", cols, rows * cols), ("row_index", rows, rows)]
        layout = f.new(
            "std_msgs/msg/MultiArrayLayout",
            dim=[f.new("std_msgs/msg/MultiArrayDimension", label=lb, size=s, stride=st) for lb, s, st in dims],
            data_offset=0,
        )
        data.append(f.new("std_msgs/msg/Float32MultiArray", layout=layout, data=f.float32s(flat)))
    pose = f.new(
        "geometry_msgs/msg/Pose",
        position=f.new("geometry_msgs/msg/Point", x=float(center_xy[0]), y=float(center_xy[1]), z=0.0),
        orientation=f.new("geometry_msgs/msg/Quaternion", x=0.0, y=0.0, z=0.0, w=1.0),
    )
    info = f.new(
        "grid_map_msgs/msg/GridMapInfo",
        resolution=float(resolution),
        length_x=rows * float(resolution),
        length_y=cols * float(resolution),
        pose=pose,
    )
    return f.new(
        GRID_MAP,
        header=f.header(stamp, frame_id),
        info=info,
        layers=list(layers),
        basic_layers=[],
        data=data,
        outer_start_index=int(outer_start),
        inner_start_index=int(inner_start),
    )


def joint_command_msg(factory: MessageFactory, command: Any, stamp: float | None = None) -> Any:
    """A controller command (``joint_names``, ``position``, ``velocity``, ``effort``) as a JointState.

    Legs carry their position target (velocity target 0), wheels their velocity target (position:
    the measured one); see :mod:`aow_policy.controller` for what each state sends.
    """
    return joint_state_msg(
        factory,
        command.joint_names,
        command.position,
        command.velocity,
        command.effort,
        stamp=command.stamp if stamp is None else stamp,
    )
