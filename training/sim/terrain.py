"""Terrain: a flat plane, or a rough height field of sub-terrains in rows of rising difficulty.

The rough terrain follows Rudin et al. ("Learning to walk in minutes", legged_gym): a grid of
square tiles, one row per difficulty level (row index along x) and one column per sub-terrain
type (random bumps, slopes up and down, stairs up and down, discrete blocks up to 20 cm), with a
flat border around it. "Up" and "down" are what a robot does leaving the tile's centre, where it
spawns: out of a pit up the stairs, down from a pyramid (legged_gym's naming; OUTWARD_RISE). A
curriculum moves each robot to a harder row after a long walk and to an easier row after a
failure.

One array, two users: :class:`Terrain` generates heights in metres, :meth:`Terrain.add_to_spec`
hands them to MuJoCo as a height field, and :class:`HeightSampler` reads the *compiled model's*
``hfield_data`` (a view, not a copy) to answer the height scan, interpolating it the way MuJoCo's
collision does (two triangles per cell, split along the (i, j)-(i+1, j+1) diagonal). What the
robot touches and what it sees are therefore the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np
import torch

from training.sim.model import FLOOR, add_heightfield

TERRAIN_GEOM = FLOOR  # the ground geom's name, whatever its shape (training.sim.model's convention)
SUB_TERRAINS = ("flat", "bumps", "slope_up", "slope_down", "stairs_up", "stairs_down", "blocks")


CURRICULUM_DISTANCES = ("displacement", "along_command")


@dataclass
class TerrainConfig:
    kind: str = "plane"  # "plane" or "rough"
    num_rows: int = 10  # difficulty levels (along x)
    num_cols: int = 10  # sub-terrain columns (along y)
    tile_size: float = 8.0  # m, square tiles
    horizontal_scale: float = 0.1  # m between height samples (legged_gym's value)
    border: float = 8.0  # m of flat ground around the tiles
    # Share of columns per sub-terrain type (normalised); legged_gym's rough-terrain mix.
    proportions: dict[str, float] = field(
        default_factory=lambda: {
            "bumps": 0.2,
            "slope_up": 0.1,
            "slope_down": 0.1,
            "stairs_up": 0.2,
            "stairs_down": 0.2,
            "blocks": 0.2,
        }
    )
    platform_size: float = 2.0  # m, flat square at each tile centre where robots spawn
    max_slope: float = 0.4  # rise over run at the hardest row
    step_width: float = 0.31  # m, stair tread
    step_height: tuple[float, float] = (0.05, 0.18)  # m: base + difficulty * slope (legged_gym)
    block_height: tuple[float, float] = (0.05, 0.15)  # m: up to 0.20 m at the hardest row
    block_size: tuple[float, float] = (1.0, 2.0)  # m, side length range of blocks
    num_blocks: int = 20
    bump_height: tuple[float, float] = (0.02, 0.06)  # m: amplitude base + difficulty * slope
    bump_resolution: float = 0.2  # m between random bump samples (then interpolated)
    seed: int = 0
    # curriculum
    curriculum: bool = True
    max_init_level: int = 4
    # What an episode's walking is judged by (up a row past half a tile, down below half of what
    # was asked): "displacement", legged_gym's net distance from the spawn point against the last
    # command held for the whole episode; or "along_command", the metres made good along each
    # step's commanded direction (capped at its speed) against the metres commanded. With
    # commands redrawn every few seconds, reversed, sideways or turning in place, net displacement
    # is a random walk that says little about the terrain (issue 23).
    curriculum_distance: str = "displacement"
    friction: float = 1.0

    def validate(self) -> None:
        if self.kind not in ("plane", "rough"):
            raise ValueError(f"terrain.kind: expected 'plane' or 'rough', got {self.kind!r}")
        for name in ("num_rows", "num_cols"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"terrain.{name}: must be at least 1, got {getattr(self, name)}")
        for name in ("tile_size", "horizontal_scale", "platform_size", "step_width", "bump_resolution"):
            if not getattr(self, name) > 0:
                raise ValueError(f"terrain.{name}: must be positive, got {getattr(self, name)}")
        if self.curriculum_distance not in CURRICULUM_DISTANCES:
            raise ValueError(
                f"terrain.curriculum_distance: expected one of {CURRICULUM_DISTANCES}, got {self.curriculum_distance!r}"
            )
        if self.border < 0:
            raise ValueError(f"terrain.border: must not be negative, got {self.border}")
        unknown = set(self.proportions) - set(SUB_TERRAINS)
        if unknown:
            raise ValueError(f"terrain.proportions: unknown sub-terrain(s) {sorted(unknown)} (known: {SUB_TERRAINS})")
        if not self.proportions or sum(self.proportions.values()) <= 0 or min(self.proportions.values()) < 0:
            raise ValueError(
                f"terrain.proportions: need non-negative weights with a positive sum, got {self.proportions}"
            )
        if self.block_height[0] + self.block_height[1] > 0.2 + 1e-9:
            raise ValueError("terrain.block_height: blocks are limited to 0.20 m at the hardest row")


# ---- sub-terrains: (n, n) heights in metres for one tile, x-major ---------------------------


def _tile_coords(n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Vertex coordinates relative to the tile centre, x-major [n, n]."""
    c = (np.arange(n) - (n - 1) / 2.0) * scale
    return np.meshgrid(c, c, indexing="ij")


def _flat(n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator) -> np.ndarray:
    return np.zeros((n, n))


def _bumps(n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator) -> np.ndarray:
    """Random uniform heights on a coarse grid, linearly interpolated (legged_gym's 'random')."""
    amp = cfg.bump_height[0] + difficulty * cfg.bump_height[1]
    size = (n - 1) * cfg.horizontal_scale
    m = max(2, round(size / cfg.bump_resolution) + 1)
    coarse = rng.uniform(-amp, amp, size=(m, m))
    coarse = np.round(coarse / 0.005) * 0.005  # legged_gym's 5 mm steps
    fine = np.linspace(0.0, m - 1.0, n)
    rows = np.stack([np.interp(fine, np.arange(m), coarse[:, j]) for j in range(m)], axis=1)
    heights = np.stack([np.interp(fine, np.arange(m), rows[i]) for i in range(n)], axis=0)
    return _platform(heights, n, cfg, level=None)


def _chebyshev_radius(n: int, cfg: TerrainConfig) -> np.ndarray:
    x, y = _tile_coords(n, cfg.horizontal_scale)
    return np.maximum(np.abs(x), np.abs(y))


# Robots spawn on a tile's centre platform and leave it outwards, so a kind is named after what
# the robot does leaving it, as legged_gym names its pair of stairs ("stairs up": the negative
# step height, a pit): "slope_up" / "stairs_up" is a valley / pit the robot climbs out of,
# "slope_down" / "stairs_down" a pyramid it walks down from. Before session 20 the signs were
# the other way round (the names described the tile seen from outside), so older runs' levels
# "stairs_up" measured stepping down (issue 23; docs/locomotion.md).
OUTWARD_RISE = {"slope_up": 1.0, "slope_down": -1.0, "stairs_up": 1.0, "stairs_down": -1.0}


def _slope(n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator, sign: float) -> np.ndarray:
    """A pyramid around the flat spawn platform: the ground rises (sign +1: a valley) or falls
    (-1: a hill) from the platform outwards."""
    half = (n - 1) * cfg.horizontal_scale / 2.0
    r = np.clip(_chebyshev_radius(n, cfg), cfg.platform_size / 2.0, half)
    return sign * difficulty * cfg.max_slope * (r - half)


def _stairs(n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator, sign: float) -> np.ndarray:
    """Pyramid stairs around the spawn platform: steps of ``step_height`` up (sign +1: a pit) or
    down (-1: a pyramid) from the platform outwards, the tile's edge at height 0."""
    step = cfg.step_height[0] + difficulty * cfg.step_height[1]
    half = (n - 1) * cfg.horizontal_scale / 2.0
    r = np.clip(_chebyshev_radius(n, cfg), cfg.platform_size / 2.0, half)
    # +1e-9: a vertex exactly on a step edge belongs to the step nearer the centre.
    return -sign * step * np.floor((half - r) / cfg.step_width + 1e-9)


def _blocks(n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator) -> np.ndarray:
    """Discrete rectangular blocks of random height (up to 20 cm), flat platform in the centre."""
    height = cfg.block_height[0] + difficulty * cfg.block_height[1]
    heights = np.zeros((n, n))
    lo, hi = (max(1, round(s / cfg.horizontal_scale)) for s in cfg.block_size)
    for _ in range(cfg.num_blocks):
        w, d = rng.integers(lo, hi + 1, size=2)
        i, j = rng.integers(0, max(1, n - w)), rng.integers(0, max(1, n - d))
        heights[i : i + w, j : j + d] = rng.choice([-height, -height / 2.0, height / 2.0, height])
    return _platform(heights, n, cfg, level=0.0)


def _platform(heights: np.ndarray, n: int, cfg: TerrainConfig, level: float | None) -> np.ndarray:
    """Flatten the centre square (at ``level``, or at the mean height there) for spawning."""
    inside = _chebyshev_radius(n, cfg) <= cfg.platform_size / 2.0
    heights[inside] = heights[inside].mean() if level is None else level
    return heights


def _make_tile(kind: str, n: int, cfg: TerrainConfig, difficulty: float, rng: np.random.Generator) -> np.ndarray:
    if kind == "flat":
        return _flat(n, cfg, difficulty, rng)
    if kind == "bumps":
        return _bumps(n, cfg, difficulty, rng)
    if kind in ("slope_up", "slope_down"):
        return _slope(n, cfg, difficulty, rng, OUTWARD_RISE[kind])
    if kind in ("stairs_up", "stairs_down"):
        return _stairs(n, cfg, difficulty, rng, OUTWARD_RISE[kind])
    if kind == "blocks":
        return _blocks(n, cfg, difficulty, rng)
    raise ValueError(f"unknown sub-terrain {kind!r} (known: {SUB_TERRAINS})")


def column_types(cfg: TerrainConfig) -> list[str]:
    """Sub-terrain type of each column, in proportion to ``cfg.proportions`` (legged_gym style)."""
    names = [k for k, w in cfg.proportions.items() if w > 0]
    weights = np.array([cfg.proportions[k] for k in names], dtype=float)
    bounds = np.cumsum(weights / weights.sum())
    return [
        names[min(int(np.searchsorted(bounds, (j + 0.5) / cfg.num_cols)), len(names) - 1)] for j in range(cfg.num_cols)
    ]


def row_difficulty(row: int, num_rows: int) -> float:
    """0 on the first row, 1 on the last."""
    return row / (num_rows - 1) if num_rows > 1 else 1.0


# ---- the terrain ------------------------------------------------------------------------------


@dataclass
class Terrain:
    """Heights [nx, ny] in metres (x-major), vertex (i, j) at (x0 + i*scale, y0 + j*scale)."""

    heights: np.ndarray
    x0: float
    y0: float
    scale: float
    origins: np.ndarray  # [num_rows, num_cols, 3] spawn point at each tile centre (on the ground)
    types: list[str]
    tile_size: float

    @property
    def num_rows(self) -> int:
        return self.origins.shape[0]

    @property
    def num_cols(self) -> int:
        return self.origins.shape[1]

    @classmethod
    def generate(cls, cfg: TerrainConfig) -> Terrain:
        """Build the rough terrain of ``cfg`` (deterministic for a given ``cfg.seed``)."""
        cfg.validate()
        rng = np.random.default_rng(cfg.seed)
        hs = cfg.horizontal_scale
        tile = round(cfg.tile_size / hs)  # cells per tile side
        border = round(cfg.border / hs)
        nx = cfg.num_rows * tile + 2 * border + 1
        ny = cfg.num_cols * tile + 2 * border + 1
        heights = np.zeros((nx, ny))
        types = column_types(cfg)
        for row in range(cfg.num_rows):
            difficulty = row_difficulty(row, cfg.num_rows)
            for col, kind in enumerate(types):
                i0, j0 = border + row * tile, border + col * tile
                heights[i0 : i0 + tile + 1, j0 : j0 + tile + 1] = _make_tile(kind, tile + 1, cfg, difficulty, rng)
        x0 = -(nx - 1) * hs / 2.0
        y0 = -(ny - 1) * hs / 2.0
        origins = np.zeros((cfg.num_rows, cfg.num_cols, 3))
        for row in range(cfg.num_rows):
            for col in range(cfg.num_cols):
                ci, cj = border + row * tile + tile // 2, border + col * tile + tile // 2
                origins[row, col] = (x0 + ci * hs, y0 + cj * hs, heights[ci, cj])
        return cls(heights, x0, y0, hs, origins, types, cfg.tile_size)

    @classmethod
    def from_heights(cls, heights: np.ndarray, x0: float, y0: float, scale: float) -> Terrain:
        """A terrain from given heights (tests, custom maps): one tile, origin at the centre."""
        heights = np.asarray(heights, dtype=float)
        if heights.ndim != 2 or min(heights.shape) < 2:
            raise ValueError(f"terrain heights: expected a 2-D array of at least 2x2, got shape {heights.shape}")
        ci, cj = (heights.shape[0] - 1) // 2, (heights.shape[1] - 1) // 2
        origin = np.array([[[x0 + ci * scale, y0 + cj * scale, heights[ci, cj]]]])
        return cls(heights, x0, y0, scale, origin, ["custom"], float(max(heights.shape) * scale))

    def trimesh(self) -> tuple[np.ndarray, np.ndarray]:
        """The height field as triangles, split the way MuJoCo splits its cells (along the
        (i, j)-(i+1, j+1) diagonal), so a mesh-based simulator (Isaac Gym) collides with the same
        surface. Returns vertices [nx*ny, 3] (index i*ny + j) and triangles [2(nx-1)(ny-1), 3]."""
        nx, ny = self.heights.shape
        gx, gy = np.meshgrid(self.x0 + self.scale * np.arange(nx), self.y0 + self.scale * np.arange(ny), indexing="ij")
        vertices = np.stack([gx.ravel(), gy.ravel(), self.heights.ravel()], axis=1).astype(np.float32)
        i, j = np.meshgrid(np.arange(nx - 1), np.arange(ny - 1), indexing="ij")
        v00 = (i * ny + j).ravel()
        v10, v01, v11 = v00 + ny, v00 + 1, v00 + ny + 1
        # Counter-clockwise seen from above (normals up): (00, 10, 11) and (00, 11, 01).
        triangles = np.concatenate([np.stack([v00, v10, v11], 1), np.stack([v00, v11, v01], 1)]).astype(np.uint32)
        return vertices, triangles

    @property
    def half_extent(self) -> tuple[float, float]:
        nx, ny = self.heights.shape
        return (nx - 1) * self.scale / 2.0, (ny - 1) * self.scale / 2.0

    def add_to_spec(self, spec: mujoco.MjSpec) -> None:
        """Make this height field the ground of ``spec`` (geom ``floor``, replacing any plane).

        Uses :func:`training.sim.model.add_heightfield`, which gives it the floor's contact
        parameters and stores the heights so the compiled field reproduces them in metres.
        The terrain must be centred on the world origin (``generate`` makes it so).
        """
        half = self.half_extent
        if abs(self.x0 + half[0]) > 1e-6 or abs(self.y0 + half[1]) > 1e-6:
            raise ValueError("terrain: the height field must be centred on the world origin")
        if spec.geom(FLOOR) is None:  # a bare spec: give add_heightfield a floor to replace
            spec.worldbody.add_geom(name=FLOOR, type=mujoco.mjtGeom.mjGEOM_PLANE, size=[1.0, 1.0, 0.1])
        add_heightfield(spec, self.heights.T, half)  # MuJoCo rows run along y


# ---- height lookup ---------------------------------------------------------------------------


class HeightSampler:
    """Terrain height at world (x, y), from the same array MuJoCo collides with.

    ``data`` is the model's ``hfield_data`` viewed as [ny, nx] (MuJoCo's row = y), values in
    [0, 1]; height = base + data * span. Points outside the field take the nearest edge value.
    """

    def __init__(
        self,
        data: torch.Tensor | None,
        x0: float = 0.0,
        y0: float = 0.0,
        scale: float = 1.0,
        span: float = 0.0,
        base: float = 0.0,
    ):
        self.data = data
        self.x0, self.y0, self.scale, self.span, self.base = x0, y0, scale, span, base
        if data is not None:
            self.ny, self.nx = data.shape
            self._flat = data.reshape(-1)

    @classmethod
    def plane(cls, height: float = 0.0) -> HeightSampler:
        return cls(None, base=height)

    @classmethod
    def from_model(cls, model: mujoco.MjModel, geom_name: str = TERRAIN_GEOM) -> HeightSampler:
        """Share the compiled model's height field (no copy); a plane if there is none."""
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, geom_name)
        if gid < 0 or model.geom_type[gid] != mujoco.mjtGeom.mjGEOM_HFIELD:
            return cls.plane(0.0)
        hid = model.geom_dataid[gid]
        nrow, ncol = int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid])
        adr = int(model.hfield_adr[hid])
        view = model.hfield_data[adr : adr + nrow * ncol].reshape(nrow, ncol)
        rx, ry, span, _ = model.hfield_size[hid]
        if abs(model.geom_quat[gid][0] - 1.0) > 1e-9:
            raise ValueError(f"geom {geom_name!r}: a rotated height field is not supported")
        px, py, pz = model.geom_pos[gid]
        return cls(
            torch.from_numpy(view),
            x0=float(px - rx),
            y0=float(py - ry),
            scale=float(2.0 * rx / (ncol - 1)),
            span=float(span),
            base=float(pz),
        )

    def to(self, device: torch.device | str) -> HeightSampler:
        data = None if self.data is None else self.data.to(device)
        return HeightSampler(data, self.x0, self.y0, self.scale, self.span, self.base)

    def __call__(self, xy: torch.Tensor) -> torch.Tensor:
        """Heights at points [..., 2] -> [...] (MuJoCo's triangle interpolation)."""
        return self.heights_at(xy[..., 0], xy[..., 1])

    def heights_at(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Heights at points given as separate x and y tensors of one shape.

        Written for speed on large batches (256 robots x 187 points): ``index_select`` gathers
        (several times faster than advanced indexing on CPU), the triangle chosen by index
        arithmetic, and max/min of the in-cell fractions instead of ``where``.
        """
        if self.data is None:
            return torch.full_like(x, self.base)
        u = ((x - self.x0) / self.scale).clamp_(0.0, self.nx - 1.0)
        v = ((y - self.y0) / self.scale).clamp_(0.0, self.ny - 1.0)
        i = u.floor().clamp_(max=self.nx - 2)
        j = v.floor().clamp_(max=self.ny - 2)
        fu, fv = u.sub_(i), v.sub_(j)
        # corner (i, j) is MuJoCo's row j, column i; exact in float32 below 2**24 samples
        idx = (j * self.nx + i).long().reshape(-1)
        upper = (fv > fu).reshape(-1)  # triangle (i,j),(i,j+1),(i+1,j+1); else (i,j),(i+1,j),(i+1,j+1)
        mid = idx + 1 + (self.nx - 1) * upper  # (i, j+1) in the upper triangle, (i+1, j) in the lower
        h00 = self._flat.index_select(0, idx)
        h11 = self._flat.index_select(0, idx + (self.nx + 1))
        h_mid = self._flat.index_select(0, mid)
        f_mid = torch.maximum(fu, fv).reshape(-1)  # the fraction along the first triangle edge
        f_far = torch.minimum(fu, fv).reshape(-1)
        h = torch.addcmul(h00, f_mid, h_mid - h00).addcmul_(f_far, h11 - h_mid)
        return h.mul_(self.span).add_(self.base).reshape(x.shape).to(x.dtype)


# ---- curriculum ------------------------------------------------------------------------------


class TerrainCurriculum:
    """Per-robot terrain level (row) and type (column); levels move with walking performance.

    Up a row when the robot walked farther than half a tile in its episode (and did not fail);
    down a row when it failed or walked less than half the distance its commands asked for.
    Robots that master the hardest row are sent to a random row, so every row stays populated
    (Rudin et al.).
    """

    def __init__(
        self,
        terrain: Terrain,
        num_envs: int,
        max_init_level: int,
        enabled: bool = True,
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ):
        self.enabled = enabled
        self.num_rows, self.num_cols = terrain.num_rows, terrain.num_cols
        self.tile_size = terrain.tile_size
        self.generator = generator
        self.origins_grid = torch.as_tensor(terrain.origins, dtype=torch.float32, device=device)
        top = min(max_init_level, self.num_rows - 1) if enabled else self.num_rows - 1
        self.levels = torch.randint(0, top + 1, (num_envs,), generator=generator).to(device)
        self.types = (torch.arange(num_envs) * self.num_cols // max(num_envs, 1)).to(device)
        # Robots per sub-terrain kind (several columns can share one): the kind that lags is the
        # one to read (stairs, measured in issue 23), and a mean over all kinds hides it.
        self.kinds = list(dict.fromkeys(terrain.types))
        column_kind = torch.tensor([self.kinds.index(k) for k in terrain.types], device=device)
        self.kind_of_env = column_kind[self.types]
        self._robots_per_kind = torch.bincount(self.kind_of_env, minlength=len(self.kinds)).float().clamp(min=1)
        self._kind_present = [n > 0 for n in torch.bincount(self.kind_of_env, minlength=len(self.kinds)).tolist()]

    def origins(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Spawn points [n, 3] (tile centre, on the ground) of the given envs."""
        if env_ids is None:
            return self.origins_grid[self.levels, self.types]
        return self.origins_grid[self.levels[env_ids], self.types[env_ids]]

    def update(
        self,
        env_ids: torch.Tensor,
        distance: torch.Tensor,
        commanded_distance: torch.Tensor,
        failed: torch.Tensor,
    ) -> None:
        """Move the given (ending) envs' levels; all arguments are [len(env_ids)]."""
        if not self.enabled or env_ids.numel() == 0:
            return
        up = (distance > 0.5 * self.tile_size) & ~failed
        down = (failed | (distance < 0.5 * commanded_distance)) & ~up
        levels = self.levels[env_ids] + up.long() - down.long()
        solved = levels >= self.num_rows
        random_rows = torch.randint(0, self.num_rows, (env_ids.numel(),), generator=self.generator).to(levels.device)
        levels = torch.where(solved, random_rows, levels.clamp(min=0))
        self.levels[env_ids] = levels

    def mean_level(self) -> float:
        return float(self.levels.float().mean())

    def mean_level_by_kind(self) -> dict[str, float]:
        """Mean level of the robots on each sub-terrain kind that has any (0 = easiest row)."""
        sums = torch.bincount(self.kind_of_env, weights=self.levels.float(), minlength=len(self.kinds))
        means = (sums / self._robots_per_kind).tolist()
        return {k: m for k, m, present in zip(self.kinds, means, self._kind_present, strict=True) if present}
