"""Height scan: terrain heights at the contract's grid points around the robot, from a GridMap.

Rules (stated once, tested in tests/test_heightmap.py):

* Grid: the contract's points (``robot.height_scan.points``, flattening order ix * ny + iy) are
  rotated by the base yaw only and translated to the base position (x, y), in the map's frame.
* Sampling ``"bilinear"`` (default): bilinear interpolation between the four cell centres around
  the point, in unwrapped index space. Between the outermost cell centres and the map border the
  edge cells are used (constant over that half cell). ``"nearest"``: the value of the cell that
  contains the point (grid_map's ``k = floor((pose + length / 2 - p) / resolution)``).
* NaN cells (unknown in grid_map) get no weight; the weights of the remaining neighbours are
  renormalised. A point whose weighted neighbours are all NaN has no data.
* A point outside the map (its cell index is outside [0, size)) has no data.
* Points without data are filled with the median height of the points that have data in the
  same scan. If fewer than ``min_valid_fraction`` of the points have data the scan is invalid:
  :func:`height_scan` raises :class:`HeightScanError`, and the controller treats it as a fault.
* Map age: :func:`height_scan` refuses a map whose header stamp is older than ``max_age``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aow_policy.messages import GridMapLayer, grid_map_layer
from aow_policy.robot import HeightScanGrid, Robot

SAMPLING_METHODS = ("bilinear", "nearest")


class HeightScanError(ValueError):
    """The map cannot give a usable scan (too few points with data, or too old)."""


class HeightScanner:
    """Samples a :class:`GridMapLayer` at the rotated scan grid into preallocated buffers."""

    def __init__(self, grid: HeightScanGrid, method: str = "bilinear", min_valid_fraction: float = 0.5):
        if method not in SAMPLING_METHODS:
            raise ValueError(f"height scan method must be one of {SAMPLING_METHODS}, got {method!r}")
        if not 0.0 < min_valid_fraction <= 1.0:
            raise ValueError(f"min_valid_fraction must be in (0, 1], got {min_valid_fraction}")
        self.grid = grid
        self.method = method
        self.min_valid_fraction = min_valid_fraction
        points = np.asarray(grid.points, dtype=np.float64)
        n = len(points)
        self.num_points = n
        self._local = np.ascontiguousarray(points.T)  # (2, n): rows x, y
        self._rot = np.empty((2, 2))
        self._world = np.empty((2, n))
        self._k = np.empty((2, n))  # continuous unwrapped index (rows, cols)
        self._k0 = np.empty((2, n))
        self._frac = np.empty((2, n))
        self._i = np.empty((2, n), dtype=np.intp)
        self._i1 = np.empty((2, n), dtype=np.intp)
        self._flat = np.empty((4, n), dtype=np.intp)
        self._w = np.empty((4, n))
        self._v = np.empty((4, n), dtype=np.float32)
        self._v64 = np.empty((4, n))
        self._finite = np.empty((4, n), dtype=bool)
        self._inside = np.empty(n, dtype=bool)
        self._inside2 = np.empty((2, n), dtype=bool)
        self._wsum = np.empty(n)
        self.heights = np.empty(n)
        self.valid = np.zeros(n, dtype=bool)
        self.valid_fraction = 0.0

    def scan(self, layer: GridMapLayer, base_x: float, base_y: float, base_yaw: float) -> np.ndarray:
        """Heights (map frame, metres) at the grid points; returns the internal buffer.

        ``valid`` and ``valid_fraction`` describe which points had data; points without data hold
        the fill value (median of the valid ones), or NaN when no point had data.
        """
        if not (math.isfinite(base_x) and math.isfinite(base_y) and math.isfinite(base_yaw)):
            raise HeightScanError(f"base pose is not finite: x={base_x}, y={base_y}, yaw={base_yaw}")
        c, s = math.cos(base_yaw), math.sin(base_yaw)
        rot = self._rot
        rot[0, 0], rot[0, 1], rot[1, 0], rot[1, 1] = c, -s, s, c
        world, k = self._world, self._k
        np.matmul(rot, self._local, out=world)
        # Unwrapped continuous index of the point: k = (corner_centre - p) / res, where the corner
        # cell centre is pose + length / 2 - res / 2 (facts.md), so cell centres sit at integers.
        res = layer.resolution
        inv = 1.0 / res
        k[0] = world[0]
        k[0] -= layer.center_x + 0.5 * layer.length_x - 0.5 * res - base_x
        k[1] = world[1]
        k[1] -= layer.center_y + 0.5 * layer.length_y - 0.5 * res - base_y
        np.multiply(k, -inv, out=k)
        # Inside the map: -0.5 <= k < size - 0.5 on both axes.
        inside, inside2 = self._inside, self._inside2
        np.greater_equal(k, -0.5, out=inside2)
        np.logical_and(inside2[0], inside2[1], out=inside)
        np.less(k[0], layer.rows - 0.5, out=inside2[0])
        np.less(k[1], layer.cols - 0.5, out=inside2[1])
        np.logical_and(inside, inside2[0], out=inside)
        np.logical_and(inside, inside2[1], out=inside)
        if self.method == "bilinear":
            self._bilinear(layer)
        else:
            self._nearest(layer)
        return self._finish()

    def _axis_offsets(self, k_int: np.ndarray, start: int, size: int, stride: int, out: np.ndarray) -> None:
        """Unwrapped integer index along one axis -> its part of the flat buffer offset."""
        np.clip(k_int, 0, size - 1, out=out)
        np.add(out, start, out=out)
        np.remainder(out, size, out=out)
        np.multiply(out, stride, out=out)

    def _bilinear(self, layer: GridMapLayer) -> None:
        k, k0, frac, off0, off1 = self._k, self._k0, self._frac, self._i, self._i1
        np.floor(k, out=k0)
        np.subtract(k, k0, out=frac)
        off0[...] = k0  # integral already; points outside the map are masked later
        np.add(off0, 1, out=off1)
        self._axis_offsets(off0[0], layer.outer_start, layer.rows, layer.row_stride, off0[0])
        self._axis_offsets(off0[1], layer.inner_start, layer.cols, layer.col_stride, off0[1])
        self._axis_offsets(off1[0], layer.outer_start, layer.rows, layer.row_stride, off1[0])
        self._axis_offsets(off1[1], layer.inner_start, layer.cols, layer.col_stride, off1[1])
        flat, w = self._flat, self._w
        # corners in order (x0, y0), (x0, y1), (x1, y0), (x1, y1)
        np.add(off0[0], off0[1], out=flat[0])
        np.add(off0[0], off1[1], out=flat[1])
        np.add(off1[0], off0[1], out=flat[2])
        np.add(off1[0], off1[1], out=flat[3])
        fx, fy = frac[0], frac[1]
        np.subtract(1.0, fx, out=w[0])
        np.multiply(w[0], fy, out=w[1])  # (1 - fx) fy
        np.subtract(w[0], w[1], out=w[0])  # (1 - fx)(1 - fy)
        np.multiply(fx, fy, out=w[3])  # fx fy
        np.subtract(fx, w[3], out=w[2])  # fx (1 - fy)
        self._gather_weighted(layer)

    def _nearest(self, layer: GridMapLayer) -> None:
        off = self._i
        np.add(self._k, 0.5, out=self._k0)
        np.floor(self._k0, out=self._k0)
        off[...] = self._k0
        self._axis_offsets(off[0], layer.outer_start, layer.rows, layer.row_stride, off[0])
        self._axis_offsets(off[1], layer.inner_start, layer.cols, layer.col_stride, off[1])
        np.add(off[0], off[1], out=self._flat[0])
        self._flat[1:] = self._flat[0]
        self._w.fill(0.0)
        self._w[0] = 1.0
        self._gather_weighted(layer)

    def _gather_weighted(self, layer: GridMapLayer) -> None:
        v, v64, w, finite, wsum = self._v, self._v64, self._w, self._finite, self._wsum
        np.take(layer.values, self._flat, out=v)
        v64[...] = v
        np.isfinite(v64, out=finite)
        np.multiply(w, finite, out=w)  # NaN cells get no weight
        np.copyto(v64, 0.0, where=~finite)
        np.multiply(v64, w, out=v64)
        np.sum(w, axis=0, out=wsum)
        np.sum(v64, axis=0, out=self.heights)
        np.greater(wsum, 1e-9, out=self.valid)
        np.logical_and(self.valid, self._inside, out=self.valid)
        np.maximum(wsum, 1e-9, out=wsum)
        np.divide(self.heights, wsum, out=self.heights)

    def _finish(self) -> np.ndarray:
        count = int(np.count_nonzero(self.valid))
        self.valid_fraction = count / self.num_points
        if count < self.num_points:
            fill = float(np.median(self.heights[self.valid])) if count else math.nan
            np.copyto(self.heights, fill, where=~self.valid)
        return self.heights

    @property
    def is_usable(self) -> bool:
        return self.valid_fraction >= self.min_valid_fraction


def height_scan(
    grid_map_msg: Any,
    base_position: Any,
    base_yaw: float,
    robot: Robot,
    layer: str = "elevation",
    *,
    method: str = "bilinear",
    min_valid_fraction: float = 0.5,
    now: float | None = None,
    max_age: float | None = None,
) -> np.ndarray:
    """Terrain heights (m, map frame) at the contract's 187 grid points, in flattening order.

    ``base_position`` is (x, y[, z]) in the map's frame, ``base_yaw`` the heading there. With
    ``now`` and ``max_age`` (seconds, same clock as the map's header stamp) an old map is refused.
    See the module docstring for sampling, NaN and outside-map rules.
    """
    gm = grid_map_layer(grid_map_msg, layer)
    if max_age is not None and now is not None and now - gm.stamp > max_age:
        raise HeightScanError(f"grid map is {now - gm.stamp:.3f} s old (max {max_age} s)")
    scanner = HeightScanner(robot.height_scan, method=method, min_valid_fraction=min_valid_fraction)
    heights = scanner.scan(gm, float(base_position[0]), float(base_position[1]), float(base_yaw))
    if not scanner.is_usable:
        raise HeightScanError(
            f"only {scanner.valid_fraction:.0%} of the height scan points have map data "
            f"(need {min_valid_fraction:.0%}): robot off the map or map unknown there"
        )
    return heights.copy()
