"""Terrain generation, the height lookup shared with MuJoCo's collision, the height scan and the
terrain curriculum."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from aow_policy.layout import ObservationLayout
from aow_policy.robot import load_robot
from training.mdp.math import yaw_from_quat
from training.mdp.observations import ObservationAssembler, height_scan, scan_points_world
from training.sim.terrain import HeightSampler, Terrain, TerrainConfig, TerrainCurriculum

SMALL = TerrainConfig(kind="rough", num_rows=4, num_cols=7, tile_size=4.0, border=1.0, seed=3)


def compiled(terrain: Terrain) -> tuple[mujoco.MjModel, mujoco.MjData]:
    spec = mujoco.MjSpec()
    terrain.add_to_spec(spec)
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return model, data


def ray_height(model, data, x: float, y: float) -> float:
    geom = np.zeros(1, np.int32)
    dist = mujoco.mj_ray(model, data, np.array([x, y, 10.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
    return 10.0 - dist


@pytest.fixture(scope="module")
def rough():
    terrain = Terrain.generate(SMALL)
    model, data = compiled(terrain)
    return terrain, model, data


def test_sampler_equals_mujoco_collision_surface(rough):
    terrain, model, data = rough
    sampler = HeightSampler.from_model(model)
    rng = np.random.default_rng(0)
    pts = np.stack([rng.uniform(terrain.x0, -terrain.x0, 300), rng.uniform(terrain.y0, -terrain.y0, 300)], 1)
    ours = sampler(torch.tensor(pts)).numpy()
    theirs = np.array([ray_height(model, data, x, y) for x, y in pts])
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_sampler_reads_the_models_array_not_a_copy(rough):
    terrain, model, _ = rough
    sampler = HeightSampler.from_model(model)
    x, y = terrain.x0 + 5 * terrain.scale, terrain.y0 + 7 * terrain.scale
    hid = model.geom_dataid[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")]
    ncol = model.hfield_ncol[hid]
    before = sampler(torch.tensor([[x, y]])).item()
    saved = model.hfield_data[7 * ncol + 5]
    model.hfield_data[7 * ncol + 5] = 1.0
    try:
        assert sampler(torch.tensor([[x, y]])).item() == pytest.approx(sampler.base + sampler.span, abs=1e-5)
    finally:
        model.hfield_data[7 * ncol + 5] = saved
    assert sampler(torch.tensor([[x, y]])).item() == pytest.approx(before, abs=1e-9)


def test_vertices_reproduce_generated_heights(rough):
    terrain, model, _ = rough
    sampler = HeightSampler.from_model(model)
    ii, jj = np.meshgrid(np.arange(0, terrain.heights.shape[0], 7), np.arange(0, terrain.heights.shape[1], 5))
    xy = torch.tensor(np.stack([terrain.x0 + ii.ravel() * terrain.scale, terrain.y0 + jj.ravel() * terrain.scale], 1))
    np.testing.assert_allclose(sampler(xy).numpy(), terrain.heights[ii.ravel(), jj.ravel()], atol=1e-5)


def test_rows_rise_in_difficulty():
    cfg = TerrainConfig(kind="rough", num_rows=5, num_cols=10, tile_size=4.0, border=1.0)
    terrain = Terrain.generate(cfg)
    stairs_col = terrain.types.index("stairs_up")
    blocks_col = terrain.types.index("blocks")
    tile = round(cfg.tile_size / cfg.horizontal_scale)
    border = round(cfg.border / cfg.horizontal_scale)

    def tile_heights(row: int, col: int) -> np.ndarray:
        i0, j0 = border + row * tile, border + col * tile
        return terrain.heights[i0 : i0 + tile, j0 : j0 + tile]  # the last edge belongs to the next tile

    # Stairs: step height 0.05 + 0.18 * difficulty; the steps' sizes grow row by row.
    steps = [np.unique(np.round(np.diff(tile_heights(r, stairs_col)[:, tile // 2]), 6)).max() for r in range(5)]
    assert steps == pytest.approx([0.05 + 0.18 * r / 4 for r in range(5)])
    blocks = [np.abs(tile_heights(r, blocks_col)).max() for r in range(5)]
    assert blocks == pytest.approx([0.05 + 0.15 * r / 4 for r in range(5)])
    assert max(blocks) <= 0.2 + 1e-9
    # Spawn points sit on the ground at the tile centres.
    for r in range(5):
        for c in range(10):
            x, y, z = terrain.origins[r, c]
            i, j = round((x - terrain.x0) / terrain.scale), round((y - terrain.y0) / terrain.scale)
            assert terrain.heights[i, j] == pytest.approx(z)
    assert set(terrain.types) == {"bumps", "slope_up", "slope_down", "stairs_up", "stairs_down", "blocks"}


@pytest.mark.parametrize("kind", ["stairs_up", "stairs_down", "slope_up", "slope_down"])
def test_up_and_down_are_what_a_robot_leaving_the_spawn_platform_does(kind):
    """Robots spawn at a tile's centre and leave it outwards: on "stairs_up" / "slope_up" (a pit, a
    valley) the ground rises step by step from the platform to the tile's edge, on the "down"
    kinds (a pyramid, a hill) it falls, as legged_gym names its stairs. Hardest row, from the
    platform's edge (1.0 m out) to the tile's (2.0 m): 3 treads of 0.31 m, each 0.05 + 0.18 =
    0.23 m, or 1.0 m of slope at 0.4."""
    cfg = TerrainConfig(kind="rough", num_rows=2, num_cols=1, tile_size=4.0, border=1.0, proportions={kind: 1.0})
    terrain = Terrain.generate(cfg)
    tile, border = round(cfg.tile_size / cfg.horizontal_scale), round(cfg.border / cfg.horizontal_scale)
    centre = border + tile + tile // 2  # row 1 (the hardest), along x through the spawn point
    outwards = terrain.heights[centre : border + 2 * tile + 1, border + tile // 2]  # centre to the edge
    oz = terrain.origins[1, 0, 2]
    assert oz == pytest.approx(outwards[0])  # robots spawn at the centre, on the ground
    rises = np.diff(outwards)
    up = kind.endswith("_up")
    assert np.all(rises >= -1e-9) if up else np.all(rises <= 1e-9)
    total = 3 * 0.23 if kind.startswith("stairs") else 0.4 * 1.0
    assert outwards[-1] - outwards[0] == pytest.approx(total if up else -total, abs=1e-6)
    assert outwards[-1] == pytest.approx(0.0, abs=1e-9)  # the tile's edge at the border's height


def test_bad_terrain_config_names_field():
    with pytest.raises(ValueError, match=r"proportions.*lava"):
        TerrainConfig(kind="rough", proportions={"lava": 1.0}).validate()
    with pytest.raises(ValueError, match=r"terrain\.kind"):
        TerrainConfig(kind="moon").validate()


# ---- height scan over a known step ------------------------------------------------------------

STEP_X = 0.3
STEP_H = 0.2


def step_terrain(scale: float = 0.05) -> Terrain:
    """0.2 m step for x >= 0.3 m (vertices on x = 0.3 already on the upper level)."""
    x0, y0 = -3.0, -3.0
    n = round(6.0 / scale) + 1
    xs = x0 + scale * np.arange(n)
    heights = np.where(xs[:, None] >= STEP_X - 1e-9, STEP_H, 0.0) * np.ones((1, n))
    return Terrain.from_heights(heights, x0, y0, scale)


@pytest.fixture(scope="module")
def scan_setup():
    robot = load_robot()
    model, _ = compiled(step_terrain())
    sampler = HeightSampler.from_model(model)
    layout = ObservationLayout.build(
        [{"name": "height_scan", "size": 187, "scale": 5.0, "clip": 1.0, "params": {"height_offset": 0.5}}]
    )
    return robot, sampler, ObservationAssembler(layout)


def scan(robot, sampler, assembler, base_pos: list[float], yaw: float) -> np.ndarray:
    points = torch.tensor(robot.height_scan.points, dtype=torch.float32)
    base = torch.tensor([base_pos], dtype=torch.float32)
    world = scan_points_world(base, torch.tensor([yaw]), points)
    raw = height_scan(base[:, 2], sampler(world), 0.5)
    return assembler({"height_scan": raw})[0].numpy()


def test_scan_over_step_matches_analytic_heights_in_flattening_order(scan_setup):
    robot, sampler, assembler = scan_setup
    grid = robot.height_scan
    assert grid.num_points == 187
    values = scan(robot, sampler, assembler, [0.0, 0.0, 0.55], 0.0)
    expected = np.empty(187)
    for ix in range(grid.nx):  # x_major: index = ix * ny + iy
        x = grid.x_range[0] + ix * grid.spacing
        for iy in range(grid.ny):
            h = STEP_H if x >= STEP_X - 1e-9 else 0.0
            expected[ix * grid.ny + iy] = np.clip(0.55 - 0.5 - h, -1, 1) * 5.0
    np.testing.assert_allclose(values, expected, atol=1e-4)
    # The stated order: the first 11 values share x = -0.8 (all low), the last 11 x = 0.8 (high).
    assert np.allclose(values[:11], 0.25, atol=1e-4) and np.allclose(values[-11:], -0.75, atol=1e-4)


def test_yawed_robot_samples_rotated_grid(scan_setup):
    robot, sampler, assembler = scan_setup
    grid = robot.height_scan
    # Yaw +90 deg: local (x, y) lies at world (-y, x); the step is now crossed along local -y.
    values = scan(robot, sampler, assembler, [0.0, 0.0, 0.55], math.pi / 2)
    for ix in range(grid.nx):
        for iy in range(grid.ny):
            y_local = grid.y_range[0] + iy * grid.spacing
            h = STEP_H if -y_local >= STEP_X - 1e-9 else 0.0
            assert values[ix * grid.ny + iy] == pytest.approx((0.05 - h) * 5.0, abs=1e-4)


def test_yawed_robot_on_a_plane_slope_any_angle():
    robot = load_robot()
    scale = 0.1
    x0 = y0 = -4.0
    n = 81
    xs = x0 + scale * np.arange(n)
    heights = 0.1 * xs[:, None] + 0.05 * xs[None, :]  # h = 0.1 x + 0.05 y (interpolation is exact)
    model, _ = compiled(Terrain.from_heights(heights, x0, y0, scale))
    sampler = HeightSampler.from_model(model)
    yaw = 0.5
    base = torch.tensor([[0.7, -0.4, 1.0]], dtype=torch.float64)
    points = torch.tensor(robot.height_scan.points)
    world = scan_points_world(base, torch.tensor([yaw], dtype=torch.float64), points)[0].numpy()
    c, s = math.cos(yaw), math.sin(yaw)
    px, py = robot.height_scan.points[:, 0], robot.height_scan.points[:, 1]
    wx, wy = 0.7 + c * px - s * py, -0.4 + s * px + c * py
    np.testing.assert_allclose(world, np.stack([wx, wy], 1), atol=1e-12)
    np.testing.assert_allclose(sampler(torch.tensor(world)).numpy(), 0.1 * wx + 0.05 * wy, atol=1e-5)
    assert yaw_from_quat(torch.tensor([[math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]])).item() == pytest.approx(yaw)


# ---- curriculum ------------------------------------------------------------------------------


def test_curriculum_moves_up_after_long_walk_and_down_after_fall():
    terrain = Terrain.generate(SMALL)
    cur = TerrainCurriculum(terrain, num_envs=4, max_init_level=1, generator=torch.Generator().manual_seed(0))
    cur.levels[:] = torch.tensor([1, 1, 1, 0])
    ids = torch.arange(4)
    walked = torch.tensor([3.0, 0.2, 1.5, 0.1])  # tile 4 m: > 2 m is a long walk
    asked = torch.tensor([4.0, 4.0, 2.0, 4.0])  # commanded distance over the episode
    failed = torch.tensor([False, True, False, True])
    cur.update(ids, walked, asked, failed)
    # up; fell -> down; walked 1.5 of 2 asked -> stays; fell on row 0 -> stays at 0
    assert cur.levels.tolist() == [2, 0, 1, 0]
    origins = cur.origins(ids)
    assert origins[0].tolist() == pytest.approx(terrain.origins[2, cur.types[0]].tolist())
    # Mastering the hardest row sends the robot to a random row.
    cur.levels[:] = terrain.num_rows - 1
    cur.update(ids, torch.full((4,), 3.0), torch.full((4,), 1.0), torch.zeros(4, dtype=torch.bool))
    assert ((cur.levels >= 0) & (cur.levels < terrain.num_rows)).all()


def test_curriculum_spreads_types_and_caps_initial_level():
    terrain = Terrain.generate(SMALL)
    cur = TerrainCurriculum(terrain, num_envs=70, max_init_level=2)
    assert int(cur.levels.max()) <= 2
    assert sorted(set(cur.types.tolist())) == list(range(terrain.num_cols))


def test_curriculum_reports_the_mean_level_of_each_sub_terrain_kind():
    """SMALL's 7 columns are bumps, slope_up, slope_down, stairs_up, stairs_down, stairs_down,
    blocks; 14 robots, two per column, levels 0, 1, 2, 3, 0, 1, ... by hand. The two stairs_down
    columns are one kind."""
    terrain = Terrain.generate(SMALL)
    cur = TerrainCurriculum(terrain, num_envs=14, max_init_level=1)
    assert cur.types.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    cur.levels[:] = torch.arange(14) % 4
    assert cur.mean_level_by_kind() == {
        "bumps": 0.5,  # levels 0, 1
        "slope_up": 2.5,  # 2, 3
        "slope_down": 0.5,  # 0, 1
        "stairs_up": 2.5,  # 2, 3
        "stairs_down": 1.5,  # 0, 1 and 2, 3
        "blocks": 0.5,  # 0, 1
    }
    assert cur.mean_level() == pytest.approx(19 / 14)  # (0 + 1 + 2 + 3) x 3 + 0 + 1 over 14
    few = TerrainCurriculum(terrain, num_envs=3, max_init_level=1)  # kinds without robots are left out
    assert set(few.mean_level_by_kind()) == {terrain.types[j] for j in few.types.tolist()}


def test_trimesh_is_the_same_surface(rough):
    """The mesh handed to mesh-based simulators (Isaac Gym) interpolates like MuJoCo's field."""
    terrain, model, _ = rough
    vertices, triangles = terrain.trimesh()
    nx, ny = terrain.heights.shape
    assert vertices.shape == (nx * ny, 3) and triangles.shape == (2 * (nx - 1) * (ny - 1), 3)
    np.testing.assert_allclose(vertices[:, 2], terrain.heights.ravel(), atol=1e-6)
    a, b, c = (vertices[triangles[:, k]].astype(np.float64) for k in range(3))
    normals = np.cross(b - a, c - a)
    assert (normals[:, 2] > 0).all()  # every triangle faces up
    # Height at each triangle's centroid equals the MuJoCo-consistent lookup there.
    sampler = HeightSampler.from_model(model)
    pick = np.random.default_rng(1).choice(len(triangles), 500, replace=False)
    centroid = (a[pick] + b[pick] + c[pick]) / 3.0
    np.testing.assert_allclose(sampler(torch.tensor(centroid[:, :2])).numpy(), centroid[:, 2], atol=1e-5)
