"""The simulated world: the AoW MuJoCo model on flat ground or rough terrain, and its height lookup.

The model is the foundation's (:func:`training.sim.model.build_spec`), with the physics step set
to the rate the "hardware" publishes joint states at (400 Hz by default; training steps at the
contract's 200 Hz: a sim-to-sim check should not depend on the step size). The floor's contact
time constant stays what ``build_spec`` gave it, so contact stiffness is the training model's.

Rough terrain comes from the training terrain generator (:mod:`training.sim.terrain`): a small
grid of sub-terrain tiles in rows of rising difficulty along +x. The elevation map the robot
"sees" is read from the compiled model's height field with MuJoCo's own triangle interpolation
(two triangles per cell, split along the (i, j)-(i+1, j+1) diagonal), so the map and the
collision surface are the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from aow_policy.robot import Robot
from training.sim.model import FLOOR, ModelInfo, build_spec, model_info

TERRAINS = ("flat", "rough")


@dataclass(frozen=True)
class RoughTerrainConfig:
    """The rough world: ``rows`` difficulty levels along +x, one column per sub-terrain type."""

    rows: int = 4
    tile_size: float = 8.0  # m
    border: float = 3.0  # m of flat ground around the tiles
    start_type: str = "bumps"  # the column the robot starts in (its tile in the first row)


class HeightField:
    """Terrain height (world z) at (x, y) from a compiled model's ``floor`` geom (plane or hfield).

    Points beyond the height field take the nearest edge value.
    """

    def __init__(self, model: mujoco.MjModel, geom_name: str = FLOOR):
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
        if gid < 0:
            raise ValueError(f"the model has no ground geom named {geom_name!r}")
        self.base = float(model.geom_pos[gid, 2])
        self.is_plane = model.geom_type[gid] != mujoco.mjtGeom.mjGEOM_HFIELD
        if self.is_plane:
            return
        if abs(model.geom_quat[gid][0] - 1.0) > 1e-9:
            raise ValueError(f"geom {geom_name!r}: a rotated height field is not supported")
        hid = int(model.geom_dataid[gid])
        self.nrow, self.ncol = int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid])
        adr = int(model.hfield_adr[hid])
        rx, ry, span, _ = (float(v) for v in model.hfield_size[hid])
        # MuJoCo: row r at y = -ry + r * 2ry / (nrow - 1), column c at x = -rx + c * 2rx / (ncol - 1)
        self._data = np.asarray(model.hfield_data[adr : adr + self.nrow * self.ncol], dtype=np.float64).reshape(
            self.nrow, self.ncol
        )
        self.span = span
        self.x0 = float(model.geom_pos[gid, 0]) - rx
        self.y0 = float(model.geom_pos[gid, 1]) - ry
        self.dx = 2.0 * rx / (self.ncol - 1)
        self.dy = 2.0 * ry / (self.nrow - 1)

    def __call__(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        shape = np.broadcast(x, y).shape
        if self.is_plane:
            return np.full(shape, self.base)
        u = np.clip((x - self.x0) / self.dx, 0.0, self.ncol - 1.0)
        v = np.clip((y - self.y0) / self.dy, 0.0, self.nrow - 1.0)
        i = np.minimum(np.floor(u), self.ncol - 2).astype(np.intp)
        j = np.minimum(np.floor(v), self.nrow - 2).astype(np.intp)
        fu, fv = u - i, v - j
        d = self._data
        h00, h11 = d[j, i], d[j + 1, i + 1]
        upper = fv > fu  # triangle (i, j), (i, j+1), (i+1, j+1); else (i, j), (i+1, j), (i+1, j+1)
        h_mid = np.where(upper, d[j + 1, i], d[j, i + 1])
        f_mid, f_far = np.where(upper, fv, fu), np.where(upper, fu, fv)
        return self.base + self.span * (h00 + f_mid * (h_mid - h00) + f_far * (h11 - h_mid))


@dataclass
class World:
    model: mujoco.MjModel
    info: ModelInfo
    heights: HeightField
    spawn_xy: tuple[float, float]
    terrain: str


def _rough_heightfield(
    cfg: RoughTerrainConfig, seed: int
) -> tuple[np.ndarray, tuple[float, float], tuple[float, float]]:
    """(MuJoCo-ordered heights, half extents, spawn xy) from the training terrain generator."""
    try:
        from training.sim.terrain import SUB_TERRAINS, Terrain, TerrainConfig
    except ImportError as e:
        raise RuntimeError(f"--terrain rough needs the training terrain generator (training.sim.terrain): {e}") from e
    types = [t for t in SUB_TERRAINS if t != "flat"]
    terrain_cfg = TerrainConfig(
        kind="rough",
        num_rows=cfg.rows,
        num_cols=len(types),
        tile_size=cfg.tile_size,
        border=cfg.border,
        proportions=dict.fromkeys(types, 1.0),
        curriculum=False,
        seed=seed,
    )
    terrain = Terrain.generate(terrain_cfg)
    nx, ny = terrain.heights.shape
    half = ((nx - 1) * terrain.scale / 2.0, (ny - 1) * terrain.scale / 2.0)
    col = terrain.types.index(cfg.start_type) if cfg.start_type in terrain.types else 0
    spawn = terrain.origins[0, col]
    return terrain.heights.T, half, (float(spawn[0]), float(spawn[1]))


def build_world(
    robot: Robot,
    terrain: str = "flat",
    physics_dt: float | None = None,
    seed: int = 0,
    rough: RoughTerrainConfig | None = None,
) -> World:
    """Compile the AoW on ``terrain`` with the given physics step (default: the contract's)."""
    if terrain not in TERRAINS:
        raise ValueError(f"terrain must be one of {TERRAINS}, got {terrain!r}")
    heightfield, spawn = None, (0.0, 0.0)
    if terrain == "rough":
        heights, half, spawn = _rough_heightfield(rough or RoughTerrainConfig(), seed)
        heightfield = (heights, half)
    spec = build_spec(wheeled=True, robot=robot, heightfield=heightfield)
    if physics_dt is not None:
        # After build_spec: the floor's contact time constant keeps the contract step's value.
        spec.option.timestep = physics_dt
    model = spec.compile()
    return World(model, model_info(model, robot), HeightField(model), spawn, terrain)


def reset_to_spawn(world: World, data: mujoco.MjData) -> None:
    """The default keyframe (standing pose), moved to the spawn point on the terrain."""
    mujoco.mj_resetDataKeyframe(world.model, data, world.info.default_key_id)
    adr = world.info.base_qpos_adr
    x, y = world.spawn_xy
    # The keyframe stands on z = 0; lift it by the highest ground under the robot's footprint.
    gx, gy = np.meshgrid(x + np.array([-0.6, 0.0, 0.6]), y + np.array([-0.4, 0.0, 0.4]))
    ground = float(np.max(world.heights(gx, gy)))
    data.qpos[adr : adr + 3] = (x, y, data.qpos[adr + 2] + ground)
    mujoco.mj_forward(world.model, data)
