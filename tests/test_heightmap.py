"""Height scan from grid_map_msgs/GridMap against analytic terrain.

The GridMaps here are built by hand from the conventions in shared/reference/facts.md (not with
the library's own builder), with an asymmetric height function, non-zero circular-buffer start
indices and both storage orders, so a transposed, mirrored or unwrapped-wrong reader fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy import heightmap
from aow_policy.heightmap import HeightScanError, HeightScanner, height_scan
from aow_policy.messages import MessageError, grid_map_layer
from aow_policy.msg_defs import register_grid_map_types
from aow_policy.robot import load_robot

TS = register_grid_map_types(get_typestore(Stores.ROS2_HUMBLE))
T = TS.types
ROBOT = load_robot()


@pytest.fixture(autouse=True, params=["native", "numpy"])
def scan_path(request, monkeypatch):
    """Every test here runs on both fast paths: the C module and the NumPy one."""
    if request.param == "native":
        if not heightmap.NATIVE_AVAILABLE:
            pytest.skip("the C height-scan module aow_policy._scan is not built (no C compiler at install)")
    else:
        monkeypatch.setattr(heightmap, "NATIVE_AVAILABLE", False)
    return request.param


def bilinear_terrain(x, y):
    """In span{1, x, y, xy}: bilinear interpolation reproduces it exactly, at any yaw."""
    return 0.3 + 0.2 * x - 0.7 * y + 0.15 * x * y


def wavy_terrain(x, y):
    return np.sin(1.3 * x) + 0.5 * y**2 + 0.25 * y


def cell_center(k, center, length, res):
    return center + 0.5 * length - 0.5 * res - res * k


def make_grid_map(
    funcs,
    rows=40,
    cols=30,
    res=0.1,
    center=(1.0, -2.0),
    outer=7,
    inner=11,
    row_major=False,
    stamp=(10, 500_000_000),
    nan_cells=(),
):
    """A GridMap message whose buffer cell (i, j) holds f at the centre of its unwrapped index."""
    length_x, length_y = rows * res, cols * res
    data = []
    for func in funcs.values():
        buf = np.empty((rows, cols), dtype=np.float32)
        for i in range(rows):
            for j in range(cols):
                kx, ky = (i - outer) % rows, (j - inner) % cols
                x = cell_center(kx, center[0], length_x, res)
                y = cell_center(ky, center[1], length_y, res)
                buf[i, j] = np.nan if (kx, ky) in nan_cells else func(x, y)
        if row_major:
            flat = buf.ravel(order="C")
            dims = [("row_index", rows, rows * cols), ("column_index", cols, cols)]
        else:
            flat = buf.ravel(order="F")  # element (r, c) at c * rows + r
            dims = [("column_index", cols, rows * cols), ("row_index", rows, rows)]
        layout = T["std_msgs/msg/MultiArrayLayout"](
            dim=[T["std_msgs/msg/MultiArrayDimension"](label=lb, size=s, stride=st) for lb, s, st in dims],
            data_offset=0,
        )
        data.append(T["std_msgs/msg/Float32MultiArray"](layout=layout, data=flat))
    pose = T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=center[0], y=center[1], z=0.0),
        orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
    )
    info = T["grid_map_msgs/msg/GridMapInfo"](resolution=res, length_x=length_x, length_y=length_y, pose=pose)
    header = T["std_msgs/msg/Header"](
        stamp=T["builtin_interfaces/msg/Time"](sec=stamp[0], nanosec=stamp[1]), frame_id="odom"
    )
    return T["grid_map_msgs/msg/GridMap"](
        header=header,
        info=info,
        layers=list(funcs),
        basic_layers=[],
        data=data,
        outer_start_index=outer,
        inner_start_index=inner,
    )


def scan_points_world(base_xy, yaw):
    pts = np.asarray(ROBOT.height_scan.points)
    c, s = math.cos(yaw), math.sin(yaw)
    x = base_xy[0] + c * pts[:, 0] - s * pts[:, 1]
    y = base_xy[1] + s * pts[:, 0] + c * pts[:, 1]
    return x, y


@pytest.mark.parametrize("row_major", [False, True])
@pytest.mark.parametrize("yaw", [0.0, 0.7, -2.4])
def test_bilinear_scan_equals_analytic_heights(row_major, yaw):
    msg = make_grid_map({"elevation": bilinear_terrain}, row_major=row_major)
    base = (1.13, -2.27, 0.6)
    heights = height_scan(msg, base, yaw, ROBOT)
    assert heights.shape == (ROBOT.height_scan.num_points,) == (187,)
    x, y = scan_points_world(base, yaw)
    np.testing.assert_allclose(heights, bilinear_terrain(x, y), atol=2e-6)


@pytest.mark.parametrize("row_major", [False, True])
@pytest.mark.parametrize("yaw", [0.0, math.pi / 2])
def test_nearest_scan_at_cell_centres_equals_analytic_heights(row_major, yaw):
    res = 0.05  # the 0.1 m scan spacing is two cells: every point lands on a cell centre
    msg = make_grid_map({"elevation": wavy_terrain}, rows=80, cols=60, res=res, row_major=row_major, outer=13, inner=59)
    # a cell centre near the map centre: unwrapped k = (40, 30)
    base = (cell_center(40, 1.0, 80 * res, res), cell_center(30, -2.0, 60 * res, res))
    heights = height_scan(msg, base, yaw, ROBOT, method="nearest")
    x, y = scan_points_world(base, yaw)
    np.testing.assert_allclose(heights, wavy_terrain(x, y).astype(np.float32), atol=1e-6)


def test_nearest_scan_is_not_symmetric_under_a_transposed_reading():
    """The asymmetric terrain really distinguishes orientations (guards the tests above)."""
    msg = make_grid_map({"elevation": wavy_terrain}, rows=80, cols=60, res=0.05)
    layer = grid_map_layer(msg)
    unwrapped = layer.to_unwrapped()
    xs, ys = layer.cell_centers()
    np.testing.assert_allclose(unwrapped, wavy_terrain(xs[:, None], ys[None, :]), atol=1e-6)
    assert xs[0] > xs[-1] and ys[0] > ys[-1]  # buffer (0, 0) unwrapped is the +x, +y corner
    assert not np.allclose(unwrapped[::-1], unwrapped)
    assert not np.allclose(unwrapped[:, ::-1], unwrapped)


def test_layer_selected_by_name():
    msg = make_grid_map({"variance": lambda x, y: 0 * x + 9.0, "elevation": bilinear_terrain})
    base = (0.9, -1.8)
    heights = height_scan(msg, base, 0.3, ROBOT)
    x, y = scan_points_world(base, 0.3)
    np.testing.assert_allclose(heights, bilinear_terrain(x, y), atol=2e-6)
    np.testing.assert_allclose(height_scan(msg, base, 0.3, ROBOT, layer="variance"), 9.0)
    with pytest.raises(MessageError, match="no layer 'traversability'"):
        height_scan(msg, base, 0.3, ROBOT, layer="traversability")


def test_nan_cells_get_no_weight():
    def flat(x, y):
        return 0 * x + 0.7

    # NaN cells among the neighbours: the rest still give exactly the (constant) height
    nan_cells = {(kx, ky) for kx in range(18, 22) for ky in range(14, 16)}
    msg = make_grid_map({"elevation": flat}, nan_cells=nan_cells)
    layer = grid_map_layer(msg)
    scanner = HeightScanner(ROBOT.height_scan)
    heights = scanner.scan(layer, 1.03, -2.04, 0.2)
    np.testing.assert_allclose(heights, 0.7, atol=1e-6)


def test_points_without_data_are_filled_with_the_median_of_the_valid_points():
    # A NaN block fully containing some scan points' neighbourhoods.
    nan_cells = {(kx, ky) for kx in range(10, 17) for ky in range(0, 30)}  # x in (1.3, 2.0]
    msg = make_grid_map({"elevation": bilinear_terrain}, nan_cells=nan_cells)
    layer = grid_map_layer(msg)
    scanner = HeightScanner(ROBOT.height_scan)
    base = (1.0, -2.0)
    heights = scanner.scan(layer, base[0], base[1], 0.0)
    x, y = scan_points_world(base, 0.0)
    expected = bilinear_terrain(x, y)
    # nan block spans cell centres x in [1.35, 1.95]; points x >= 1.4 have all weighted corners NaN
    no_data = x > 1.35 + 1e-9
    assert no_data.any() and (~no_data).any()
    np.testing.assert_array_equal(scanner.valid, ~no_data)
    # x = 1.3 lies halfway between a valid (1.25) and a NaN (1.35) cell centre: the valid one only
    partial = (~no_data) & (x > 1.25 + 1e-9)
    assert partial.sum() == 11
    np.testing.assert_allclose(heights[partial], bilinear_terrain(1.25, y[partial]), atol=2e-6)
    exact = ~no_data & ~partial
    np.testing.assert_allclose(heights[exact], expected[exact], atol=2e-6)
    np.testing.assert_allclose(heights[no_data], np.median(heights[~no_data]))
    assert scanner.valid_fraction == pytest.approx((~no_data).mean())


def test_points_outside_the_map_and_a_robot_off_the_map():
    msg = make_grid_map({"elevation": bilinear_terrain})  # x in [-1, 3], y in [-3.5, -0.5]
    scanner = HeightScanner(ROBOT.height_scan)
    layer = grid_map_layer(msg)
    base = (2.47, -2.0)  # scan reaches x = 3.27; the map's +x border is x = 3.0 (grid_map: inside)
    heights = scanner.scan(layer, *base, 0.0)
    x, y = scan_points_world(base, 0.0)
    outside = x > 3.0
    np.testing.assert_array_equal(scanner.valid, ~outside)
    inside_edge = (~outside) & (x > 2.95)  # between the last cell centre and the border: edge cell
    assert inside_edge.sum() == 11
    np.testing.assert_allclose(heights[inside_edge], bilinear_terrain(2.95, y[inside_edge]), atol=2e-6)
    np.testing.assert_allclose(heights[outside], np.median(heights[~outside]))
    with pytest.raises(HeightScanError, match="have map data"):
        height_scan(msg, (3.4, -2.0), 0.0, ROBOT)


def test_map_age_checked():
    msg = make_grid_map({"elevation": bilinear_terrain}, stamp=(10, 500_000_000))
    height_scan(msg, (1.0, -2.0), 0.0, ROBOT, now=10.9, max_age=0.5)  # 0.4 s: fine
    with pytest.raises(HeightScanError, match="old"):
        height_scan(msg, (1.0, -2.0), 0.0, ROBOT, now=11.1, max_age=0.5)


def test_malformed_maps_refused():
    msg = make_grid_map({"elevation": bilinear_terrain})
    msg.data[0].layout.dim[0].label = "x"
    with pytest.raises(MessageError, match="neither"):
        grid_map_layer(msg)
    msg = make_grid_map({"elevation": bilinear_terrain})
    msg.info.length_x = 5.0
    with pytest.raises(MessageError, match="gives 50 x 30"):
        grid_map_layer(msg)
    msg = make_grid_map({"elevation": bilinear_terrain})
    msg.info.pose.orientation.z = 0.3
    with pytest.raises(MessageError, match="rotated"):
        grid_map_layer(msg)


def test_native_and_numpy_paths_agree_on_random_maps_and_poses(scan_path):
    """The C fast path gives the NumPy path's heights and validity wherever either applies:
    interior poses, poses near and past the map edge, and maps with NaN cells."""
    if heightmap._native_scan is None:
        pytest.skip("the C height-scan module aow_policy._scan is not built")
    interior_scans = 0
    rng = np.random.default_rng(3)
    for trial in range(12):
        rows, cols = int(rng.integers(25, 60)), int(rng.integers(25, 60))
        nan_cells = {(int(rng.integers(rows)), int(rng.integers(cols))) for _ in range(trial % 3 * 20)}
        msg = make_grid_map(
            {"elevation": wavy_terrain},
            rows=rows,
            cols=cols,
            res=0.1,
            outer=int(rng.integers(rows)),
            inner=int(rng.integers(cols)),
            row_major=bool(trial % 2),
            nan_cells=nan_cells,
        )
        layer = grid_map_layer(msg)
        native = HeightScanner(ROBOT.height_scan, native=True)
        numpy_path = HeightScanner(ROBOT.height_scan, native=False)
        for _ in range(20):
            # map x in [1 - rows/20, 1 + rows/20], y in [-2 - cols/20, -2 + cols/20]; some scans leave it
            bx = 1.0 + rng.uniform(-0.6, 0.6) * rows * 0.1
            by = -2.0 + rng.uniform(-0.6, 0.6) * cols * 0.1
            yaw = rng.uniform(-math.pi, math.pi)
            a = native.scan(layer, bx, by, yaw).copy()
            b = numpy_path.scan(layer, bx, by, yaw)
            np.testing.assert_array_equal(native.valid, numpy_path.valid)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
            assert native.valid_fraction == numpy_path.valid_fraction
            interior_scans += native.valid_fraction == 1.0
    assert interior_scans > 50  # the C path itself ran, not only the general path it hands over to


def test_native_scan_refused_when_not_built(monkeypatch, scan_path):
    monkeypatch.setattr(heightmap, "_native_scan", None)
    with pytest.raises(ValueError, match="not built"):
        HeightScanner(ROBOT.height_scan, native=True)


def test_a_strided_output_buffer_is_served_by_the_numpy_path(scan_path):
    msg = make_grid_map({"elevation": bilinear_terrain})
    layer = grid_map_layer(msg)
    backing = np.zeros(2 * ROBOT.height_scan.num_points)
    scanner = HeightScanner(ROBOT.height_scan, out=backing[::2])
    base = (1.13, -2.27)
    heights = scanner.scan(layer, *base, 0.4)
    x, y = scan_points_world(base, 0.4)
    np.testing.assert_allclose(backing[::2], bilinear_terrain(x, y), atol=2e-6)
    assert heights.base is backing and not backing[1::2].any()
