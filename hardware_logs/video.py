"""``aow-replay BAG --video``: a recorded bag drawn on the robot model, frame by frame.

* joints from the JointState topic (positions, matched by name; joints a message lacks keep the
  standing pose);
* the base from ``/odometry`` (pose, and its twist as the measured velocity); without odometry the
  base stands fixed at the standing height, and every frame says so;
* terrain from ``/elevation_map`` (grid_map_msgs/GridMap) when the bag has it: every recorded map is
  written into one world heightfield (later maps over earlier ones), so the ground seen is the
  ground the robot mapped; without maps, the flat floor;
* the command from ``/cmd_vel``, the controller state from ``/diagnostics``;
* violations from the replay's own statistics (:func:`hardware_logs.analyse.analyse_bag`, the
  events the report prints and ``events.csv`` lists): a joint is coloured in every frame whose
  interval (previous frame, this frame] overlaps one of its events, with that event's peak overrun
  relative to the limit; the strip counts the events started so far.

Frames are on the JointState clock the statistics use (header stamps, or bag time when the stamps
are zero): one every 1/fps s from the first message to the last, each showing the last message at
or before its time.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from aow_policy.messages import MessageError, grid_map_layer, odometry_to_base_state
from aow_policy.robot import Robot
from hardware_logs.analyse import BagResult, diagnostics_state
from hardware_logs.fastcdr import JOINT_STATE_TYPE
from hardware_logs.reader import BagError, BagSource
from viz.render import FrameInfo, Overrun, RobotRenderer
from viz.video import VideoOptions, VideoWriter

ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
GRID_MAP_TYPE = "grid_map_msgs/msg/GridMap"
TWIST_TYPE = "geometry_msgs/msg/Twist"
MAX_TERRAIN_CELLS = 4_000_000  # the union of all maps; larger is refused rather than exhausting memory
QUANTITY_LABELS = {"velocity": "speed", "torque": "torque"}


@dataclass(frozen=True)
class ReplayTopics:
    joint_states: str = "/joint_states"
    odometry: str = "/odometry"
    elevation_map: str = "/elevation_map"
    cmd_vel: str = "/cmd_vel"
    diagnostics: str = "/diagnostics"
    map_layer: str = "elevation"


@dataclass
class ReplayVideo:
    path: Path
    frames: int
    fixed_base: bool  # no odometry: the base stood still in the video
    terrain: str  # "elevation map" or "flat floor"
    seconds: float  # recorded time covered


def _stamp_ns(raw: bytes) -> int | None:
    """Header stamp of a CDR message whose first field is a std_msgs/Header (little-endian CDR), or None."""
    if len(raw) < 12 or raw[1] != 0x01:  # byte 1: 0x01 is CDR little-endian
        return None
    sec, nanosec = struct.unpack_from("<iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def _terrain(maps: list[Any], layer: str) -> tuple[np.ndarray, tuple[float, float], tuple[float, float]] | None:
    """(heights rows=y cols=x, half extents, centre xy) of all maps merged on the first map's grid."""
    layers = []
    for msg in maps:
        try:
            layers.append(grid_map_layer(msg, layer))
        except MessageError:
            continue  # a malformed map is skipped; the others still make the ground
    if not layers:
        return None
    res = layers[0].resolution
    cells = []
    lo, hi = np.array([np.inf, np.inf]), np.array([-np.inf, -np.inf])
    for g in layers:
        x, y = g.cell_centers()
        ix, iy = np.round(x / res).astype(np.int64), np.round(y / res).astype(np.int64)
        cells.append((ix, iy, g.to_unwrapped()))
        lo = np.minimum(lo, (ix.min(), iy.min()))
        hi = np.maximum(hi, (ix.max(), iy.max()))
    nx, ny = int(hi[0] - lo[0]) + 1, int(hi[1] - lo[1]) + 1
    if nx * ny > MAX_TERRAIN_CELLS:
        raise ValueError(
            f"the elevation maps cover {nx} x {ny} cells at {res} m: too large to draw as one terrain "
            f"(at most {MAX_TERRAIN_CELLS} cells)"
        )
    grid = np.full((nx, ny), np.nan)
    for ix, iy, values in cells:  # in bag order: later maps overwrite earlier ones
        grid[np.ix_(ix - int(lo[0]), iy - int(lo[1]))] = values
    finite = np.isfinite(grid)
    if not finite.any():
        return None
    grid[~finite] = grid[finite].min()  # unknown cells: the lowest known ground
    if min(nx, ny) < 2:
        grid = np.repeat(np.repeat(grid, 2, axis=0), 2, axis=1)
        nx, ny = grid.shape
    half = ((nx - 1) * res / 2.0, (ny - 1) * res / 2.0)
    centre = ((lo[0] + (nx - 1) / 2.0) * res, (lo[1] + (ny - 1) / 2.0) * res)
    return grid.T, half, (float(centre[0]), float(centre[1]))


def _build_model(robot: Robot, terrain: Any) -> mujoco.MjModel:
    from training.sim.model import FLOOR, build_spec

    if terrain is None:
        return build_spec(wheeled=True, robot=robot).compile()
    heights, half, centre = terrain
    spec = build_spec(wheeled=True, robot=robot, heightfield=(heights, half))
    floor = spec.geom(FLOOR)
    floor.pos = [centre[0], centre[1], floor.pos[2]]
    floor.rgba = [0.55, 0.5, 0.42, 1.0]  # mapped ground, told apart from the flat floor's grey-blue
    return spec.compile()


class _Events:
    """One quantity's events on the JointState clock, for the per-frame lookup."""

    def __init__(self, result: Any, label: str) -> None:
        events = result.events if result is not None else np.zeros(0)
        self.label = label
        self.names = result.joint_names if result is not None else ()
        self.start = events["start_stamp_ns"].astype(np.int64) if len(events) else np.zeros(0, np.int64)
        self.end = self.start + (events["duration_ns"].astype(np.int64) if len(events) else 0)
        self.joint = events["joint"] if len(events) else np.zeros(0, np.int64)
        limits = result.limits[self.joint] if len(events) else np.zeros(0)
        self.ratio = events["peak"] / limits if len(events) else np.zeros(0)

    def count(self, t: int) -> int:
        return int((self.start <= t).sum())

    def over(self, t_prev: int, t: int, out: dict[str, Overrun]) -> None:
        """Joints with an event overlapping (t_prev, t] (an event holds over [start, start + duration))."""
        hit = (self.start <= t) & (self.end > t_prev)
        for j, ratio in zip(self.joint[hit].tolist(), self.ratio[hit].tolist(), strict=True):
            name = self.names[j]
            if name not in out or ratio > out[name].ratio:
                out[name] = Overrun(self.label, float(ratio))


def render_bag(
    path: str | os.PathLike[str],
    video: str | os.PathLike[str],
    robot: Robot,
    result: BagResult,
    options: VideoOptions | None = None,
    topics: ReplayTopics | None = None,
    distro: str | None = None,
) -> ReplayVideo:
    """Render the bag at ``path`` to ``video`` (see the module docstring).

    ``result``: the bag's :func:`~hardware_logs.analyse.analyse_bag` result (its events colour the
    joints). Raises BagError when the bag has no usable JointState topic.
    """
    options = options if options is not None else VideoOptions()
    options.validate()
    topics = topics if topics is not None else ReplayTopics()
    if not result.ok or result.start_stamp_ns is None:
        reason = "; ".join(result.warnings) or "no JointState message could be read"
        raise BagError(f"{path}: cannot render a video: {reason}")
    use_bag_time = result.time_source == "bag"
    events = [
        _Events(result.velocity, QUANTITY_LABELS["velocity"]),
        _Events(result.torque, QUANTITY_LABELS["torque"]),
    ]
    with BagSource(path, topics.joint_states, topics.diagnostics, distro=distro) as source:
        present = source.info.topics
        store = source.typestore()

        def decoder(topic: str, msgtype: str) -> Any:
            if present.get(topic, ("", 0))[0] != msgtype:
                return None  # absent, or another type: that part of the picture is left out
            return lambda raw: store.deserialize_cdr(raw, msgtype)

        decode_joints = decoder(topics.joint_states, JOINT_STATE_TYPE)
        decode_odometry = decoder(topics.odometry, ODOMETRY_TYPE)
        decode_map = decoder(topics.elevation_map, GRID_MAP_TYPE)
        decode_cmd = decoder(topics.cmd_vel, TWIST_TYPE)
        has_diagnostics = bool(topics.diagnostics) and present.get(topics.diagnostics, ("", 0))[0] == (
            "diagnostic_msgs/msg/DiagnosticArray"
        )
        decode_diag = (
            (lambda raw: store.deserialize_cdr(raw, "diagnostic_msgs/msg/DiagnosticArray"))
            if (has_diagnostics)
            else None
        )

        terrain = None
        if decode_map is not None:
            maps = [decode_map(raw) for _, _, raw in source.messages([topics.elevation_map])]
            terrain = _terrain(maps, topics.map_layer)
        model = _build_model(robot, terrain)
        data = mujoco.MjData(model)
        key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "default")
        mujoco.mj_resetDataKeyframe(model, data, key)
        standing = data.qpos.copy()
        if terrain is not None:  # stand the fixed base on the mapped ground near the origin
            standing[2] += float(terrain[0].max()) if decode_odometry is None else 0.0
        qpos_adr = {}
        for name in robot.joint_names:
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            qpos_adr[name] = int(model.jnt_qposadr[jid])
        base_adr = int(model.jnt_qposadr[model.body_jntadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "base")]])

        note = "fixed base: no /odometry in the bag" if decode_odometry is None else ""
        period_ns = 1e9 / options.fps
        t0 = result.start_stamp_ns
        latest: dict[str, Any] = {}  # topic -> decoded message (decoded when it arrives: few per frame)
        state = ""
        joint_raw: bytes | None = None
        last_stamp = t0
        renderer = RobotRenderer(model, robot.joint_names, options.width, options.height, azimuth=options.azimuth)
        writer = VideoWriter(video, options.fps, options.width, options.height)
        frame = 0

        def render_until(t_ns: float, inclusive: bool) -> None:
            """Frames due before (or at) t_ns, showing the messages seen so far."""
            nonlocal frame
            while joint_raw is not None and (
                t0 + frame * period_ns < t_ns or (inclusive and t0 + frame * period_ns <= t_ns)
            ):
                t_frame = t0 + frame * period_ns
                data.qpos[:] = standing
                msg = decode_joints(joint_raw)
                for name, value in zip(msg.name, msg.position, strict=False):
                    adr = qpos_adr.get(name)
                    if adr is not None and math.isfinite(value):
                        data.qpos[adr] = value
                measured = None
                odom = latest.get(topics.odometry)
                if odom is not None:
                    base = odometry_to_base_state(odom)
                    if base.finite and base.quaternion_norm > 0.0:  # a zero quaternion is no pose
                        x, y, z, w = base.orientation_xyzw / base.quaternion_norm
                        data.qpos[base_adr : base_adr + 7] = (*base.position, w, x, y, z)
                        measured = (*base.linear_velocity[:2], base.angular_velocity[2])
                mujoco.mj_kinematics(model, data)
                mujoco.mj_camlight(model, data)  # lights and cameras follow the bodies (not in mj_kinematics)
                twist = latest.get(topics.cmd_vel)
                command = None if twist is None else (twist.linear.x, twist.linear.y, twist.angular.z)
                over: dict[str, Overrun] = {}
                t_int = math.floor(t_frame)
                for e in events:
                    e.over(math.floor(t_frame - period_ns), t_int, over)
                counts = {e.label: e.count(t_int) for e in events}
                info = FrameInfo((t_frame - t0) * 1e-9, state, command, measured, over, counts, note)
                writer.write(renderer.render(data, info))
                frame += 1

        try:
            wanted = [topics.joint_states, topics.odometry, topics.cmd_vel]
            if decode_diag is not None:
                wanted.append(topics.diagnostics)
            for topic, bag_time, raw in source.messages(wanted):
                if topic == topics.joint_states:
                    stamp = bag_time if use_bag_time else _stamp_ns(raw)
                    if stamp is None:  # big-endian CDR: let rosbags read the header
                        header = decode_joints(raw).header
                        stamp = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
                    render_until(stamp, inclusive=False)
                    joint_raw, last_stamp = raw, stamp
                elif topic == topics.odometry and decode_odometry is not None:
                    latest[topic] = decode_odometry(raw)
                elif topic == topics.cmd_vel and decode_cmd is not None:
                    latest[topic] = decode_cmd(raw)
                elif topic == topics.diagnostics and decode_diag is not None:
                    value = diagnostics_state(decode_diag(raw))
                    if value is not None:
                        state = value.strip().upper()
            render_until(last_stamp, inclusive=True)
            frames = writer.frames
            out = writer.close()
        except BaseException:
            writer.abort()
            raise
        finally:
            renderer.close()
    return ReplayVideo(
        out,
        frames,
        fixed_base=decode_odometry is None,
        terrain="elevation map" if terrain is not None else "flat floor",
        seconds=(frames - 1) / options.fps if frames else 0.0,
    )
