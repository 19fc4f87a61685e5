"""The robot drawn offscreen with MuJoCo's renderer, with what a reviewer of a run needs to see.

One frame = the 3D view from a camera that follows the base, plus a text strip below it:

* the commanded planar velocity (green) and the measured one (blue) as arrows from above the base,
  in the world frame (the base-frame vectors turned by the base's yaw), 1 m of arrow per m/s;
* every joint over its speed or torque limit coloured on the model (the geoms of the body that
  joint moves), the colour saying how far over: yellow just over, orange at +25 %, magenta at +50 %
  and beyond (no red: the base is red) (the largest of its speed and torque overrun, relative to the limit);
* the strip: simulated time, controller state, command and measurement, the running violation
  event counts, the joints over now, and the colour scale.

Which joints are over, and by how much, is decided by the caller (sim2sim from the contract's
limits through :mod:`aow_policy.violations`, the replay from its event statistics); this module
only draws, so both show violations the same way. Joints are matched by name.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import mujoco
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from viz.gl import make_renderer

# Colour scale of an overrun (|value| - limit) / limit: stops of (ratio, rgb).
SCALE_STOPS = ((0.0, (1.0, 0.9, 0.0)), (0.25, (1.0, 0.45, 0.0)), (0.5, (0.9, 0.0, 0.9)))
SCALE_MAX = SCALE_STOPS[-1][0]
COMMAND_RGBA = (0.1, 0.85, 0.2, 1.0)
MEASURED_RGBA = (0.15, 0.45, 1.0, 1.0)
ARROW_HEIGHT = 0.35  # m above the base origin, clear of the body
ARROW_WIDTH = 0.03  # m
ARROW_LIFT = 0.08  # m between the command and the measured arrow
MIN_ARROW = 0.02  # m/s: slower is drawn as no arrow (a zero-length arrow is degenerate)
GRID_SPACING = 0.5  # m between the lines drawn on a flat floor
GRID_HALF_LINES = 8  # lines each side of the robot
GRID_RGBA = (0.62, 0.66, 0.7, 1.0)
STRIP_BACKGROUND = (24, 24, 24)
TEXT = (235, 235, 235)


def violation_rgb(ratio: float) -> tuple[float, float, float]:
    """Colour (0..1 floats) of an overrun of ``ratio`` times the limit (clipped to the scale)."""
    r = min(max(float(ratio), 0.0), SCALE_MAX)
    for (r0, c0), (r1, c1) in itertools.pairwise(SCALE_STOPS):
        if r <= r1:
            a = (r - r0) / (r1 - r0)
            return tuple(float(x0 + a * (x1 - x0)) for x0, x1 in zip(c0, c1, strict=True))  # type: ignore[return-value]
    return SCALE_STOPS[-1][1]


@dataclass
class Overrun:
    """A joint over a limit: which quantity ('speed' or 'torque') and by how much (fraction of the limit)."""

    quantity: str
    ratio: float


@dataclass
class FrameInfo:
    """What a frame shows besides the robot's pose (velocities in the base frame: vx, vy, yaw rate)."""

    time: float  # s from the start of the run or the recording
    state: str = ""  # controller state; '' when unknown
    command: Sequence[float] | None = None
    measured: Sequence[float] | None = None
    over: Mapping[str, Overrun] = field(default_factory=dict)  # joint name -> overrun
    events: Mapping[str, int] = field(default_factory=dict)  # 'speed'/'torque' -> events so far
    note: str = ""  # e.g. "fixed base: no /odometry"


def joint_geoms(model: mujoco.MjModel, joint_names: Sequence[str]) -> dict[str, np.ndarray]:
    """Joint name -> ids of the geoms of the body the joint moves (matched by name in the model)."""
    out = {}
    for name in joint_names:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise ValueError(f"the model has no joint named {name!r}")
        out[name] = np.flatnonzero(model.geom_bodyid == model.jnt_bodyid[jid])
    return out


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow's bundled TrueType font
    except TypeError:  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _rgb255(rgba: Sequence[float]) -> tuple[int, int, int]:
    return (round(255 * rgba[0]), round(255 * rgba[1]), round(255 * rgba[2]))


def _signed(values: Sequence[float] | None) -> str:
    if values is None:
        return "n/a"
    vx, vy, wz = (float(v) for v in values)
    return f"vx {vx:+.2f} vy {vy:+.2f} wz {wz:+.2f}"


class RobotRenderer:
    """Renders frames of ``model`` (the AoW, any ground) with the overlays of :class:`FrameInfo`.

    ``width`` x ``height`` is the whole frame; the 3D view takes the top and the text strip the
    bottom. The camera looks at the body ``base_body`` from ``distance`` m, at a fixed world
    ``azimuth`` and ``elevation`` (degrees), following its position.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        joint_names: Sequence[str],
        width: int = 640,
        height: int = 480,
        *,
        base_body: str = "base",
        floor_geom: str = "floor",
        distance: float = 2.6,
        azimuth: float = 135.0,
        elevation: float = -20.0,
    ) -> None:
        if width < 64 or height < 64:
            raise ValueError(f"frame size must be at least 64 x 64 pixels, got {width} x {height}")
        self.model = model
        self.width, self.height = width, height
        self.font_size = max(8, round(width / 42))
        self.line_height = self.font_size + 3
        self.strip_height = 4 * self.line_height + 4
        self.view_height = height - self.strip_height
        if self.view_height < 32:
            raise ValueError(f"frame height {height} leaves no room for the 3D view above the text strip")
        self.base_body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, base_body)
        if self.base_body < 0:
            raise ValueError(f"the model has no body named {base_body!r}")
        self.joint_geoms = joint_geoms(model, joint_names)
        # A flat floor is one uniform colour: with a camera that follows the base the robot would seem
        # to stand still, so a grid is drawn on it (a heightfield shows its own relief instead).
        floor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, floor_geom)
        self._grid_z = (
            float(model.geom_pos[floor, 2])
            if floor >= 0 and model.geom_type[floor] == mujoco.mjtGeom.mjGEOM_PLANE
            else None
        )
        # The offscreen buffer must hold the frame; it is a visual setting, physics is unchanged.
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.view_height)
        self._renderer, self.backend = make_renderer(model, width, self.view_height)
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.camera.distance, self.camera.azimuth, self.camera.elevation = distance, azimuth, elevation
        self._legend = self._legend_image()

    @property
    def renderer(self) -> mujoco.Renderer:
        return self._renderer

    def close(self) -> None:
        self._renderer.close()

    def __enter__(self) -> RobotRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the 3D view -------------------------------------------------------------------------
    def update_scene(self, data: mujoco.MjData, info: FrameInfo) -> mujoco.MjvScene:
        """The scene of ``data`` (kinematics computed) with the joint colours and velocity arrows."""
        self.camera.lookat[:] = data.xpos[self.base_body]
        self._renderer.update_scene(data, self.camera)
        scene = self._renderer.scene
        colours = {}
        for name, overrun in info.over.items():
            geoms = self.joint_geoms.get(name)
            if geoms is None:
                continue
            rgba = (*violation_rgb(overrun.ratio), 1.0)
            for g in geoms.tolist():
                colours[g] = rgba
        if colours:
            for i in range(scene.ngeom):
                g = scene.geoms[i]
                if g.objtype == mujoco.mjtObj.mjOBJ_GEOM and g.objid in colours:
                    g.rgba[:] = colours[g.objid]
        base = data.xpos[self.base_body]
        for i in range(scene.nlight):
            light = scene.lights[i]
            if light.type == mujoco.mjtLightType.mjLIGHT_DIRECTIONAL:
                # a directional light's shadow map covers a box around its position: keep the robot in it
                light.pos[:2] = base[:2]
        if self._grid_z is not None:
            self._grid(scene, float(base[0]), float(base[1]))
        rot = data.xmat[self.base_body].reshape(3, 3)
        yaw = math.atan2(rot[1, 0], rot[0, 0])
        start = base + np.array([0.0, 0.0, ARROW_HEIGHT])
        # the measured arrow a little higher: a tracked command would hide it otherwise
        for velocity, rgba, lift in ((info.command, COMMAND_RGBA, 0.0), (info.measured, MEASURED_RGBA, ARROW_LIFT)):
            if velocity is not None:
                self._arrow(
                    scene, start + np.array([0.0, 0.0, lift]), yaw, float(velocity[0]), float(velocity[1]), rgba
                )
        return scene

    def _grid(self, scene: mujoco.MjvScene, x: float, y: float) -> None:
        """Lines every GRID_SPACING m in x and y on the floor, around (x, y), fixed to the world."""
        z = self._grid_z + 0.002  # just above the plane, or the floor hides them
        cx, cy = round(x / GRID_SPACING) * GRID_SPACING, round(y / GRID_SPACING) * GRID_SPACING
        reach = GRID_HALF_LINES * GRID_SPACING
        rgba = np.asarray(GRID_RGBA, np.float32)
        for k in range(-GRID_HALF_LINES, GRID_HALF_LINES + 1):
            for a, b in (
                ((cx + k * GRID_SPACING, cy - reach, z), (cx + k * GRID_SPACING, cy + reach, z)),
                ((cx - reach, cy + k * GRID_SPACING, z), (cx + reach, cy + k * GRID_SPACING, z)),
            ):
                if scene.ngeom >= scene.maxgeom:
                    return
                geom = scene.geoms[scene.ngeom]
                mujoco.mjv_initGeom(geom, mujoco.mjtGeom.mjGEOM_LINE, np.zeros(3), np.zeros(3), np.eye(3).ravel(), rgba)
                mujoco.mjv_connector(geom, mujoco.mjtGeom.mjGEOM_LINE, 1.5, np.array(a), np.array(b))
                _not_segmented(geom)
                scene.ngeom += 1

    def _arrow(self, scene: mujoco.MjvScene, start: np.ndarray, yaw: float, vx: float, vy: float, rgba: tuple) -> None:
        if math.hypot(vx, vy) < MIN_ARROW or scene.ngeom >= scene.maxgeom:
            return
        c, s = math.cos(yaw), math.sin(yaw)
        end = start + np.array([c * vx - s * vy, s * vx + c * vy, 0.0])
        geom = scene.geoms[scene.ngeom]
        mujoco.mjv_initGeom(
            geom, mujoco.mjtGeom.mjGEOM_ARROW, np.zeros(3), np.zeros(3), np.eye(3).ravel(), np.asarray(rgba, np.float32)
        )
        mujoco.mjv_connector(geom, mujoco.mjtGeom.mjGEOM_ARROW, ARROW_WIDTH, start, end)
        _not_segmented(geom)
        scene.ngeom += 1

    # ---- the frame ---------------------------------------------------------------------------
    def render(self, data: mujoco.MjData, info: FrameInfo) -> np.ndarray:
        """One frame, (height, width, 3) uint8 RGB."""
        self.update_scene(data, info)
        view = self._renderer.render()
        return np.concatenate([view, self._strip(info)], axis=0)

    def _legend_image(self) -> Image.Image:
        """The colour scale: a gradient from just over to SCALE_MAX over, labelled."""
        font = _font(self.font_size)
        width = max(40, self.width // 5)
        bar = np.array([violation_rgb(SCALE_MAX * i / (width - 1)) for i in range(width)]) * 255
        bar = np.repeat(bar[None].astype(np.uint8), self.font_size, axis=0)
        label = "over limit: +0%"
        end = f"+{SCALE_MAX:.0%}"
        draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        lw = int(draw.textlength(label + " ", font=font))
        ew = int(draw.textlength(" " + end, font=font))
        img = Image.new("RGB", (lw + width + ew, self.line_height), STRIP_BACKGROUND)
        d = ImageDraw.Draw(img)
        d.text((0, 0), label, fill=TEXT, font=font)
        img.paste(Image.fromarray(bar), (lw, 1))
        d.text((lw + width, 0), " " + end, fill=TEXT, font=font)
        return img

    def _strip(self, info: FrameInfo) -> np.ndarray:
        font = _font(self.font_size)
        img = Image.new("RGB", (self.width, self.strip_height), STRIP_BACKGROUND)
        d = ImageDraw.Draw(img)
        y, x0 = 2, 4
        head = f"t {info.time:7.2f} s   {info.state or 'state unknown'}"
        if info.note:
            head += f"   {info.note}"
        d.text((x0, y), head, fill=TEXT, font=font)
        y += self.line_height
        cmd = f"cmd  {_signed(info.command)}"
        d.text((x0, y), cmd, fill=_rgb255(COMMAND_RGBA), font=font)
        x = x0 + int(d.textlength(cmd + "   ", font=font))
        d.text((x, y), f"meas {_signed(info.measured)}", fill=_rgb255(MEASURED_RGBA), font=font)
        y += self.line_height
        counts = "  ".join(f"{k} {v}" for k, v in info.events.items()) or "n/a"
        over = ", ".join(
            f"{name} {o.quantity} +{o.ratio:.0%}" for name, o in sorted(info.over.items(), key=lambda kv: -kv[1].ratio)
        )
        d.text((x0, y), f"violation events: {counts}   over now: {over or 'none'}", fill=TEXT, font=font)
        y += self.line_height
        img.paste(self._legend, (x0, y))
        lx = x0 + self._legend.width + int(d.textlength("    ", font=font))
        d.text((lx, y), "arrows: command", fill=_rgb255(COMMAND_RGBA), font=font)
        lx += int(d.textlength("arrows: command ", font=font))
        d.text((lx, y), "measured", fill=_rgb255(MEASURED_RGBA), font=font)
        return np.asarray(img)


def _not_segmented(geom: mujoco.MjvGeom) -> None:
    """A decoration added to the scene is no object of the model: mjv_initGeom leaves segid as it was
    in memory, and a garbage segid crashed mujoco.Renderer's segmentation pass (IndexError)."""
    geom.segid = -1
    geom.objtype = mujoco.mjtObj.mjOBJ_UNKNOWN
    geom.objid = -1
