"""The terrain course: one straight strip along +x holding every obstacle of the rough-terrain bar.

Issue 16's bar for a rough-terrain policy is a crossing of terrain it did not train on: stairs up
and down with 15 cm steps, a 25 % slope, 10 cm blocks, on a new seed. The course puts them in a
row, so one run says how far a policy gets and where it stopped or fell (default lengths, x from
the strip's start; the strip is centred on the world origin as MuJoCo's height field is):

=============  =============  ==========================================================
section        x (m)          ground
=============  =============  ==========================================================
lead_in        0 – 5          flat; the robot spawns at 1 m and the steering settles here
slope_up       5 – 7          25 % (rise over run 0.25) up to 0.5 m
plateau        7 – 8.5        flat at 0.5 m
slope_down     8.5 – 10.5     25 % down to 0
flat_1         10.5 – 12.5    flat
stairs_up      12.5 – 13.7    4 risers of 0.15 m, 0.30 m treads, up to 0.6 m
landing        13.7 – 15.2    flat at 0.6 m
stairs_down    15.2 – 16.4    4 risers of 0.15 m down to 0
flat_2         16.4 – 18.4    flat
blocks         18.4 – 23.4    random rectangles of ±0.10 m (from the seed) within ±1.2 m of the line
run_out        23.4 – 27.4    flat; the finish line is 1 m into it (the whole robot past the blocks)
=============  =============  ==========================================================

The strip is 6 m wide: the robot holds the line y = 0, and a 3 m elevation map around it stays on
the field. Heights use the training generator's conventions (:mod:`training.sim.terrain`):
an array [nx, ny] in metres, x-major, vertex (i, j) at (x0 + i res, y0 + j res), handed to
:func:`training.sim.model.build_spec` transposed (MuJoCo's rows run along y) with its half extents.

Resolution (0.02 m by default, training's is 0.1 m): MuJoCo's height field is linear between
samples, so a riser becomes a ramp one cell wide. The AoW's feet are 0.1 m wheels; against a
vertical 15 cm riser a wheel meets a wall (contact normal horizontal), against a ramp it meets a
slope it may roll up. At 0.1 m the riser is a 56° ramp (normal 34° above horizontal), at 0.05 m
72° (18°), at 0.02 m 82° (8°, within the spread of a real step's edge contact); a 10 cm block
edge at 0.02 m is 79°. Finer buys little more, and the collision cost grows with the cells under
each wheel: the shipped flat policy's sim-to-sim run went at 7.1x real time at 0.05 m, 4.1x at
0.02 m and 2.1x at 0.01 m (2-core machine under load). Every section boundary, riser and block
edge lies on a sample, so each edge is exactly one cell wide.

The blocks come from ``numpy.random.default_rng(seed)``; :data:`COURSE_SEED` is the default, a
seed no training run uses by default (training's terrain seed is 0; the block layout is this
module's own generator anyway, so no seed reproduces a training tile).

The block layout (``CourseConfig(layout="block")``, :func:`block_config`) is the source paper's
robot experiment A, "traversing a 20 cm high block with 1.0 m/s command to the front": one step
up onto a block, along its top, one step down, nothing else, so a run says whether a policy
takes a step of that height at that speed with and without its map. It is the course's
machinery with other sections (the stairs arithmetic with a single riser each way):

=============  =============  ==========================================================
section        x (m)          ground
=============  =============  ==========================================================
lead_in        0 – 5          flat; the robot spawns at 1 m: a 4 m run-up to reach 1.0 m/s
block_up       5 – 5.3        the riser up (0.20 m) at 5 m, then the block's first 0.3 m
block_top      5.3 – 6.2      flat at 0.20 m
block_down     6.2 – 6.5      the riser down at 6.2 m, then flat at 0
run_out        6.5 – 10.5     flat; the finish line is 1 m into it (the whole robot off the block)
=============  =============  ==========================================================

The block is 1.2 m long (block_up and block_top). The paper does not give its length: 1.2 m holds
the whole robot (about 1 m long with its wheels) on the top for a moment, so the robot is all up
before it steps down. The seed is unused (the block has no random part).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COURSE_SEED = 1616  # issue 16; training's terrain default is 0
# The strips this module lays out; each is also the name of the sim2sim terrain that holds it.
LAYOUTS = ("course", "block")
EXPERIMENT_A_HEIGHT = 0.20  # m, the block of the paper's robot experiment A


@dataclass(frozen=True)
class CourseConfig:
    """Lengths along x in metres (each a multiple of ``resolution``), heights in metres.

    ``layout`` picks the sections (:func:`_profile`): "course" (issue 16's obstacles in a row) or
    "block" (lead-in, one riser of ``step_height`` up, ``step_width + landing`` along the top, one
    down, run-out; ``steps`` must be 1). The fields a layout has no section for are unused.
    """

    layout: str = "course"  # one of LAYOUTS
    resolution: float = 0.02  # m between height samples (why: see the module docstring)
    width: float = 6.0  # m across the strip (y from -width/2 to width/2)
    lead_in: float = 5.0
    # m from the strip's start to the spawn point on the line y = 0; on a flat section (by default
    # the lead-in; a later one starts the robot in front of a given obstacle)
    spawn: float = 1.0
    slope: float = 0.25  # rise over run
    slope_run: float = 2.0
    plateau: float = 1.5
    flat: float = 2.0  # each flat stretch between obstacles
    step_height: float = 0.15
    step_width: float = 0.30  # tread
    steps: int = 4
    landing: float = 1.5
    blocks_length: float = 5.0
    blocks_band: float = 2.4  # m across the line (y within +-band/2) where blocks lie
    block_height: float = 0.10  # blocks are +-block_height relative to the ground around them
    block_size: tuple[float, float] = (0.4, 1.0)  # m, side length range
    num_blocks: int = 24
    run_out: float = 4.0
    finish: float = 1.0  # m into the run-out: the finish line

    def validate(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"course layout must be one of {LAYOUTS}, got {self.layout!r}")
        res = self.resolution
        if not res > 0:
            raise ValueError(f"course resolution must be positive, got {res}")
        lengths = {
            "width": self.width,
            "lead_in": self.lead_in,
            "spawn": self.spawn,
            "slope_run": self.slope_run,
            "plateau": self.plateau,
            "flat": self.flat,
            "step_width": self.step_width,
            "landing": self.landing,
            "blocks_length": self.blocks_length,
            "blocks_band": self.blocks_band,
            "run_out": self.run_out,
            "finish": self.finish,
        }
        for name, value in lengths.items():
            if not value > 0:
                raise ValueError(f"course {name} must be positive, got {value}")
            if abs(value / res - round(value / res)) > 1e-6:
                # off-grid lengths would put edges between samples: ramps two cells wide
                raise ValueError(f"course {name} {value} m is not a multiple of the resolution {res} m")
        if self.steps < 1:
            raise ValueError(f"course steps must be at least 1, got {self.steps}")
        if self.layout == "block" and self.steps != 1:
            # block_up / block_down are stairs sections one tread long: more steps would stack
            # further risers onto the block's first tread and drop below the ground after it.
            raise ValueError(f"the block layout has one riser up and one down: steps must be 1, got {self.steps}")
        if not self.finish < self.run_out:
            raise ValueError(f"course finish ({self.finish} m) must lie within the run-out ({self.run_out} m)")
        lo, hi = self.block_size
        if not (2 * res <= lo <= hi < min(self.blocks_length, self.blocks_band)):
            raise ValueError(f"course block_size {self.block_size} must be ordered, >= 2 cells and fit the field")
        if self.blocks_band > self.width:
            raise ValueError(f"course blocks_band {self.blocks_band} m is wider than the strip ({self.width} m)")


@dataclass(frozen=True)
class Section:
    """One stretch of the course, ``x_start <= x < x_end`` in world metres."""

    name: str
    x_start: float
    x_end: float
    kind: str  # flat, slope_up, slope_down, stairs_up, stairs_down or blocks

    @property
    def length(self) -> float:
        return self.x_end - self.x_start


@dataclass(frozen=True)
class Course:
    """A generated course: heights, where it starts and finishes, and its sections (world x)."""

    heights: np.ndarray  # [nx, ny] metres, x-major (training.sim.terrain's layout)
    x0: float  # world x of sample i = 0
    y0: float
    resolution: float
    sections: tuple[Section, ...]
    start: tuple[float, float]  # spawn (x, y) on the line
    finish_x: float  # world x the base must pass to have crossed
    seed: int
    config: CourseConfig

    @property
    def line_y(self) -> float:
        """The line to hold (the strip's centre)."""
        return self.start[1]

    @property
    def length(self) -> float:
        """Metres from the start to the finish line along x."""
        return self.finish_x - self.start[0]

    @property
    def first_obstacle_x(self) -> float:
        """Where the first section that is not flat begins ahead of the start (the end of the run-up)."""
        ahead = [s.x_start for s in self.sections if s.kind != "flat" and s.x_start >= self.start[0]]
        return min(ahead) if ahead else self.finish_x

    @property
    def half_extent(self) -> tuple[float, float]:
        nx, ny = self.heights.shape
        return (nx - 1) * self.resolution / 2.0, (ny - 1) * self.resolution / 2.0

    def mujoco_heightfield(self) -> tuple[np.ndarray, tuple[float, float]]:
        """``build_spec``'s ``heightfield``: heights with MuJoCo's rows along y, and half extents."""
        return self.heights.T, self.half_extent

    def section_at(self, x: float) -> str:
        """The name of the section at world x (before the strip: its first; beyond: its last)."""
        for s in self.sections:
            if x < s.x_end:
                return s.name
        return self.sections[-1].name

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(f"the course has no section {name!r} (sections: {[s.name for s in self.sections]})")

    def describe(self) -> dict[str, object]:
        """A JSON-ready description: what a result needs to say where a robot got to."""
        cfg = self.config
        return {
            "layout": cfg.layout,
            "seed": self.seed,
            "resolution_m": self.resolution,
            "width_m": cfg.width,
            "start_xy": list(self.start),
            "finish_x": self.finish_x,
            "length_m": self.length,
            "slope": cfg.slope,
            "step_height_m": cfg.step_height,
            "step_width_m": cfg.step_width,
            "steps": cfg.steps,
            "block_height_m": cfg.block_height,
            "sections": [
                {"name": s.name, "kind": s.kind, "x_start": s.x_start, "x_end": s.x_end} for s in self.sections
            ],
        }


def _profile(cfg: CourseConfig) -> list[tuple[str, float, str]]:
    """(name, length, kind) of each section in order (the tables in the module docstring)."""
    if cfg.layout == "block":
        # Stairs sections of one tread each (steps == 1): the riser at block_up's start lifts
        # block_up and block_top to step_height, the one at block_down's start drops back to 0.
        return [
            ("lead_in", cfg.lead_in, "flat"),
            ("block_up", cfg.step_width, "stairs_up"),
            ("block_top", cfg.landing, "flat"),
            ("block_down", cfg.step_width, "stairs_down"),
            ("run_out", cfg.run_out, "flat"),
        ]
    n = cfg.steps
    return [
        ("lead_in", cfg.lead_in, "flat"),
        ("slope_up", cfg.slope_run, "slope_up"),
        ("plateau", cfg.plateau, "flat"),
        ("slope_down", cfg.slope_run, "slope_down"),
        ("flat_1", cfg.flat, "flat"),
        ("stairs_up", n * cfg.step_width, "stairs_up"),
        ("landing", cfg.landing, "flat"),
        ("stairs_down", n * cfg.step_width, "stairs_down"),
        ("flat_2", cfg.flat, "flat"),
        ("blocks", cfg.blocks_length, "blocks"),
        ("run_out", cfg.run_out, "flat"),
    ]


def block_config(height: float = EXPERIMENT_A_HEIGHT) -> CourseConfig:
    """The block strip of the paper's robot experiment A (``height`` m high, 1.2 m long).

    A 0.3 m block_up tread and a 0.9 m block_top: a 1.2 m long block. The paper gives the
    height (20 cm) and the command (1.0 m/s forward), not the length; 1.2 m holds the whole robot,
    about 1 m long with its wheels, on the top for a moment. The other lengths are the course's
    defaults: a 5 m lead-in with the spawn at 1 m (a 4 m run-up), a 4 m run-out with the finish
    1 m into it.
    """
    return CourseConfig(layout="block", steps=1, step_height=height, step_width=0.30, landing=0.90)


def strip_config(terrain: str, config: CourseConfig | None = None) -> CourseConfig:
    """The strip the sim2sim terrain ``terrain`` ("course" or "block", the layout of that name) is
    built from: ``config``, which must be of that layout, or the terrain's own default
    (``CourseConfig()`` for "course", :func:`block_config` for "block")."""
    if terrain not in LAYOUTS:
        raise ValueError(f"terrain {terrain!r} is no strip: the strips are {LAYOUTS}")
    if config is None:
        return block_config() if terrain == "block" else CourseConfig()
    if config.layout != terrain:
        # A course config handed to the block terrain (or the reverse) would silently build the
        # other strip under this terrain's name.
        raise ValueError(f"terrain {terrain!r} needs a strip of layout {terrain!r}, got layout {config.layout!r}")
    return config


def _cells(length: float, res: float) -> int:
    return round(length / res)


def generate_course(config: CourseConfig | None = None, seed: int = COURSE_SEED) -> Course:
    """Build the course of ``config`` (deterministic for a given ``seed``, which places the blocks)."""
    cfg = config if config is not None else CourseConfig()
    cfg.validate()
    res = cfg.resolution
    profile = _profile(cfg)
    # Section boundaries in whole cells from the strip's start, so every edge lies on a sample.
    bounds = np.cumsum([0] + [_cells(length, res) for _, length, _ in profile])
    nx = int(bounds[-1]) + 1
    ny = _cells(cfg.width, res) + 1
    heights = np.zeros((nx, ny))
    level = 0.0  # the ground height carried from one section into the next
    rng = np.random.default_rng(seed)
    for (_, _, kind), i0, i1 in zip(profile, bounds[:-1], bounds[1:], strict=True):
        k = np.arange(i1 - i0 + 1)  # this section's samples, both ends included
        if kind == "flat":
            profile_h = np.full(k.shape, level)
        elif kind in ("slope_up", "slope_down"):
            sign = 1.0 if kind == "slope_up" else -1.0
            profile_h = level + sign * cfg.slope * k * res
        elif kind in ("stairs_up", "stairs_down"):
            sign = 1.0 if kind == "stairs_up" else -1.0
            per_step = _cells(cfg.step_width, res)
            # The riser at the section's start and one every tread; a sample on a riser takes the
            # step beyond it (training.sim.terrain's "a vertex on an edge belongs to the next step").
            # The sample on the section's start is already on the first step, so that riser's ramp
            # is the last cell of the section before.
            risers = np.minimum(k // per_step + 1, cfg.steps)
            profile_h = level + sign * cfg.step_height * risers
        else:  # blocks: flat here, the rectangles are added below
            profile_h = np.full(k.shape, level)
        # Sample i0 is shared with the previous section: a riser at the start moves it to the new
        # height (the ramp is the cell before), otherwise both agree on the level.
        heights[i0 : i1 + 1, :] = profile_h[:, None]
        if kind == "blocks":
            _add_blocks(heights, int(i0), int(i1), level, cfg, rng)
        level = float(profile_h[-1])
    # Centred on the world origin (MuJoCo's height field is); rounded to nanometres so that the
    # reported positions read as the lengths they are (-13.7, not -13.700000000000001).
    x0, y0 = round(-(nx - 1) * res / 2.0, 9), round(-(ny - 1) * res / 2.0, 9)
    sections = tuple(
        Section(name, round(x0 + float(b0) * res, 9), round(x0 + float(b1) * res, 9), kind)
        for (name, _, kind), b0, b1 in zip(profile, bounds[:-1], bounds[1:], strict=True)
    )
    course = Course(
        heights=heights,
        x0=x0,
        y0=y0,
        resolution=res,
        sections=sections,
        start=(round(x0 + cfg.spawn, 9), 0.0),
        finish_x=round(sections[-1].x_start + cfg.finish, 9),
        seed=seed,
        config=cfg,
    )
    spawn_section = course.section(course.section_at(course.start[0]))
    if spawn_section.kind != "flat" or not course.start[0] < course.finish_x:
        raise ValueError(
            f"course spawn {cfg.spawn} m lies on {spawn_section.name} ({spawn_section.kind}): "
            "it must be on a flat section before the finish"
        )
    return course


def _add_blocks(
    heights: np.ndarray, i0: int, i1: int, level: float, cfg: CourseConfig, rng: np.random.Generator
) -> None:
    """Rectangles of ``level +- block_height`` inside samples (i0, i1) along x and the band across.

    Sizes and corners are whole cells (edges on samples); a later block covers an earlier one,
    as in the training generator's ``_blocks``. The field's first and last samples stay at
    ``level``, so the blocks never touch the neighbouring sections.
    """
    res, ny = cfg.resolution, heights.shape[1]
    lo, hi = (_cells(s, res) for s in cfg.block_size)
    band = _cells(cfg.blocks_band, res)
    j_lo = (ny - 1 - band) // 2  # the band's first sample across the strip
    for _ in range(cfg.num_blocks):
        w, d = (int(v) for v in rng.integers(lo, hi + 1, size=2))
        i = int(rng.integers(i0 + 1, i1 - w + 1))  # samples i .. i+w-1, strictly inside (i0, i1)
        j = int(rng.integers(j_lo, j_lo + band - d + 2))
        heights[i : i + w, j : j + d] = level + float(rng.choice([-cfg.block_height, cfg.block_height]))
