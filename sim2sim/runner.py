"""Sim-to-sim without ROS: the MuJoCo "hardware", the deployment controller core and a command script.

One loop over physics steps plays what happens on the robot, in order, at each step:

1. the hardware applies the latest joint command, advances one physics step and publishes the state
   it reached (JointState every step, Odometry and GridMap at their rates; the first at one step
   after 0, as a sensor reports after measuring); a scripted operator publishes geometry_msgs/Twist
   on ``/cmd_vel``;
2. every control period, the controller does what the controller node does with ``auto_start``:
   ``~/start`` once fresh joint states are in (ZERO_TORQUE -> STAND_UP -> POLICY; never restarted
   after a fault), ``core.step(now)`` gives the joint command, published as sensor_msgs/JointState
   on ``/joint_commands``, and the node's diagnostics go to ``/diagnostics`` (10 Hz and at every
   state change here, for the replay's phase split; the node's default is 1 Hz).

Until the first joint command the drives damp (the hardware's fail-safe).

The operator is a command script unless ``run(operator=...)`` gives a closed-loop one
(:class:`Operator`, e.g. :class:`sim2sim.driver.LineDriver` on the terrain course): it hears
``/odometry`` like any subscriber, decides each ``/cmd_vel`` in place of the script (which it is
shown), and may end the run early. The command goes the scripted one's way: the same message,
topic, rate and bag.

"Publishing" delivers the message object to its subscribers at once (the controller core's
``on_*`` callbacks, the hardware's command input) and to the bag recorder, so the bag holds
exactly what the controller saw and sent. Time is simulation time (s) throughout, as a ROS 2 system
with ``use_sim_time`` would stamp it.
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from rosbags.typesys import Stores, get_typestore

from aow_policy.controller import ControllerConfig, ControllerCore, ControllerState
from aow_policy.loop_stats import LoopStats
from aow_policy.messages import MessageFactory, joint_command_msg, twist_msg
from aow_policy.monitor import ViolationEvent, ViolationMonitor
from aow_policy.node_support import controller_diagnostics
from aow_policy.policy import PolicyRunner
from aow_policy.robot import Robot, load_robot
from sim2sim.commands import CommandSchedule, default_schedule, load_script, segments_from_records
from sim2sim.course import CourseConfig
from sim2sim.hardware import HardwareConfig, SimHardware, Topics, steps_between
from sim2sim.metrics import (
    FallCriteria,
    FallDetector,
    FallEvent,
    SegmentResult,
    SegmentTracker,
    ViolationOnsets,
    as_plain,
)
from sim2sim.recorder import BagRecorder
from sim2sim.world import RoughTerrainConfig, build_world
from training.sim.model import LEG_ACTUATOR_MODELS, LegActuator
from viz.video import VideoOptions, check_target

if TYPE_CHECKING:
    from sim2sim.video import SimVideo
    from sim2sim.viewer import SimViewer

DISTROS = {"humble": Stores.ROS2_HUMBLE, "jazzy": Stores.ROS2_JAZZY}
CONTROLLER_STATUS_NAME = "/controller_node: controller"  # what the controller node names its status
AUTO_START_RETRY = 1.0  # s between ~/start attempts, as the controller node's auto_start


@dataclass(frozen=True)
class Sim2SimConfig:
    """Everything a run can change; the CLI exposes each field."""

    duration: float = 30.0  # s of simulated time, standing up included
    terrain: str = "flat"  # flat, rough, course or block
    seed: int | None = None  # terrain generation (None: sim2sim.world.DEFAULT_SEEDS, per terrain)
    stand_up: float = 2.0  # s, the controller's stand-up interpolation
    cmd_vel_hz: float = 50.0
    diagnostics_hz: float = 10.0  # plus one message at every state change
    settle: float = 1.0  # s at the start of each segment reported separately
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    topics: Topics = field(default_factory=Topics)
    falls: FallCriteria = field(default_factory=FallCriteria)
    rough: RoughTerrainConfig = field(default_factory=RoughTerrainConfig)
    # The strip of terrain "course" or "block" (of that layout); None: the terrain's own
    # (sim2sim.course.strip_config), so that terrain="block" alone gives the block.
    course: CourseConfig | None = None
    controller: Mapping[str, Any] = field(default_factory=dict)  # other ControllerConfig settings
    distro: str = "humble"  # message definitions (typestore) for the bag
    storage: str = "mcap"  # or sqlite3
    bag_version: int = 9
    compress: bool = False  # zstd chunks (mcap only)
    robot_path: str | None = None  # robot contract YAML (default: the package's)

    def validate(self) -> None:
        if not (math.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"duration must be a positive number of seconds, got {self.duration!r}")
        if not self.stand_up >= 0:
            raise ValueError(f"stand_up must be >= 0 s, got {self.stand_up!r}")
        if not self.settle >= 0:
            raise ValueError(f"settle must be >= 0 s, got {self.settle!r}")
        if self.distro not in DISTROS:
            raise ValueError(f"distro must be one of {sorted(DISTROS)}, got {self.distro!r}")
        for name in ("cmd_vel_hz", "diagnostics_hz"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive rate, got {value!r}")
        self.hardware.validate()


class Operator(Protocol):
    """A closed-loop operator: what ``run(operator=...)`` calls, in this order, during a run.

    * ``on_odometry(msg, t)``: every nav_msgs/Odometry the hardware publishes (a subscriber of
      ``/odometry`` like the controller);
    * ``command(script_time, scheduled) -> (vx, vy, yaw_rate)``: every cmd_vel period, the command
      to publish on ``/cmd_vel``; ``scheduled`` is the script's command at that time and
      ``script_time`` is < 0 before the controller enters POLICY (the script's own convention);
    * ``done``: read at every cmd_vel period before ``command``; once true the run ends there
      (its ``sim_time`` is then shorter than the duration asked for).
    """

    @property
    def done(self) -> bool: ...

    def on_odometry(self, msg: Any, t: float) -> None: ...

    def command(self, script_time: float, scheduled: tuple[float, float, float]) -> tuple[float, float, float]: ...


@dataclass
class Sim2SimResult:
    policy: str
    terrain: str
    sim_time: float  # s simulated
    wall_time: float  # s taken
    real_time_factor: float  # simulated seconds per wall-clock second
    policy_start: float | None  # sim time the controller entered POLICY
    segments: list[SegmentResult]
    falls: list[FallEvent]
    final_state: str
    fault: str | None
    transitions: list[tuple[float, str, str]]  # (time, new state, reason)
    violations: dict[str, Any]  # aow_policy.monitor.ViolationMonitor.summary()
    message_counts: dict[str, int]  # per topic, published
    bag: Path | None = None
    storage: str | None = None
    commands_refused_by_hardware: int = 0
    worst_violations: list[dict[str, Any]] = field(default_factory=list)  # largest overruns, events as dicts
    # violation events per quantity: after_command_step (start within 0.5 s of a command change),
    # elsewhere, before_policy (sim2sim.metrics.ViolationOnsets)
    violation_onsets: dict[str, dict[str, int]] = field(default_factory=dict)
    controller_loop: dict[str, float] = field(default_factory=dict)  # core.step compute time (LoopStats)
    video: Path | None = None  # --video: the MP4 file written
    video_frames: int = 0
    leg_actuator: str = "pd"  # how the leg drives were simulated (training.sim.model.LegActuator)

    @property
    def fell(self) -> bool:
        return bool(self.falls)

    def to_dict(self) -> dict[str, Any]:
        d = as_plain(self)
        d["bag"] = str(self.bag) if self.bag else None
        d["video"] = str(self.video) if self.video else None
        d["fell"] = self.fell
        return d

    def format(self) -> str:
        """A short human-readable report."""
        lines = [
            f"sim-to-sim: {self.sim_time:.1f} s simulated on {self.terrain} ground in {self.wall_time:.1f} s "
            f"(real-time factor {self.real_time_factor:.1f}), {self.leg_actuator} leg drives",
        ]
        if self.policy_start is None:
            lines.append("the controller never reached POLICY")
        else:
            lines.append(f"controller in POLICY from t = {self.policy_start:.2f} s; final state {self.final_state}")
        if self.fault:
            lines.append(f"fault: {self.fault}")
        lines.append("")
        header = (
            f"{'segment':<12} {'command vx vy yaw':>20} {'in POLICY':>9}   {'mean |error| vx vy yaw':>24}   settled"
        )
        lines += [header, "-" * len(header)]
        for s in self.segments:
            cmd = " ".join(f"{v:5.2f}" for v in s.command)
            err = " ".join(f"{v:6.3f}" for v in s.mean_abs_error) if s.mean_abs_error else "n/a".rjust(20)
            settled = " ".join(f"{v:6.3f}" for v in s.mean_abs_error_settled) if s.mean_abs_error_settled else "n/a"
            lines.append(f"{s.name[:12]:<12} {cmd:>20} {s.policy_fraction:9.0%}   {err:>24}   {settled}")
        lines.append("")
        if self.falls:
            lines.append(f"falls: {len(self.falls)}; first at t = {self.falls[0].time:.2f} s ({self.falls[0].reason})")
        else:
            lines.append("falls: none")
        v = self.violations
        for quantity, label in (("velocity", "joint speed"), ("effort", "joint torque")):
            joints = v["joints"][quantity]
            worst = sorted(joints.items(), key=lambda kv: -kv[1]["samples_over"])[:3]
            worst_text = ", ".join(f"{k} {d['samples_over']}" for k, d in worst if d["samples_over"]) or "none"
            limit = v["constraint_limits"]["joint_speed" if quantity == "velocity" else "joint_torque"]
            lines.append(
                f"{label} violations (limit {limit:g}): {v['events'][quantity]} events, "
                f"{v['violating_samples'][quantity]} of {v['samples']} samples (most samples over: {worst_text})"
            )
        lines.append(
            f"policy steps with any violation: {v['violating_policy_steps']['any']} of {v['policy_steps']} "
            f"({v['violations_per_episode']['any']:.2f} per 20 s episode)"
        )
        if self.violation_onsets:
            parts = []
            for quantity, label in (("velocity", "joint speed"), ("effort", "joint torque")):
                c = self.violation_onsets.get(quantity)
                if c:
                    parts.append(f"{label} {c['after_command_step']} of {sum(c.values())}")
            lines.append(f"violation events starting within 0.5 s after a command step: {', '.join(parts)}")
        if self.worst_violations:
            e = self.worst_violations[0]
            lines.append(
                f"worst overrun: {e['joint']} {e['quantity']} peak {e['peak']:.2f} (limit {e['limit']:g}) "
                f"at t = {e['start']:.2f} s for {e['duration'] * 1e3:.1f} ms"
            )
        loop = self.controller_loop
        if "compute_mean_ms" in loop:
            lines.append(
                f"controller core.step (observation, height scan, inference): mean {loop['compute_mean_ms']:.3f} ms, "
                f"p99 {loop['compute_p99_ms']:.3f} ms"
            )
        counts = ", ".join(f"{topic} {n}" for topic, n in sorted(self.message_counts.items()))
        lines.append(f"messages: {counts}")
        if self.bag:
            lines.append(f"bag: {self.bag} ({self.storage})")
        if self.video:
            lines.append(f"video: {self.video} ({self.video_frames} frames)")
        return "\n".join(lines)


WORST_EVENTS_KEPT = 10


def _keep_worst(kept: list[ViolationEvent], event: ViolationEvent) -> None:
    """Keep the events with the largest overrun beyond the limit."""
    kept.append(event)
    kept.sort(key=lambda e: -e.overrun)
    del kept[WORST_EVENTS_KEPT:]


class Bus:
    """In-process publish/subscribe: every message goes to its topic's subscribers and the taps."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Callable[[Any, float], Any]]] = defaultdict(list)
        self._taps: list[Callable[[str, Any, float], Any]] = []
        self.counts: dict[str, int] = defaultdict(int)

    def subscribe(self, topic: str, callback: Callable[[Any, float], Any]) -> None:
        self._subscribers[topic].append(callback)

    def tap(self, callback: Callable[[str, Any, float], Any]) -> None:
        self._taps.append(callback)

    def publish(self, topic: str, msg: Any, t: float) -> None:
        self.counts[topic] += 1
        for tap in self._taps:
            tap(topic, msg, t)
        for callback in self._subscribers.get(topic, ()):
            callback(msg, t)


def resolve_schedule(
    commands: CommandSchedule | str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None,
    robot: Robot,
    length: float,
) -> CommandSchedule:
    """The command schedule of a run: a schedule, a script path, segment mappings, or the default."""
    if commands is None:
        return default_schedule(length)
    if isinstance(commands, CommandSchedule):
        return commands
    if isinstance(commands, str | os.PathLike):
        return load_script(commands, robot)
    return segments_from_records(commands, robot, source="commands")


def diagnostics_msg(factory: MessageFactory, core: ControllerCore, loop: LoopStats, now: float) -> Any:
    """The controller node's diagnostic_msgs/DiagnosticArray (same status name, level, message and keys)."""
    level, message, values = controller_diagnostics(core, loop, now)
    status_cls = factory.types["diagnostic_msgs/msg/DiagnosticStatus"]
    status = factory.new(
        "diagnostic_msgs/msg/DiagnosticStatus",
        level=getattr(status_cls, level),
        name=CONTROLLER_STATUS_NAME,
        message=message,
        hardware_id=core.robot.name,
        values=[factory.new("diagnostic_msgs/msg/KeyValue", key=k, value=v) for k, v in values.items()],
    )
    return factory.new("diagnostic_msgs/msg/DiagnosticArray", header=factory.header(now), status=[status])


def policy_leg_actuator(contract: Mapping[str, Any]) -> str:
    """The leg drive model a policy trained with, from its ONNX contract ("pd" before the field existed)."""
    model = (contract.get("training") or {}).get("leg_actuator") or "pd"
    if model not in LEG_ACTUATOR_MODELS:
        raise ValueError(f"policy contract training.leg_actuator: expected one of {LEG_ACTUATOR_MODELS}, got {model!r}")
    return str(model)


def run(
    policy: str | os.PathLike[str],
    duration: float | None = None,
    commands: CommandSchedule | str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
    record: str | os.PathLike[str] | None = None,
    *,
    config: Sim2SimConfig | None = None,
    robot: Robot | None = None,
    progress: bool = False,
    video: str | os.PathLike[str] | None = None,
    video_options: VideoOptions | None = None,
    viewer_port: int | None = None,
    operator: Operator | None = None,
    **overrides: Any,
) -> Sim2SimResult:
    """Run an exported policy in sim-to-sim; see the module docstring.

    ``policy``: an ONNX file exported with aow-export. ``duration`` (s, standing up included) and
    keyword ``overrides`` replace fields of ``config`` (:class:`Sim2SimConfig`). ``commands``: a
    script path, a :class:`CommandSchedule`, a list of segment mappings, or None for the default
    sequence filling the time after standing up. ``record``: a new bag directory to write.
    ``video``: a new MP4 file the run is rendered to as it happens (:mod:`sim2sim.video`), with
    ``video_options`` (frame rate in simulated time, size; :class:`viz.video.VideoOptions`).
    ``viewer_port``: serve the run to a web browser at http://127.0.0.1:PORT as it happens, in real
    time, with start/stop and velocity-command controls (:mod:`sim2sim.viewer`).
    ``operator``: a closed-loop operator (:class:`Operator`) deciding each /cmd_vel from the
    odometry, in place of the script (``commands`` is still the schedule it is shown, the
    segments tracking is reported for and the command steps violation onsets are sorted by).
    """
    cfg = config if config is not None else Sim2SimConfig()
    if duration is not None:
        overrides["duration"] = duration
    if overrides:
        cfg = replace(cfg, **overrides)
    cfg.validate()
    if video is not None:
        video = check_target(video)
        video_options = video_options if video_options is not None else VideoOptions()
        video_options.validate()
    robot = robot if robot is not None else load_robot(cfg.robot_path)
    runner = PolicyRunner.load(policy, robot)
    controller_cfg = ControllerConfig.from_mapping({**cfg.controller, "stand_up_duration": cfg.stand_up})
    core = ControllerCore(robot, runner, controller_cfg)

    hw_cfg = cfg.hardware
    control_every = steps_between(hw_cfg.physics_hz, 1.0 / robot.rates.policy_dt, "the policy rate")
    cmd_every = steps_between(hw_cfg.physics_hz, cfg.cmd_vel_hz, "cmd_vel_hz")
    diag_every = steps_between(hw_cfg.physics_hz, cfg.diagnostics_hz, "diagnostics_hz")
    total_steps = round(cfg.duration * hw_cfg.physics_hz)
    policy_dt = robot.rates.policy_dt
    # The script starts when the controller enters POLICY: the first control period plus the stand-up.
    length = cfg.duration - cfg.stand_up - policy_dt
    if commands is None and length <= 0:
        raise ValueError(
            f"duration {cfg.duration} s leaves no time for commands after standing up ({cfg.stand_up} s): "
            f"lengthen the duration or shorten the stand-up"
        )
    schedule = resolve_schedule(commands, robot, length)

    typestore = get_typestore(DISTROS[cfg.distro])
    factory = MessageFactory.from_typestore(typestore)
    leg_actuator = hw_cfg.leg_actuator or policy_leg_actuator(runner.contract)
    world = build_world(
        robot,
        cfg.terrain,
        physics_dt=1.0 / hw_cfg.physics_hz,
        seed=cfg.seed,
        rough=cfg.rough,
        course=cfg.course,
        leg_actuator=LegActuator(leg_actuator),
    )
    topics = cfg.topics
    bus = Bus()
    hardware = SimHardware(world, robot, factory, bus.publish, hw_cfg, topics)
    bus.subscribe(topics.joint_states, core.on_joint_state)
    bus.subscribe(topics.odometry, core.on_odometry)
    bus.subscribe(topics.elevation_map, core.on_grid_map)
    bus.subscribe(topics.cmd_vel, core.on_command)
    bus.subscribe(topics.joint_commands, hardware.on_joint_command)
    if operator is not None:
        bus.subscribe(topics.odometry, operator.on_odometry)
    # The violation monitor node's core, fed the published JointState messages as that node is.
    monitor = ViolationMonitor(robot)
    worst_events: list[ViolationEvent] = []
    onsets = ViolationOnsets(schedule)

    def monitor_joint_state(msg: Any, t: float) -> None:
        for event in monitor.update_joint_state(msg, t):
            _keep_worst(worst_events, event)
            onsets.add(event.quantity, event.start, policy_start)

    bus.subscribe(topics.joint_states, monitor_joint_state)

    tracker = SegmentTracker(schedule, policy_dt, cfg.settle)
    falls = FallDetector(cfg.falls)
    recorder = BagRecorder(record, typestore, cfg.storage, cfg.bag_version, cfg.compress) if record else None
    video_out: SimVideo | None = None
    viewer: SimViewer | None = None
    video_path: Path | None = None
    video_frames = 0
    command_now: tuple[float, float, float] | None = None  # the last /cmd_vel published
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(cfg.duration, 3), unit="sim s", desc="sim-to-sim", leave=False)

    policy_start: float | None = None
    auto_start, next_start = True, 0.0

    def scan_heights() -> np.ndarray | None:
        """The heights the policy's height scan read last (None when the policy has no scan)."""
        return core.inputs.heights if core.scanner is not None else None

    loop = LoopStats(policy_dt)  # period on simulation time, compute time on the wall clock
    last_state = core.state
    bag_path: Path | None = None
    wall0 = time.perf_counter()
    try:
        if recorder is not None:
            recorder.open()
            bus.tap(recorder.write)
        if video is not None:
            from sim2sim.video import SimVideo  # the renderer and encoder load only when asked for

            video_out = SimVideo(video, video_options, hardware, robot)
        if viewer_port is not None:
            from sim2sim.viewer import SimViewer  # viser loads only when asked for

            viewer = SimViewer(viewer_port, hardware, robot, robot.height_scan.points)
            print(f"viewer: {viewer.url} (the simulation runs in real time)", flush=True)
        for _ in range(total_steps):
            hardware.step()  # applies the latest joint command
            k, t = hardware.step_count, hardware.time
            hardware.publish_sensors()
            if k == 1:  # the controller node is up before the robot's first state: its first diagnostics
                bus.publish(topics.diagnostics, diagnostics_msg(factory, core, loop, t), t)
            if k % cmd_every == 0:
                if operator is not None and operator.done:
                    break
                script_time = t - policy_start if policy_start is not None else -1.0
                command_now = schedule.command_at(script_time)
                if operator is not None:
                    command_now = operator.command(script_time, command_now)
                if viewer is not None:
                    command_now = viewer.command(command_now)
                bus.publish(topics.cmd_vel, twist_msg(factory, *command_now), t)
            if k % control_every == 0:
                for request in viewer.requests() if viewer is not None else ():
                    auto_start = False  # the page's start/stop, as the node's services, end the auto start
                    if request == "stop":
                        core.stop(t, "stop requested from the viewer")
                    else:
                        core.start(t)
                # the node's auto_start: ~/start once fresh joint states are in; never again after that
                if auto_start and core.fault is None and t >= next_start:
                    auto_start = not core.start(t)[0]
                    next_start = t + AUTO_START_RETRY
                compute_start = time.perf_counter()
                command = core.step(t)
                loop.record(t, t + time.perf_counter() - compute_start)
                if command.has_measurement:
                    bus.publish(topics.joint_commands, joint_command_msg(factory, command), t)
                if core.state is ControllerState.POLICY and policy_start is None:
                    policy_start = t  # entered POLICY at the end of this step
                elif core.state is ControllerState.POLICY:
                    velocity = np.array([*hardware.base_linear_velocity[:2], hardware.base_angular_velocity[2]])
                    tracker.add(t - policy_start, velocity)
                falls.update(t, hardware.height_above_ground, hardware.tilt, hardware.base_touches_ground())
                if k % diag_every == 0 or core.state is not last_state:
                    bus.publish(topics.diagnostics, diagnostics_msg(factory, core, loop, t), t)
                    last_state = core.state
                if bar is not None and k % (control_every * 25) == 0:
                    bar.n = round(t, 3)
                    bar.refresh()
            if video_out is not None:
                video_out.step(t, core.state.value, command_now, monitor)
            if viewer is not None:
                viewer.step(t, core.state.value, command_now, monitor, scan_heights)
        for event in monitor.finish():
            _keep_worst(worst_events, event)
            onsets.add(event.quantity, event.start, policy_start)
        if recorder is not None:
            bag_path = recorder.close()
        if video_out is not None:
            video_frames = video_out.frames
            video_path, video_out = video_out.close(), None
    except BaseException:
        if recorder is not None:
            recorder.abort()
        if video_out is not None:
            video_out.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
        if viewer is not None:
            viewer.close()
    wall = time.perf_counter() - wall0
    sim_time = hardware.time  # the duration asked for, unless the operator ended the run early
    return Sim2SimResult(
        policy=str(policy),
        terrain=cfg.terrain,
        sim_time=sim_time,
        wall_time=wall,
        real_time_factor=sim_time / wall if wall > 0 else math.inf,
        policy_start=policy_start,
        segments=tracker.results(None if policy_start is None else sim_time - policy_start),
        falls=list(falls.events),
        final_state=core.state.value,
        fault=core.fault,
        transitions=[(t, s.value, why) for t, s, why in core.transitions],
        violations=monitor.summary(),
        worst_violations=[e.to_dict() for e in worst_events],
        violation_onsets=onsets.counts,
        controller_loop=loop.summary(),
        message_counts=dict(bus.counts),
        bag=bag_path,
        storage=cfg.storage if bag_path else None,
        commands_refused_by_hardware=hardware.commands_refused,
        video=video_path,
        video_frames=video_frames,
        leg_actuator=leg_actuator,
    )
