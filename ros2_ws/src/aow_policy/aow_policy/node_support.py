"""What the ROS 2 nodes share that needs no ROS to define or test: parameters, diagnostics, factory.

Parameters are specified once here (name, default, description, range) and declared by the nodes
from these specs, so ``config/controller.yaml``, the nodes and the tests cannot drift apart.
ROS packages are imported inside the functions that need them only, so this module imports
anywhere; the ``*_node`` modules are the only ones that import rclpy at the top.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from aow_policy.cdr import CdrError
from aow_policy.controller import ControllerConfig, ControllerCore, ControllerState
from aow_policy.loop_stats import LoopStats
from aow_policy.msg_defs import GRID_MAP

OUTPUT_MODES = ("joint_state", "ros2_control")


@dataclass(frozen=True)
class ParamSpec:
    """One node parameter: its default fixes its type (bool, int, float or str)."""

    name: str
    default: bool | int | float | str
    description: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> None:
        """Raise ValueError naming the parameter if ``value`` is outside its range or choices."""
        if self.choices and value not in self.choices:
            raise ValueError(f"parameter {self.name}: {value!r} is not one of {list(self.choices)}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.min is not None and not value >= self.min:
                raise ValueError(f"parameter {self.name}: {value!r} is below its minimum {self.min}")
            if self.max is not None and not value <= self.max:
                raise ValueError(f"parameter {self.name}: {value!r} is above its maximum {self.max}")


_CORE_DESCRIPTIONS = {
    "stand_up_duration": ("Seconds to move from the measured pose to the default pose after ~/start", 0.0, 30.0),
    "initial_state": ("State before the first ~/start: ZERO_TORQUE or DAMPING", None, None),
    "joint_states_max_age": ("Max age (s) of the last joint state; older -> DAMPING", 0.001, 1.0),
    "odometry_max_age": ("Max age (s) of the last odometry; older -> DAMPING (in POLICY)", 0.001, 1.0),
    "height_map_max_age": (
        "Max age (s) since the last elevation map arrived; older -> DAMPING (in POLICY)",
        0.01,
        10.0,
    ),
    "height_map_stamp_max_age": (
        "Max age (s) of the map's header stamp against the node clock; <= 0 disables this check",
        -1.0,
        60.0,
    ),
    "command_max_age": ("Max age (s) of the last cmd_vel; older -> zero velocity command (no fault)", 0.01, 10.0),
    "height_map_layer": ("GridMap layer holding terrain heights", None, None),
    "height_sampling": ("Height scan sampling: bilinear or nearest", None, None),
    "min_height_valid_fraction": ("Share of height-scan points that must have map data, else DAMPING", 0.01, 1.0),
    "twist_frame": ("Frame of the Odometry twist: child (REP 105, the base) or parent", None, None),
    "joint_position_margin": ("Radians a measured joint may lie beyond its limits before it is refused", 0.001, 3.2),
    "joint_velocity_factor": ("Measured |velocity| up to this times the actuator limit is plausible", 1.0, 10.0),
    "max_base_linear_speed": ("Plausible base speed (m/s) in odometry; above -> DAMPING", 0.1, 100.0),
    "max_base_angular_speed": ("Plausible base angular speed (rad/s) in odometry; above -> DAMPING", 0.1, 100.0),
    "quaternion_norm_tolerance": ("Odometry orientation with | |q| - 1 | above this is refused", 1e-6, 0.5),
    "check_frames": ("Require the map's frame_id to equal the odometry's header.frame_id", None, None),
}
_CORE_CHOICES = {
    "initial_state": ("ZERO_TORQUE", "DAMPING"),
    "height_sampling": ("bilinear", "nearest"),
    "twist_frame": ("child", "parent"),
}


def _core_specs() -> tuple[ParamSpec, ...]:
    defaults = ControllerConfig()
    specs = []
    for f in fields(ControllerConfig):
        description, lo, hi = _CORE_DESCRIPTIONS[f.name]
        specs.append(ParamSpec(f.name, getattr(defaults, f.name), description, lo, hi, _CORE_CHOICES.get(f.name, ())))
    return tuple(specs)


CONTROLLER_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("policy", "", "Exported ONNX policy (aow-export); required"),
    ParamSpec("robot_config", "", "Robot contract YAML; empty: the package's config/aow_c.yaml"),
    ParamSpec(
        "control_rate_hz",
        0.0,
        "Control loop rate; 0: the policy's rate from its contract (any other value must equal it)",
        0.0,
        1000.0,
    ),
    ParamSpec("auto_start", False, "Call ~/start by itself once fresh joint states arrive"),
    ParamSpec(
        "output_mode",
        "joint_state",
        "joint_state: JointState on joint_commands_topic; ros2_control: "
        "Float64MultiArray to a leg position and a wheel velocity controller",
        choices=OUTPUT_MODES,
    ),
    ParamSpec("joint_states_topic", "joint_states", "sensor_msgs/JointState input (sensor-data QoS)"),
    ParamSpec("odometry_topic", "odometry", "nav_msgs/Odometry input (sensor-data QoS)"),
    ParamSpec("cmd_vel_topic", "cmd_vel", "geometry_msgs/Twist velocity command input"),
    ParamSpec("elevation_map_topic", "elevation_map", "grid_map_msgs/GridMap input (reliable, depth 1)"),
    ParamSpec("joint_commands_topic", "joint_commands", "sensor_msgs/JointState command output (joint_state mode)"),
    ParamSpec(
        "leg_controller_topic",
        "leg_position_controller/commands",
        "Float64MultiArray leg position commands (ros2_control mode)",
    ),
    ParamSpec(
        "wheel_controller_topic",
        "wheel_velocity_controller/commands",
        "Float64MultiArray wheel velocity commands (ros2_control mode)",
    ),
    ParamSpec(
        "leg_controller_joints",
        "",
        "Comma-separated joint order of the leg controller (ros2_control mode); empty: read from the controller. "
        "Either way the node checks it against the controller's joints parameter at start-up",
    ),
    ParamSpec(
        "wheel_controller_joints",
        "",
        "Comma-separated joint order of the wheel controller (ros2_control mode); empty: read from the controller. "
        "Either way the node checks it against the controller's joints parameter at start-up",
    ),
    ParamSpec(
        "controller_manager",
        "/controller_manager",
        "The ros2_control controller_manager whose controllers receive the commands (ros2_control mode)",
    ),
    ParamSpec(
        "controller_manager_timeout",
        10.0,
        "Seconds to wait at start-up for the controller_manager and both controllers (ros2_control mode)",
        0.1,
        300.0,
    ),
    ParamSpec("diagnostics_period", 1.0, "Seconds between /diagnostics messages", 0.05, 60.0),
    ParamSpec(
        "realtime_priority",
        0,
        "SCHED_FIFO priority of the control loop's thread; 0: normal scheduling (also, with a warning, if refused)",
        0,
        99,
    ),
    ParamSpec("realtime_cpus", "", "CPUs to pin the control loop to, e.g. '2' or '2-3'; empty: no pinning"),
    *_core_specs(),
)

MONITOR_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("robot_config", "", "Robot contract YAML (constraint limits); empty: the package's config/aow_c.yaml"),
    ParamSpec("joint_states_topic", "joint_states", "sensor_msgs/JointState input (sensor-data QoS)"),
    ParamSpec("log_dir", "~/.ros/aow_violations", "Directory for the JSON Lines logs (one file per run)"),
    ParamSpec("summary_period", 1.0, "Seconds between interval summaries in the log and on /diagnostics", 0.05, 3600.0),
    ParamSpec("policy_dt", 0.0, "Policy period (s) for the per-step indicator; 0: the robot contract's", 0.0, 1.0),
    ParamSpec("episode_s", 20.0, "Episode length (s) for violations per episode (the paper's: 20 s)", 0.1, 3600.0),
    ParamSpec("use_header_stamp", True, "Time samples by their header stamp (else by arrival on the node clock)"),
)


def spec_table(specs: Sequence[ParamSpec]) -> dict[str, ParamSpec]:
    return {s.name: s for s in specs}


def check_parameters(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> None:
    for spec in specs:
        spec.check(values[spec.name])


def split_joint_list(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


# ---- rclpy glue (imports ROS inside) ----------------------------------------------------------


def declare_parameters(node: Any, specs: Sequence[ParamSpec]) -> dict[str, Any]:
    """Declare each spec on an rclpy node with description and range; return the values, checked."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    values = {}
    for spec in specs:
        description = spec.description + (f" (one of {', '.join(spec.choices)})" if spec.choices else "")
        descriptor = ParameterDescriptor(description=description, read_only=True)
        if isinstance(spec.default, float) and spec.min is not None and spec.max is not None:
            descriptor.floating_point_range = [FloatingPointRange(from_value=spec.min, to_value=spec.max, step=0.0)]
        elif isinstance(spec.default, int) and not isinstance(spec.default, bool) and spec.min is not None:
            descriptor.integer_range = [IntegerRange(from_value=int(spec.min), to_value=int(spec.max), step=1)]
        values[spec.name] = node.declare_parameter(spec.name, spec.default, descriptor).value
    check_parameters(specs, values)
    return values


def init_keeping_context_on_sigint(args: list[str] | None = None) -> None:
    """rclpy.init without rclpy's signal handlers: a signal must not shut the context down before a
    node has published its last command (the controller's DAMPING); :func:`run_node` handles them."""
    import rclpy

    try:
        from rclpy.signals import SignalHandlerOptions
    except ImportError:  # older rclpy: default handling (the context may be gone at shutdown)
        rclpy.init(args=args)
        return
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)


# Errors a node's constructor raises for bad configuration (a missing or unloadable policy, a bad
# parameter, a bad robot contract): reported as one line, without a traceback, exit code 1.
STARTUP_ERRORS = (OSError, ValueError, RuntimeError, ImportError)


def run_node(
    name: str,
    create: Callable[[], Any],
    *,
    on_spin_start: Callable[[Any], None] | None = None,
    on_stop: Callable[[Any], None] | None = None,
    args: list[str] | None = None,
    join_timeout: float = 2.0,
) -> int:
    """Run a node until SIGINT or SIGTERM, then stop it in order; returns the process exit code.

    Why not ``rclpy.spin`` with KeyboardInterrupt: a signal raised as an exception lands wherever
    the main thread happens to be, inside rclpy's message conversion (``take_message``: "Unable to
    convert call argument") or inside the clean-up after a first signal (launch forwards a second
    SIGINT when the whole process group was signalled), and SIGTERM (systemd, docker) killed the
    process before it sent its last command.

    Here SIGINT and SIGTERM get a Python handler that does nothing, and Python's wakeup fd carries
    them to the main thread, which only waits on that pipe. The C-level handler writes the signal
    number to the pipe in whichever thread the kernel delivers the signal to (a DDS, OpenBLAS or
    executor thread as well as the main thread), so the main thread always wakes; no exception is
    raised anywhere. The executor spins in its own thread. The first signal stops it after the
    callback in progress; then ``on_stop(node)`` runs with the context still valid (the controller
    sends its DAMPING command, the monitor writes its summary), and the node is destroyed. Later
    signals are ignored. Exit code 0 after a signal or an external rclpy shutdown; 1 if the node
    could not be built (one log line naming the reason, no traceback) or a callback raised. Meant
    as a process's ``main`` (the handlers and the wakeup fd stay installed).

    ``on_spin_start(node)`` runs in the executor thread before it spins (real-time scheduling of
    the thread that runs the control timer).
    """
    import os
    import signal
    import threading

    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: None)  # no KeyboardInterrupt: the pipe says it
    init_keeping_context_on_sigint(args)
    logger = rclpy.logging.get_logger(name)
    stop = threading.Event()
    ended_by_itself = 0  # the byte the executor thread writes when it ends without a signal
    try:
        try:
            node = create()
        except STARTUP_ERRORS as e:
            logger.fatal(f"cannot start: {e}")
            return 1
        wake = node.create_guard_condition(lambda: None)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        failure: list[BaseException] = []

        def spin() -> None:
            try:
                if on_spin_start is not None:
                    on_spin_start(node)
                while not stop.is_set() and rclpy.ok():
                    executor.spin_once(timeout_sec=0.5)
            except ExternalShutdownException:
                pass
            except Exception as e:  # a failing callback: stop (the robot is damped by on_stop)
                failure.append(e)
                logger.fatal(f"stopping after an error in a callback: {type(e).__name__}: {e}")
            finally:
                if not stop.is_set():
                    os.write(write_end, bytes([ended_by_itself]))

        spinner = threading.Thread(target=spin, name=f"{name}_executor", daemon=True)
        spinner.start()
        received = os.read(read_end, 1)[0]  # a signal during start-up is already in the pipe
        stop.set()
        wake.trigger()
        spinner.join(join_timeout)
        if spinner.is_alive():
            logger.error(f"the executor did not stop within {join_timeout} s; stopping anyway")
        if received != ended_by_itself:
            logger.info(f"{signal.Signals(received).name} received: stopping")
        if on_stop is not None:
            on_stop(node)
        executor.remove_node(node)
        node.destroy_node()
        return 1 if failure else 0
    finally:
        rclpy.try_shutdown()


class PolledSubscription:
    """The latest message of a topic, taken when the owner asks, never through an executor.

    Why: rclpy's executor costs a few hundred microseconds of Python per message it wakes for;
    at the robot's 400 Hz joint states and odometry that was half a core of the controller node on
    the 2-core test machine (top: 47 % CPU), starving the control loop itself. The control step
    needs the latest value once per period, so it takes it then (a keep-last-1 queue holds it).
    The subscription belongs to ``node``, which must not be added to an executor.

    Arrival time: the message must have arrived after the previous take and before this one; within
    that interval its DDS source timestamp is used (exact where the publisher's clock is this
    machine's or synchronised to it), and clamped to the interval otherwise, so the age is never
    off by more than one period however the clocks disagree.
    """

    def __init__(self, node: Any, msg_type: type, topic: str, qos: Any, decode: Callable[[bytes], Any] | None = None):
        import time

        self._time_ns = time.time_ns
        self.msg_type = msg_type
        self.decode = decode
        # with a decoder the message is taken serialized and decoded here (aow_policy.cdr: microseconds
        # instead of rclpy's ~150 us of Python object construction per nested message)
        self.subscription = node.create_subscription(msg_type, topic, _not_called, qos, raw=decode is not None)
        self._last_take_ns = self._time_ns()

    @staticmethod
    def supported() -> bool:
        """Whether this rclpy exposes the take (Humble .. Jazzy do)."""
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        return hasattr(_rclpy.Subscription, "take_message")

    def take_latest(self) -> tuple[Any, float] | None:
        """(the newest message since the last call, its age in s), or None if none arrived."""
        taken = self._take()
        return taken[-1] if taken else None

    def take_all(self) -> list[tuple[Any, float]]:
        """Every message queued since the last call, oldest first, each with its age in s."""
        return self._take(decode_all=True)

    def _take(self, decode_all: bool = False) -> list[tuple[Any, float]]:
        """Empty the queue; (message, age) of every message, or of the newest only (the others are
        dropped undecoded) unless ``decode_all``."""
        sub = self.subscription
        raw = []
        with sub.handle:
            while (taken := sub.handle.take_message(sub.msg_type, sub.raw)) is not None:
                raw.append(taken)
        now_ns = self._time_ns()
        since_ns, self._last_take_ns = self._last_take_ns, now_ns
        out = []
        for data, info in raw if decode_all else raw[-1:]:
            arrival_ns = min(max(int(info.get("source_timestamp", 0)), since_ns), now_ns)
            out.append((self._message(data), (now_ns - arrival_ns) * 1e-9))
        return out

    def _message(self, taken: Any) -> Any:
        if self.decode is None:
            return taken
        try:
            return self.decode(taken)
        except CdrError:  # another encapsulation: rclpy deserializes it
            from rclpy.serialization import deserialize_message

            return deserialize_message(taken, self.msg_type)


def _not_called(msg: Any) -> None:  # pragma: no cover - the polled node is never spun
    raise AssertionError("a polled subscription's node must not be spun by an executor")


def wait_for_delivery(publisher: Any, timeout: float = 0.5) -> None:
    """Wait until reliable subscribers acknowledged what ``publisher`` sent (best effort): the last
    command must reach the driver before the node destroys its publisher."""
    from rclpy.duration import Duration

    wait = getattr(publisher, "wait_for_all_acked", None)
    if wait is not None:
        wait(Duration(nanoseconds=int(timeout * 1e9)))


def rclpy_message_factory(with_grid_map: bool = False) -> Any:
    """A :class:`aow_policy.messages.MessageFactory` over rclpy's generated message classes."""
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import Point, Pose, PoseWithCovariance, Quaternion, Twist, TwistWithCovariance, Vector3
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import JointState
    from std_msgs.msg import (
        Float32MultiArray,
        Float64MultiArray,
        Header,
        MultiArrayDimension,
        MultiArrayLayout,
    )

    from aow_policy.messages import MessageFactory

    classes = (
        Time, Point, Pose, PoseWithCovariance, Quaternion, Twist, TwistWithCovariance, Vector3, Odometry,
        JointState, Float32MultiArray, Float64MultiArray, Header, MultiArrayDimension, MultiArrayLayout,
    )  # fmt: skip
    types = {_type_name(c): c for c in classes}
    if with_grid_map:
        from grid_map_msgs.msg import GridMap, GridMapInfo

        types[GRID_MAP] = GridMap
        types[_type_name(GridMapInfo)] = GridMapInfo
    return MessageFactory(types, numpy_sequences=False)


def _type_name(cls: type) -> str:
    """'sensor_msgs.msg._joint_state' module + class -> 'sensor_msgs/msg/JointState'."""
    package = cls.__module__.split(".")[0]
    return f"{package}/msg/{cls.__name__}"


# ---- diagnostics -------------------------------------------------------------------------------


def controller_diagnostics(core: ControllerCore, loop: LoopStats, now: float) -> tuple[str, str, dict[str, str]]:
    """(level name for diagnostic_msgs/DiagnosticStatus, message, key/values) of the controller."""
    values = core.diagnostics(now)
    for key, value in loop.summary().items():
        values[f"loop.{key}"] = (
            f"{value:.4f}" if isinstance(value, float) and not value.is_integer() else str(int(value))
        )
    if core.fault:
        return "ERROR", f"{core.state.value}: {core.fault}", values
    if core.state in (ControllerState.POLICY, ControllerState.STAND_UP):
        level = "WARN" if loop.recent_overruns() else "OK"
        return level, core.state.value + (" (loop overruns)" if level == "WARN" else ""), values
    return "WARN", f"{core.state.value}: not driving the robot (call ~/start)", values


def monitor_diagnostics(summary: Mapping[str, Any], interval: Mapping[str, Any]) -> tuple[str, str, dict[str, str]]:
    """Level WARN while any violation happened in the last interval, OK otherwise."""
    recent = sum(interval["violating_samples"].values())
    values = {
        "samples": str(summary["samples"]),
        "events.velocity": str(summary["events"]["velocity"]),
        "events.effort": str(summary["events"]["effort"]),
        "policy_steps": str(summary["policy_steps"]),
        "violating_policy_steps": str(summary["violating_policy_steps"]["any"]),
        "violations_per_episode": f"{summary['violations_per_episode']['any']:.3f}",
        "recent_violating_samples": str(recent),
        "open_events": ", ".join(f"{q}:{j}" for q, joints in interval["open_events"].items() for j in joints),
    }
    if summary["samples"] == 0:
        return "STALE", "no joint states received", values
    if recent:
        return "WARN", f"{recent} violating samples in the last interval", values
    return "OK", "no violations in the last interval", values
