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

The terrain course (:mod:`sim2sim.course`) is the evaluation world of issue 16: slopes, stairs and
blocks in a row along +x, the robot spawning on its lead-in; ``World.course`` describes its sections.
The block (the same module's "block" layout) is the source paper's robot experiment A: a 20 cm
high, 1.2 m long block on the same kind of strip.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from aow_policy.robot import Robot
from sim2sim.course import COURSE_SEED, LAYOUTS, Course, CourseConfig, generate_course, strip_config
from training.sim.model import FLOOR, LegActuator, ModelInfo, build_spec, model_info
from training.sim.terrain import HeightSampler

TERRAINS = ("flat", "rough", *LAYOUTS)  # the strips' terrains are named after their layouts
# The seed each terrain uses when none is given: the course's is one no training run uses by default
# (the block has no random part: its seed is unused, the course's for a uniform description).
DEFAULT_SEEDS = {"flat": 0, "rough": 0, "course": COURSE_SEED, "block": COURSE_SEED}


@dataclass(frozen=True)
class RoughTerrainConfig:
    """The rough world: ``rows`` difficulty levels along +x, one column per sub-terrain type."""

    rows: int = 4
    tile_size: float = 8.0  # m
    border: float = 3.0  # m of flat ground around the tiles
    start_type: str = "bumps"  # the column the robot starts in (its tile in the first row)


class HeightField:
    """Terrain height (world z) at (x, y) from a compiled model's ground geom (plane or hfield).

    A numpy face on :class:`training.sim.terrain.HeightSampler`, the sampler the training height
    scan uses, so sim-to-sim maps and training scans read the terrain the same way (MuJoCo's
    triangle interpolation; points beyond the field take the nearest edge value).
    """

    def __init__(self, model: mujoco.MjModel, geom_name: str = FLOOR):
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name) < 0:
            raise ValueError(f"the model has no ground geom named {geom_name!r}")
        sampler = HeightSampler.from_model(model, geom_name)
        if sampler.data is not None:  # a float64 copy: heights exact to the model's float32 samples
            sampler = HeightSampler(
                sampler.data.double(), sampler.x0, sampler.y0, sampler.scale, sampler.span, sampler.base
            )
        self._sampler = sampler
        self.is_plane = sampler.data is None
        self.base = sampler.base

    def __call__(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        if self.is_plane:
            return np.full(x.shape, self.base)
        flat_x = torch.from_numpy(np.ascontiguousarray(x).reshape(-1))
        flat_y = torch.from_numpy(np.ascontiguousarray(y).reshape(-1))
        # One thread: a map's few thousand points gain nothing from torch's pool, and handing them
        # to it cost 1-9 ms per call on a loaded 2-core machine (a 3600-point floor: 6.6 ms with 2
        # threads, 2.5 us with 1): a rough-terrain run went from 2.5x to 7.9x real time. The
        # caller's setting is restored after.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            heights = self._sampler.heights_at(flat_x, flat_y)
        finally:
            torch.set_num_threads(threads)
        return heights.numpy().reshape(x.shape)


@dataclass
class World:
    model: mujoco.MjModel
    info: ModelInfo
    heights: HeightField
    spawn_xy: tuple[float, float]
    terrain: str
    course: Course | None = None  # the strip's layout (terrains "course" and "block" only)


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
    seed: int | None = None,
    rough: RoughTerrainConfig | None = None,
    course: CourseConfig | None = None,
    leg_actuator: LegActuator | None = None,
) -> World:
    """Compile the AoW on ``terrain`` with the given physics step (default: the contract's).

    ``seed`` generates rough terrain or the course's blocks (None: the terrain's
    :data:`DEFAULT_SEEDS` entry). ``course``: the strip of terrain "course" or "block", of that
    layout (None: the terrain's own, :func:`sim2sim.course.strip_config`); other terrains ignore it.
    ``leg_actuator``: how the leg drives are simulated (default: PD with a torque limit)."""
    if terrain not in TERRAINS:
        raise ValueError(f"terrain must be one of {TERRAINS}, got {terrain!r}")
    seed = DEFAULT_SEEDS[terrain] if seed is None else seed
    heightfield, spawn, layout = None, (0.0, 0.0), None
    if terrain == "rough":
        heights, half, spawn = _rough_heightfield(rough or RoughTerrainConfig(), seed)
        heightfield = (heights, half)
    elif terrain in LAYOUTS:
        layout = generate_course(strip_config(terrain, course), seed)
        heightfield, spawn = layout.mujoco_heightfield(), layout.start
    spec = build_spec(wheeled=True, robot=robot, heightfield=heightfield, leg_actuator=leg_actuator)
    if physics_dt is not None:
        # After build_spec: the floor's contact time constant keeps the contract step's value.
        spec.option.timestep = physics_dt
    model = spec.compile()
    return World(model, model_info(model, robot), HeightField(model), spawn, terrain, layout)


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
