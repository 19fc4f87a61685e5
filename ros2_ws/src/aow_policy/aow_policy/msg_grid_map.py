"""grid_map_msgs/GridMap -> one layer as a view of the message's buffer (:class:`GridMapLayer`).

Storage follows ANYbotics grid_map (see ``shared/reference/facts.md``): each layer is an Eigen
matrix of ``rows`` cells along x by ``cols`` cells along y, stored column-major unless the first
layout dimension is labelled ``row_index``; the buffer is circular with start indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aow_policy.msg_common import MessageError, as_array

try:  # C gathers of float64 buffers (aow_policy/_control.c); optional: the numpy path is the same
    from aow_policy import _control as _native
except ImportError:
    _native = None

_FLOAT32 = np.dtype(np.float32)


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
