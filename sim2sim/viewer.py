"""``aow-sim2sim --viewer``: the running simulation served to a web browser (viser, three.js).

http://127.0.0.1:PORT shows the robot (its MuJoCo geoms as meshes, placed from the simulation
every update), the terrain (a grid on flat ground, the heightfield as a mesh), the height-scan
points (where the policy's height scan samples, at the heights it read, or the terrain's where
the policy has no scan), the commanded (green) and measured (blue) planar velocity as arrows,
and every joint over its speed or torque limit coloured with the videos' colour scale
(:func:`viz.render.violation_rgb`; the largest overrun since the previous update, checked every
physics step with :mod:`aow_policy.violations`).

Controls: Start and Stop (the controller node's ``~/start`` and ``~/stop``), a velocity command
(setting any of vx, vy, yaw rate switches from the script to it; unticking "manual command"
goes back to the script), and "show robot". The page also shows the time, the controller state,
the measured velocity and the violation event counts.

With the viewer the simulation runs in real time (it waits for the wall clock), so that what the
page shows is what a robot would do; the scene is updated about 25 times a second.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np

from aow_policy import violations
from aow_policy.monitor import ViolationMonitor
from aow_policy.robot import Robot
from viz.render import COMMAND_RGBA, MEASURED_RGBA, violation_rgb

UPDATE_PERIOD = 0.04  # s of wall-clock time between scene updates
SCAN_RGB = (250, 200, 40)
ARROW_HEIGHT = 0.35  # m above the base, as in the videos
CAMERA_OFFSET = np.array([1.8, -1.8, 1.1])  # m from the base: front right, slightly above


# ---- meshes of MuJoCo geom primitives (local frame: MuJoCo's, the axis of revolution is z) ----------


def _lathe(profile: Sequence[tuple[float, float]], segments: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """A surface of revolution about z from (radius, z) points, bottom to top."""
    angles = np.linspace(0.0, 2.0 * np.pi, segments, endpoint=False)
    rings = [np.stack([r * np.cos(angles), r * np.sin(angles), np.full(segments, z)], axis=1) for r, z in profile]
    vertices = np.concatenate(rings)
    faces = []
    for i in range(len(profile) - 1):
        for j in range(segments):
            a, b = i * segments + j, i * segments + (j + 1) % segments
            c, d = a + segments, b + segments
            faces += [(a, b, d), (a, d, c)]
    return vertices.astype(np.float32), np.array(faces, np.uint32)


def geom_mesh(geom_type: int, size: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(vertices, faces) of a box, cylinder, capsule or sphere of MuJoCo ``size``; None for other types."""
    t = mujoco.mjtGeom
    if geom_type == t.mjGEOM_BOX:
        hx, hy, hz = size
        v = np.array([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)], np.float32)
        f = [(0, 2, 3), (0, 3, 1), (4, 5, 7), (4, 7, 6), (0, 1, 5), (0, 5, 4)]
        f += [(2, 6, 7), (2, 7, 3), (0, 4, 6), (0, 6, 2), (1, 3, 7), (1, 7, 5)]
        return v, np.array(f, np.uint32)
    if geom_type == t.mjGEOM_CYLINDER:
        r, h = size[0], size[1]
        return _lathe([(0.0, -h), (r, -h), (r, h), (0.0, h)])
    if geom_type in (t.mjGEOM_CAPSULE, t.mjGEOM_SPHERE):
        r, h = size[0], size[1] if geom_type == t.mjGEOM_CAPSULE else 0.0
        arc = np.linspace(-np.pi / 2, np.pi / 2, 9)
        bottom = [(r * math.cos(a), -h + r * math.sin(a)) for a in arc[:5]]
        top = [(r * math.cos(a), h + r * math.sin(a)) for a in arc[4:]]
        return _lathe(bottom + top)
    return None


def _rgb(rgba: Sequence[float]) -> tuple[int, int, int]:
    return (round(255 * rgba[0]), round(255 * rgba[1]), round(255 * rgba[2]))


class SimViewer:
    """The browser view of one sim-to-sim run; the run calls :meth:`step` after every physics step."""

    def __init__(self, port: int, hardware: Any, robot: Robot, scan_points: np.ndarray) -> None:
        import viser  # imported here: runs without --viewer do not need it

        self.hardware = hardware
        self.robot = robot
        self.model: mujoco.MjModel = hardware.world.model
        self.names = robot.joint_names
        self._scan_points = np.asarray(scan_points, np.float64)
        self._limits = {"speed": robot.constraint_velocity_limits, "torque": robot.constraint_torque_limits}
        self._worst = np.full(len(self.names), -1.0)
        self._lock = threading.Lock()
        self._requests: list[str] = []
        self._manual: tuple[float, float, float] | None = None
        self._wall0: float | None = None
        self._sim0 = 0.0
        self._next_update = 0.0
        self._placed: set[int] = set()  # browsers whose camera was put in place
        self.server = viser.ViserServer(host="127.0.0.1", port=port, verbose=False)
        self.port = self.server.get_port()  # viser takes the next free port when this one is busy
        self._build_scene()
        self._build_gui()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- scene -------------------------------------------------------------------------------
    def _build_scene(self) -> None:
        model, scene = self.model, self.server.scene
        scene.set_up_direction("+z")
        floor = self.hardware.world.info.floor_geom_id
        if model.geom_type[floor] == mujoco.mjtGeom.mjGEOM_HFIELD:
            self._add_heightfield(floor)
        else:
            scene.add_grid("/ground", width=40.0, height=40.0, cell_size=0.5, section_size=2.0)
        self._bodies: dict[int, Any] = {}
        self._geoms: dict[int, Any] = {}
        self._geom_rgb: dict[int, tuple[int, int, int]] = {}
        self.robot_root = scene.add_frame("/robot", show_axes=False)
        for g in range(model.ngeom):
            body = int(model.geom_bodyid[g])
            mesh = geom_mesh(int(model.geom_type[g]), model.geom_size[g]) if body != 0 else None
            if mesh is None:
                continue
            if body not in self._bodies:
                name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or f"body{body}"
                self._bodies[body] = scene.add_frame(f"/robot/{name}", show_axes=False)
            body_name = self._bodies[body].name
            rgb = _rgb(model.geom_rgba[g])
            self._geoms[g] = scene.add_mesh_simple(
                f"{body_name}/geom{g}",
                mesh[0],
                mesh[1],
                color=rgb,
                position=tuple(model.geom_pos[g]),
                wxyz=tuple(model.geom_quat[g]),
            )
            self._geom_rgb[g] = rgb
        self._joint_geoms = {}
        for j, name in enumerate(self.names):
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            body = model.jnt_bodyid[jid]
            self._joint_geoms[j] = [g for g in self._geoms if model.geom_bodyid[g] == body]
        self._coloured: dict[int, tuple[int, int, int]] = {}
        self._scan = scene.add_point_cloud(
            "/height_scan", np.zeros((len(self._scan_points), 3), np.float32), SCAN_RGB, point_size=0.025
        )
        self._arrows: Any = None

    def _add_heightfield(self, floor: int) -> None:
        model = self.model
        h = int(model.geom_dataid[floor])
        nrow, ncol = int(model.hfield_nrow[h]), int(model.hfield_ncol[h])
        rx, ry, rz, _ = model.hfield_size[h]
        adr = int(model.hfield_adr[h])
        data = model.hfield_data[adr : adr + nrow * ncol].reshape(nrow, ncol) * rz
        step = max(1, math.ceil(max(nrow, ncol) / 256))  # a few hundred thousand triangles at most
        data = data[::step, ::step]
        nr, nc = data.shape
        xs = np.linspace(-rx, rx, ncol)[::step]
        ys = np.linspace(-ry, ry, nrow)[::step]
        gx, gy = np.meshgrid(xs, ys)
        vertices = np.stack([gx, gy, data], axis=-1).reshape(-1, 3).astype(np.float32)
        idx = np.arange(nr * nc).reshape(nr, nc)
        a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, :-1], idx[1:, 1:]
        faces = np.concatenate([np.stack([a, b, d], -1).reshape(-1, 3), np.stack([a, d, c], -1).reshape(-1, 3)])
        self.server.scene.add_mesh_simple(
            "/ground",
            vertices,
            faces.astype(np.uint32),
            color=(150, 155, 165),
            position=tuple(model.geom_pos[floor]),
            flat_shading=True,
        )

    # ---- GUI ---------------------------------------------------------------------------------
    def _build_gui(self) -> None:
        gui = self.server.gui
        low, high = self.robot.commands.low, self.robot.commands.high
        with gui.add_folder("Controller"):
            self.state_text = gui.add_text("state", initial_value="", disabled=True)
            self.time_text = gui.add_text("time (s)", initial_value="0.00", disabled=True)
            start, stop = gui.add_button("Start"), gui.add_button("Stop")
            start.on_click(lambda _: self._request("start"))
            stop.on_click(lambda _: self._request("stop"))
        with gui.add_folder("Velocity command"):
            self.manual = gui.add_checkbox("manual command", initial_value=False)
            self.command_inputs = [
                gui.add_number(label, initial_value=0.0, min=float(lo), max=float(hi), step=0.05)
                for label, lo, hi in zip(("vx (m/s)", "vy (m/s)", "yaw rate (rad/s)"), low, high, strict=True)
            ]
            for handle in self.command_inputs:
                handle.on_update(lambda _: self._set_manual())
            self.manual.on_update(lambda _: self._set_manual())
        with gui.add_folder("Measured"):
            self.measured_text = [
                gui.add_text(label, initial_value="0.00", disabled=True)
                for label in ("measured vx (m/s)", "measured vy (m/s)", "measured yaw rate (rad/s)")
            ]
            self.events_text = gui.add_text("violation events", initial_value="speed 0, torque 0", disabled=True)
        gui.add_markdown(
            "Joints over a speed or torque limit: yellow just over, orange +25 %, magenta +50 % and more. "
            "Arrows: green command, blue measured. Yellow dots: height scan."
        )
        self.follow = gui.add_checkbox("camera follows the robot", initial_value=True)
        self.show_robot = gui.add_checkbox("show robot", initial_value=True)
        self.show_robot.on_update(lambda _: setattr(self.robot_root, "visible", self.show_robot.value))

    def _request(self, what: str) -> None:
        with self._lock:
            self._requests.append(what)

    def _set_manual(self) -> None:
        # a command typed on the page takes over from the script at once
        values = tuple(float(h.value) for h in self.command_inputs)
        if any(v != 0.0 for v in values) and not self.manual.value:
            self.manual.value = True
        with self._lock:
            self._manual = values if self.manual.value else None  # type: ignore[assignment]

    # ---- the run's side ----------------------------------------------------------------------
    def requests(self) -> list[str]:
        """Start/stop requests from the page since the last call (in order)."""
        with self._lock:
            out, self._requests = self._requests, []
        return out

    def command(self, scripted: tuple[float, float, float]) -> tuple[float, float, float]:
        """The command to publish: the page's when it set one, else the script's."""
        with self._lock:
            return self._manual if self._manual is not None else scripted

    def step(self, t: float, state: str, command: Sequence[float] | None, monitor: ViolationMonitor, scan: Any) -> None:
        """After a physics step at simulated time t: track overruns, keep real time, update the page."""
        hw = self.hardware
        for quantity, values in (("speed", hw.joint_velocity), ("torque", hw.joint_effort)):
            limits = self._limits[quantity]
            over = violations.over_limit(values, limits)
            if over.any():
                np.maximum(
                    self._worst, np.where(over, violations.overrun(values, limits) / limits, -1.0), out=self._worst
                )
        now = time.perf_counter()
        if self._wall0 is None:
            self._wall0, self._sim0 = now, t
        ahead = (t - self._sim0) - (now - self._wall0)
        if ahead > 0.002:
            time.sleep(ahead)
            now = time.perf_counter()
        if now < self._next_update:
            return
        self._next_update = now + UPDATE_PERIOD
        self._update(t, state, command, monitor, scan)

    def _update(
        self, t: float, state: str, command: Sequence[float] | None, monitor: ViolationMonitor, scan: Any
    ) -> None:
        hw, data = self.hardware, self.hardware.data
        with self.server.atomic():
            for body, frame in self._bodies.items():
                frame.position = tuple(data.xpos[body])
                frame.wxyz = tuple(data.xquat[body])
            colours: dict[int, tuple[int, int, int]] = {}
            for j in np.flatnonzero(self._worst >= 0.0).tolist():
                rgb = _rgb(violation_rgb(float(self._worst[j])))
                for g in self._joint_geoms[j]:
                    colours[g] = rgb
            self._worst.fill(-1.0)
            for g in set(self._coloured) | set(colours):
                rgb = colours.get(g, self._geom_rgb[g])
                if self._coloured.get(g, self._geom_rgb[g]) != rgb:
                    self._geoms[g].color = rgb
            self._coloured = colours
            base = data.xpos[hw.world.info.base_body_id]
            yaw = hw.base_yaw
            c, s = math.cos(yaw), math.sin(yaw)
            local = self._scan_points
            xy = base[:2] + local @ np.array([[c, s], [-s, c]])
            heights = scan() if scan is not None else None
            if heights is None or not np.all(np.isfinite(heights)):
                heights = hw.world.heights(xy[:, 0], xy[:, 1])
            self._scan.points = np.column_stack([xy, heights]).astype(np.float32)
            measured = (*hw.base_linear_velocity[:2], hw.base_angular_velocity[2])
            segments, colors = [], []
            start = base + np.array([0.0, 0.0, ARROW_HEIGHT])
            for velocity, rgba, lift in ((command, COMMAND_RGBA, 0.0), (measured, MEASURED_RGBA, 0.08)):
                if velocity is None or math.hypot(velocity[0], velocity[1]) < 0.02:
                    continue
                a = start + np.array([0.0, 0.0, lift])
                b = a + np.array([c * velocity[0] - s * velocity[1], s * velocity[0] + c * velocity[1], 0.0])
                segments.append([a, b])
                colors.append(_rgb(rgba))
            if self._arrows is not None:
                self._arrows.remove()
                self._arrows = None
            if segments:
                self._arrows = self.server.scene.add_arrows(
                    "/velocity",
                    np.array(segments, np.float32),
                    np.array(colors, np.uint8),
                    shaft_radius=0.015,
                    head_radius=0.035,
                    head_length=0.08,
                )
            if self.follow.value:
                self._follow(base)
            self.state_text.value = state
            self.time_text.value = f"{t:.2f}"
            for text, value in zip(self.measured_text, measured, strict=True):
                text.value = f"{value:+.2f}"
            speed = int(monitor.trackers["velocity"].events.sum() + monitor.trackers["velocity"].active.sum())
            torque = int(monitor.trackers["effort"].events.sum() + monitor.trackers["effort"].active.sum())
            self.events_text.value = f"speed {speed}, torque {torque}"

    def _follow(self, base: np.ndarray) -> None:
        """Each browser's camera keeps its offset from the robot (orbiting and zooming still work);
        a newly connected one starts at the front right, as the videos' camera."""
        target = np.asarray(base, np.float64)
        for client_id, client in self.server.get_clients().items():
            camera = client.camera
            with client.atomic():
                if client_id not in self._placed:
                    self._placed.add(client_id)
                    camera.up_direction = (0.0, 0.0, 1.0)
                    camera.position = tuple(target + CAMERA_OFFSET)
                    camera.look_at = tuple(target)  # after the position: viser moves look_at with it
                else:
                    # moving the position moves look_at by as much: the view translates with the robot
                    shift = target - np.asarray(camera.look_at)
                    if np.all(np.isfinite(shift)) and np.linalg.norm(shift) > 1e-3:
                        camera.position = tuple(np.asarray(camera.position) + shift)

    def close(self) -> None:
        self.server.stop()
