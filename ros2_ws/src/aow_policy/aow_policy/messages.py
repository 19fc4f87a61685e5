"""Conversions between ROS 2 messages and numpy arrays, for rclpy's and rosbags' message classes.

Incoming messages are read by field names only, so an rclpy message object and a rosbags
dataclass convert alike; sequences may be ``array.array`` (rclpy), numpy arrays (rosbags) or
lists. Outgoing messages are built through a :class:`MessageFactory` that holds the message
classes (a rosbags typestore's ``types`` or rclpy's generated classes) and knows which
sequence type each flavour wants.

Joints are matched by name: a JointState may list them in any order and carry extra joints;
a joint of the contract that is missing makes the message refused (:class:`MissingJointsError`).

GridMap storage follows ANYbotics grid_map (see ``shared/reference/facts.md``): each layer is an
Eigen matrix of ``rows`` cells along x by ``cols`` cells along y, stored column-major unless the
first layout dimension is labelled ``row_index``; the buffer is circular with start indices.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

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
from aow_policy.msg_joint_state import JointStateArrays, JointStateReader, MissingJointsError, joint_state_to_arrays
from aow_policy.msg_odometry import TWIST_FRAMES, BaseState, odometry_to_base_state, read_odometry
from aow_policy.msg_twist import twist_to_command
from aow_policy.ros2_control import Ros2ControlCommands

try:  # C gathers of float64 buffers (aow_policy/_control.c); optional: the numpy path is the same
    from aow_policy import _control as _native
except ImportError:
    _native = None

_FLOAT64, _FLOAT32 = np.dtype(np.float64), np.dtype(np.float32)

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


# ---- GridMap ---------------------------------------------------------------------------------


@dataclass(slots=True)
class GridMapLayer:
    """One layer of a grid_map_msgs/GridMap, as a view of the message's buffer.

    Buffer cell (i, j) is ``values[i * row_stride + j * col_stride]``; its unwrapped index is
    ``k = ((i - outer_start) mod rows, (j - inner_start) mod cols)`` and its centre is
    ``(center_x, center_y) + 0.5 * (length_x, length_y) - 0.5 * resolution - resolution * k``.
    Rows run along x and columns along y; unknown cells are NaN.
    """

    values: np.ndarray
    rows: int
    cols: int
    row_stride: int
    col_stride: int
    resolution: float
    length_x: float
    length_y: float
    center_x: float
    center_y: float
    outer_start: int
    inner_start: int
    frame_id: str
    stamp: float
    layer: str

    def to_unwrapped(self) -> np.ndarray:
        """(rows, cols) array indexed by the unwrapped index k (k = (0, 0) is the +x, +y corner)."""
        ii = (np.arange(self.rows) + self.outer_start) % self.rows
        jj = (np.arange(self.cols) + self.inner_start) % self.cols
        return self.values[ii[:, None] * self.row_stride + jj[None, :] * self.col_stride]

    def cell_centers(self) -> tuple[np.ndarray, np.ndarray]:
        """x of each unwrapped row and y of each unwrapped column (map frame)."""
        kx, ky = np.arange(self.rows), np.arange(self.cols)
        x = self.center_x + 0.5 * self.length_x - 0.5 * self.resolution - self.resolution * kx
        y = self.center_y + 0.5 * self.length_y - 0.5 * self.resolution - self.resolution * ky
        return x, y


_COLUMN, _ROW = "column_index", "row_index"


_grid_map_readers: dict[str, Any] = {}  # layer name -> bound C reader (aow_policy._control.grid_map)


def grid_map_layer(msg: Any, layer: str = "elevation") -> GridMapLayer:
    """Select a layer of a GridMap by name and describe its storage; raises MessageError if malformed."""
    if _native is not None:  # the common case in one C call; anything else (and every error) below
        reader = _grid_map_readers.get(layer)
        if reader is None:
            if len(_grid_map_readers) >= 16:
                _grid_map_readers.clear()
            reader = _grid_map_readers[layer] = _native.grid_map(layer, np.ndarray, _FLOAT32)
        fields = reader(msg)
        if fields is not None:
            return GridMapLayer(*fields, layer)
    layers = msg.layers
    try:
        position = layers.index(layer)
    except ValueError:
        raise MessageError(f"GridMap has no layer {layer!r} (layers: {list(layers)})") from None
    if len(msg.data) != len(layers):
        raise MessageError(f"GridMap has {len(layers)} layer names but {len(msg.data)} data arrays")
    info = msg.info
    res = float(info.resolution)
    if not (res > 0.0 and math.isfinite(res)):
        raise MessageError(f"GridMap.info.resolution must be positive, got {res}")
    q = info.pose.orientation
    if abs(q.x) > 1e-6 or abs(q.y) > 1e-6 or abs(q.z) > 1e-6:
        raise MessageError("GridMap.info.pose.orientation is not identity: rotated grid maps are not supported")
    rows_expected = round(info.length_x / res)
    cols_expected = round(info.length_y / res)

    array_msg = msg.data[position]
    dims = array_msg.layout.dim
    if len(dims) != 2:
        raise MessageError(f"GridMap layer {layer!r}: expected 2 layout dimensions, got {len(dims)}")
    labels = (dims[0].label, dims[1].label)
    if labels == (_COLUMN, _ROW):  # Eigen column-major, grid_map's default
        cols, rows = int(dims[0].size), int(dims[1].size)
        row_stride, col_stride = 1, rows
    elif labels == (_ROW, _COLUMN):
        rows, cols = int(dims[0].size), int(dims[1].size)
        row_stride, col_stride = cols, 1
    else:
        raise MessageError(
            f"GridMap layer {layer!r}: layout labels {list(labels)} are neither "
            f"[{_COLUMN!r}, {_ROW!r}] (column-major) nor [{_ROW!r}, {_COLUMN!r}] (row-major)"
        )
    if (rows, cols) != (rows_expected, cols_expected):
        raise MessageError(
            f"GridMap layer {layer!r}: {rows} x {cols} cells, but length {info.length_x} x {info.length_y} m at "
            f"{res} m/cell gives {rows_expected} x {cols_expected}"
        )
    values = array_msg.data
    if type(values) is not np.ndarray or values.dtype is not _FLOAT32:
        values = as_array(values, np.float32)
    offset = int(array_msg.layout.data_offset)
    if len(values) != offset + rows * cols:
        raise MessageError(
            f"GridMap layer {layer!r}: {len(values)} values, expected {rows * cols} (+ data_offset {offset})"
        )
    if offset:
        values = values[offset:]
    outer, inner = int(msg.outer_start_index), int(msg.inner_start_index)
    if not (0 <= outer < max(rows, 1) and 0 <= inner < max(cols, 1)):
        raise MessageError(f"GridMap start indices ({outer}, {inner}) outside the {rows} x {cols} buffer")
    center, header = info.pose.position, msg.header
    stamp = header.stamp
    # positional: keyword arguments cost more than the rest of this conversion (field order above)
    return GridMapLayer(
        values,
        rows,
        cols,
        row_stride,
        col_stride,
        res,
        float(info.length_x),
        float(info.length_y),
        float(center.x),
        float(center.y),
        outer,
        inner,
        header.frame_id,
        stamp.sec + stamp.nanosec * 1e-9,
        layer,
    )


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
        globals()["_native"] = value  # for the C paths still in this module


sys.modules[__name__].__class__ = _Messages
