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

try:  # the C fast path (aow_policy/_scan.c); optional: the NumPy fast path does the same work
    from aow_policy import _scan as _native_scan
except ImportError:
    _native_scan = None

NATIVE_AVAILABLE = _native_scan is not None

SAMPLING_METHODS = ("bilinear", "nearest")


class HeightScanError(ValueError):
    """The map cannot give a usable scan (too few points with data, or too old)."""


def _index_pair_table(size: int, stride: int) -> np.ndarray:
    """(2, 2 * size): row 0 is ``(a mod size) * stride``, row 1 the same for ``a + 1``.

    For start index s, columns s .. s + size - 1 map the unwrapped index u to the buffer offsets
    of u and u + 1 (buffer index ``(u + s) mod size``).
    """
    a = np.arange(2 * size, dtype=np.intp)
    return np.stack([a % max(size, 1), (a + 1) % max(size, 1)]) * stride


class HeightScanner:
    """Samples a :class:`GridMapLayer` at the rotated scan grid into preallocated buffers.

    The point -> index map is one affine matmul; circular start indices and strides are folded
    into per-axis lookup tables (rebuilt only when the map's geometry changes). When the whole
    grid lies between the map's outermost cell centres (checked on its four corners: the map of
    a convex grid under an affine map is convex) and no gathered cell is NaN, the interpolation
    is two lerps without masks or clamps; otherwise a general path applies the edge, outside and
    NaN rules. No numpy call here allocates an array (no broadcasting, no casting buffers).

    With ``native`` (default: when the C module is built) the bilinear fast path runs as one C
    call (:mod:`aow_policy._scan`, the same arithmetic; a scan takes ~5 us instead of ~30 us);
    whatever it declines (edges, outside, NaN) goes the same general path.
    """

    def __init__(
        self,
        grid: HeightScanGrid,
        method: str = "bilinear",
        min_valid_fraction: float = 0.5,
        out: np.ndarray | None = None,
        native: bool | None = None,
    ):
        """``out``: a float64 buffer of the grid's size to write the heights into (e.g. a view).
        ``native``: use the C fast path (None: when it is built; True without it is an error)."""
        if native and _native_scan is None:
            raise ValueError("native height scan requested, but aow_policy._scan is not built (needs a C compiler)")
        self._native = NATIVE_AVAILABLE if native is None else bool(native)
        self._native_ready = False  # C path usable for the current layer
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
        self._local = np.vstack([points.T, np.ones(n)])  # (3, n): x, y, 1
        self._points_xy = np.ascontiguousarray(points[:, :2])  # (n, 2) for the C fast path
        xs, ys = points[:, 0].tolist(), points[:, 1].tolist()
        self._corners = [(x, y) for x in (min(xs), max(xs)) for y in (min(ys), max(ys))]  # Python floats
        self._affine = np.empty((2, 3))
        self._affine_flat = self._affine.reshape(-1)
        self._k = np.empty((2, n))  # continuous unwrapped index (rows, cols)
        self._k0 = np.empty((2, n))
        self._frac = np.empty((2, n))  # rows: fx, fy
        self._idx = np.empty((2, 2, n), dtype=np.intp)  # axis, corner (floor, floor + 1), point
        self._offsets = np.empty((2, 2, n), dtype=np.intp)
        self._flat = np.empty((2, 2, n), dtype=np.intp)  # x corner, y corner, point
        self._v = np.empty((2, 2, n), dtype=np.float32)
        self._v64 = np.empty((2, 2, n))
        self._v_flat, self._ones = self._v64.reshape(-1), np.ones(4 * n)
        self._lerp = np.empty((2, n))
        self._w = np.empty((2, 2, n))
        self._wx = np.empty((2, n))
        self._wy = np.empty((2, n))
        self._finite = np.empty((2, 2, n), dtype=bool)
        self._in = np.empty((2, n), dtype=bool)
        self._in2 = np.empty((2, n), dtype=bool)
        self._inside = np.ones(n, dtype=bool)
        self._wsum = np.empty(n)
        self._lo = np.empty((2, n), dtype=np.intp)  # floor of k: rows ix0, iy0
        self._geometry: tuple[int, ...] | None = None
        self._bound_layer: GridMapLayer | None = None
        self._numpy_layer: GridMapLayer | None = None
        self._row_pairs_all = self._col_pairs_all = np.empty((2, 0), dtype=np.intp)
        self._row_pairs = self._col_pairs = np.empty((2, 0), dtype=np.intp)
        self._row_table = self._col_table = np.empty(0, dtype=np.intp)
        if out is not None and (out.shape != (n,) or out.dtype != np.float64):
            raise ValueError(f"height scan output buffer must be float64 of shape ({n},), got {out.dtype} {out.shape}")
        self.heights = out if out is not None else np.empty(n)
        self.valid = np.zeros(n, dtype=bool)
        self.valid_fraction = 0.0
        # Views used by the fast path, made once: creating a view costs as much as a small ufunc call.
        off, flat, v64, lerp = self._offsets, self._flat, self._v64, self._lerp
        self._fast = (
            self._k, self._k0, self._frac, self._lo, self._lo[0], self._lo[1],
            off[0], off[1], off[0, 0], off[0, 1], off[1, 0], off[1, 1],
            flat, flat[0, 0], flat[0, 1], flat[1, 0], flat[1, 1],
            self._v, v64, self._v_flat, self._ones, v64[0], v64[1], lerp, lerp[0], lerp[1],
            self._frac[0], self._frac[1], self.heights,
        )  # fmt: skip

    def _bind_layer(self, layer: GridMapLayer) -> None:
        """Per-map constants of scan()'s affine map, its interior test and the C fast path."""
        self._bound_layer = layer
        self._numpy_layer = None  # the NumPy path's tables are taken when it first runs on this map
        res = layer.resolution
        self._inv_resolution = 1.0 / res
        half = 0.5 * res
        self._corner_x = layer.center_x + 0.5 * layer.length_x - half
        self._corner_y = layer.center_y + 0.5 * layer.length_y - half
        self._hi_x, self._hi_y = layer.rows - 1 - 1e-9, layer.cols - 1 - 1e-9
        values = layer.values
        self._native_ready = (
            self._native
            and self.method == "bilinear"
            and values.dtype == np.float32
            and values.dtype.isnative
            and values.ndim == 1
            and values.flags.c_contiguous
            and self.heights.flags.c_contiguous  # an ``out`` view with strides: the NumPy path
        )
        self._native_args = (
            values, self._points_xy, self.heights, layer.rows, layer.cols, layer.row_stride, layer.col_stride,
            layer.outer_start, layer.inner_start,
        )  # fmt: skip

    def _numpy_tables(self, layer: GridMapLayer) -> None:
        """Unwrapped index along each axis -> its part of the flat buffer offset (and the next index's).

        The tables are built once per storage geometry over two turns of the circular buffer, so a
        map with other start indices (every new map of a robot-centric map) only takes views.
        """
        if layer is self._numpy_layer:
            return
        self._numpy_layer = layer
        geometry = (layer.rows, layer.cols, layer.row_stride, layer.col_stride)
        if geometry != self._geometry:
            self._row_pairs_all = _index_pair_table(layer.rows, layer.row_stride)
            self._col_pairs_all = _index_pair_table(layer.cols, layer.col_stride)
            self._geometry = geometry
        rows, cols, outer, inner = layer.rows, layer.cols, layer.outer_start, layer.inner_start
        self._row_pairs = self._row_pairs_all[:, outer : outer + rows]
        self._col_pairs = self._col_pairs_all[:, inner : inner + cols]
        self._row_table, self._col_table = self._row_pairs[0], self._col_pairs[0]

    def scan(self, layer: GridMapLayer, base_x: float, base_y: float, base_yaw: float) -> np.ndarray:
        """Heights (map frame, metres) at the grid points; returns the internal buffer.

        ``valid`` and ``valid_fraction`` describe which points had data; points without data hold
        the fill value (median of the valid ones), or NaN when no point had data.
        """
        base_x, base_y, base_yaw = float(base_x), float(base_y), float(base_yaw)  # no numpy scalars below
        if not (math.isfinite(base_x) and math.isfinite(base_y) and math.isfinite(base_yaw)):
            raise HeightScanError(f"base pose is not finite: x={base_x}, y={base_y}, yaw={base_yaw}")
        if layer is not self._bound_layer:
            self._bind_layer(layer)
        c, s = math.cos(base_yaw), math.sin(base_yaw)
        # Unwrapped continuous index of a point p: k = (corner_centre - p) / res, where the corner
        # cell centre is pose + length / 2 - res / 2 (facts.md), so cell centres sit at integers.
        # With p = base + R(yaw) q this is one affine map of the local grid point q.
        inv = self._inv_resolution
        a00, a01, a02 = -c * inv, s * inv, (self._corner_x - base_x) * inv
        a10, a11, a12 = -s * inv, -c * inv, (self._corner_y - base_y) * inv
        if self._native_ready and _native_scan.bilinear_interior(*self._native_args, a00, a01, a02, a10, a11, a12):
            if self.valid_fraction != 1.0:
                self.valid.fill(True)
                self.valid_fraction = 1.0
            return self.heights
        self._numpy_tables(layer)
        af = self._affine_flat  # one integer index per element: cheaper than a[i, j]
        af[0], af[1], af[2], af[3], af[4], af[5] = a00, a01, a02, a10, a11, a12
        self._affine.dot(self._local, out=self._k)  # ndarray.dot: the cheapest call for this small product
        if self.method == "bilinear":
            hi_x, hi_y = self._hi_x, self._hi_y
            interior = True
            for x, y in self._corners:
                kx, ky = a00 * x + a01 * y + a02, a10 * x + a11 * y + a12
                if not (1e-9 <= kx <= hi_x and 1e-9 <= ky <= hi_y):
                    interior = False
                    break
            if interior and self._bilinear_interior(layer):
                return self.heights
        self._inside_mask(layer)
        if self.method == "bilinear":
            self._bilinear(layer)
        else:
            self._nearest(layer)
        return self._finish()

    # ---- fast path: every point between the outermost cell centres, no NaN -----------------
    def _bilinear_interior(self, layer: GridMapLayer) -> bool:
        """False (and nothing final written) when a gathered cell is NaN: the general path decides."""
        (
            k, k0, frac, lo, ix0, iy0,
            off_rows, off_cols, rx0, rx1, cy0, cy1, flat, f00, f01, f10, f11,
            v, v64, v_flat, ones, v0, v1, lerp, lerp0, lerp1, fx, fy, heights,
        ) = self._fast  # fmt: skip
        np.floor(k, out=k0)
        np.subtract(k, k0, out=frac)
        lo[...] = k0  # integral values already; [...] = casts like np.copyto without its Python dispatcher
        # offsets of the cells at floor and floor + 1 along each axis, one gather per axis;
        # mode="clip": "raise" would allocate (the indices are in range on this path)
        self._row_pairs.take(ix0, axis=1, out=off_rows, mode="clip")
        self._col_pairs.take(iy0, axis=1, out=off_cols, mode="clip")
        np.add(rx0, cy0, out=f00)
        np.add(rx0, cy1, out=f01)
        np.add(rx1, cy0, out=f10)
        np.add(rx1, cy1, out=f11)
        layer.values.take(flat, out=v, mode="clip")
        v64[...] = v
        if math.isnan(v_flat.dot(ones)):  # NaN propagates through the dot product
            return False
        # lerp along x for both y corners, then along y
        np.subtract(v1, v0, out=lerp)
        np.multiply(lerp0, fx, out=lerp0)
        np.multiply(lerp1, fx, out=lerp1)
        np.add(lerp, v0, out=lerp)
        np.subtract(lerp1, lerp0, out=heights)
        np.multiply(heights, fy, out=heights)
        np.add(heights, lerp0, out=heights)
        if self.valid_fraction != 1.0:
            self.valid.fill(True)
            self.valid_fraction = 1.0
        return True

    # ---- general path ----------------------------------------------------------------------
    def _inside_mask(self, layer: GridMapLayer) -> None:
        """Inside the map: -0.5 <= k < size - 0.5 on both axes."""
        k, inside2, tmp2 = self._k, self._in, self._in2
        np.greater_equal(k, -0.5, out=inside2)
        np.less(k[0], layer.rows - 0.5, out=tmp2[0])  # scalar bounds: broadcasting would buffer
        np.less(k[1], layer.cols - 0.5, out=tmp2[1])
        np.logical_and(inside2, tmp2, out=inside2)
        np.logical_and(inside2[0], inside2[1], out=self._inside)

    def _bilinear(self, layer: GridMapLayer) -> None:
        k, k0, frac, idx = self._k, self._k0, self._frac, self._idx
        np.floor(k, out=k0)
        np.subtract(k, k0, out=frac)
        np.copyto(idx[:, 0], k0, casting="unsafe")
        np.add(idx[0, 0], 1, out=idx[0, 1])
        np.add(idx[1, 0], 1, out=idx[1, 1])
        # Between the outermost cell centres and the border the edge cell is used on both sides.
        self._clamp(layer)
        self._gather(layer)
        wx, wy, w = self._wx, self._wy, self._w
        np.subtract(1.0, frac[0], out=wx[0])
        np.copyto(wx[1], frac[0])
        np.subtract(1.0, frac[1], out=wy[0])
        np.copyto(wy[1], frac[1])
        for i in (0, 1):  # outer product per corner (a broadcast multiply would allocate buffers)
            np.multiply(wx[i], wy[0], out=w[i, 0])
            np.multiply(wx[i], wy[1], out=w[i, 1])
        self._weighted()

    def _nearest(self, layer: GridMapLayer) -> None:
        idx = self._idx
        np.add(self._k, 0.5, out=self._k0)
        np.floor(self._k0, out=self._k0)
        np.copyto(idx[:, 0], self._k0, casting="unsafe")
        np.copyto(idx[:, 1], idx[:, 0])
        self._clamp(layer)
        self._gather(layer)
        self._w.fill(0.0)
        self._w[0, 0] = 1.0
        self._weighted()

    def _clamp(self, layer: GridMapLayer) -> None:
        idx = self._idx
        np.maximum(idx, 0, out=idx)
        np.minimum(idx[0], layer.rows - 1, out=idx[0])
        np.minimum(idx[1], layer.cols - 1, out=idx[1])

    def _gather(self, layer: GridMapLayer) -> None:
        off = self._offsets
        # mode="clip": indices are in range already, and "raise" would allocate a buffer
        self._row_table.take(self._idx[0], out=off[0], mode="clip")
        self._col_table.take(self._idx[1], out=off[1], mode="clip")
        flat = self._flat
        for i in (0, 1):
            np.add(off[0, i], off[1, 0], out=flat[i, 0])
            np.add(off[0, i], off[1, 1], out=flat[i, 1])
        layer.values.take(flat, out=self._v, mode="clip")
        np.copyto(self._v64, self._v)

    def _weighted(self) -> None:
        """Weighted sum over the four corners; NaN cells get no weight, the rest is renormalised."""
        v, w, finite, wsum = self._v64, self._w, self._finite, self._wsum
        np.isfinite(v, out=finite)
        np.multiply(w, finite, out=w)
        np.copyto(v, 0.0, where=~finite)
        np.multiply(v, w, out=v)
        self._sum_corners(w, wsum)
        self._sum_corners(v, self.heights)
        np.greater(wsum, 1e-9, out=self.valid)
        np.logical_and(self.valid, self._inside, out=self.valid)
        np.maximum(wsum, 1e-9, out=wsum)
        np.divide(self.heights, wsum, out=self.heights)

    @staticmethod
    def _sum_corners(values: np.ndarray, out: np.ndarray) -> None:
        np.add(values[0, 0], values[0, 1], out=out)
        np.add(out, values[1, 0], out=out)
        np.add(out, values[1, 1], out=out)

    def _finish(self) -> np.ndarray:
        count = int(np.count_nonzero(self.valid))
        self.valid_fraction = count / self.num_points
        if count < self.num_points:
            fill = float(np.median(self.heights[self.valid])) if count else math.nan
            np.copyto(self.heights, fill, where=~self.valid)
        return self.heights

    @property
    def native(self) -> bool:
        """Whether the bilinear fast path runs in C (:mod:`aow_policy._scan`)."""
        return self._native

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
