"""A real ROS 2 graph around the aow_policy nodes: the launch tests and ``bench.controller_step --ros``.

- :func:`ros_setup_script`, :func:`ros_environment`: the ROS 2 installation and the environment of a
  shell that sourced it (and an overlay), for one ``ROS_DOMAIN_ID``.
- :func:`build_overlay`: ``colcon build`` of ``ros2_ws/src/aow_policy`` in a new workspace, as a user
  does it, with an interpreter that has onnxruntime (``make ros-venv``: a venv over the system
  Python with ``--system-site-packages``, so the installed node scripts run with it).
- :class:`LaunchedProcess`: a ``ros2 launch`` (or any command) in its own process group, output to a
  file, stopped the ways operators stop it (SIGINT to the launch or its group, SIGTERM to the
  group, Ctrl-C at a terminal) and always cleaned up.
- :class:`RobotStandIn`: an rclpy node that plays the robot for the controller (joint states and
  odometry at 400 Hz, a flat elevation map, velocity commands; faults on demand) and records what
  comes back (joint commands, /diagnostics); it calls ``~/start`` and ``~/stop``.

rclpy is imported inside the functions that need it, so the module imports without ROS 2.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aow_policy.realtime import enable_realtime
from aow_policy.robot import Robot

REPO = Path(__file__).resolve().parents[1]
PACKAGE_SRC = REPO / "ros2_ws" / "src" / "aow_policy"
ROS_SETUP_CANDIDATES = ("/opt/ros2_humble/setup.bash", "/opt/ros/humble/setup.bash", "/opt/ros/jazzy/setup.bash")
ROS_VENV = REPO / ".venv-ros"


class RosGraphError(RuntimeError):
    """The ROS 2 graph could not be set up (no installation, a failed build, a launch that hung)."""


def ros_setup_script() -> Path | None:
    """The ROS 2 installation's setup.bash: ``$AOW_ROS_SETUP`` or the first standard location found."""
    explicit = os.environ.get("AOW_ROS_SETUP")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    return next((Path(p) for p in ROS_SETUP_CANDIDATES if Path(p).is_file()), None)


_ENV_CACHE: dict[tuple[str, ...], dict[str, str]] = {}


def sourced_environment(*scripts: Path) -> dict[str, str]:
    """The environment of a bash that sourced ``scripts`` in order (cached per list of scripts)."""
    key = tuple(str(s) for s in scripts)
    if key not in _ENV_CACHE:
        command = " && ".join(f"source {shlex.quote(s)}" for s in key) + " && env -0"
        out = subprocess.run(["bash", "-c", command], capture_output=True, check=False, timeout=60)
        if out.returncode != 0:
            raise RosGraphError(f"sourcing {' '.join(key)} failed: {out.stderr.decode(errors='replace').strip()}")
        pairs = (item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
        _ENV_CACHE[key] = dict(pairs)
    return dict(_ENV_CACHE[key])


def ros_environment(
    domain_id: int, overlay: Path | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for processes on one ROS 2 domain: ROS sourced (and ``overlay``'s setup.bash)."""
    setup = ros_setup_script()
    if setup is None:
        raise RosGraphError(f"no ROS 2 installation found (looked for {', '.join(ROS_SETUP_CANDIDATES)})")
    scripts = [setup] + ([overlay / "install" / "setup.bash"] if overlay else [])
    env = sourced_environment(*scripts)
    env.update(
        ROS_DOMAIN_ID=str(domain_id),
        ROS_LOCALHOST_ONLY="1",
        RMW_IMPLEMENTATION=env.get("RMW_IMPLEMENTATION", "rmw_cyclonedds_cpp"),
        PYTHONUNBUFFERED="1",
        RCUTILS_COLORIZED_OUTPUT="0",
    )
    env.update(extra or {})
    return env


def node_interpreter() -> Path:
    """The Python that runs the nodes of an overlay: ``$AOW_ROS_PYTHON`` or the repository's .venv-ros."""
    path = Path(os.environ.get("AOW_ROS_PYTHON", ROS_VENV / "bin" / "python"))
    if not path.exists():
        raise RosGraphError(
            f"{path} does not exist: `make ros-venv` creates it (a venv over the system Python with "
            f"onnxruntime, as the aow_policy README describes)"
        )
    return path


def build_overlay(workspace: Path, python: Path | None = None, timeout: float = 300.0) -> Path:
    """Copy the aow_policy package into ``workspace/src`` and ``colcon build`` it there with
    ``python -m colcon`` (so the installed node scripts run with ``python``). Returns ``workspace``."""
    import shutil

    python = python or node_interpreter()
    src = workspace / "src" / "aow_policy"
    shutil.copytree(
        PACKAGE_SRC,
        src,
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "build", "*.egg-info"),
        dirs_exist_ok=True,
    )
    env = ros_environment(0)
    result = subprocess.run(
        [str(python), "-m", "colcon", "build", "--event-handlers", "console_direct-"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RosGraphError(f"colcon build in {workspace} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return workspace


_next_domain = [0]


def free_domain_id() -> int:
    """A ROS_DOMAIN_ID for one graph: different for every call in a process, spread over processes."""
    _next_domain[0] += 1
    return 1 + (os.getpid() * 7 + _next_domain[0]) % 100


# ---- processes ----------------------------------------------------------------------------------


class LaunchedProcess:
    """A command in its own session and process group; stdout+stderr to ``log_path``.

    ``tty=True`` runs it on a pseudo-terminal that is its controlling terminal, so :meth:`ctrl_c`
    is what a person's Ctrl-C does (the terminal signals the foreground process group).
    :meth:`kill_all` (also on context exit) kills whatever is left of the group.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, tty: bool = False):
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in kill_all
        self._master: int | None = None
        if tty:
            import fcntl
            import pty
            import termios

            master, slave = pty.openpty()
            self._master = master

            def controlling_terminal() -> None:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

            self.process = subprocess.Popen(
                self.argv, env=dict(env), stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_terminal
            )
            os.close(slave)
            self._reader = threading.Thread(target=self._copy_terminal, daemon=True)
            self._reader.start()
        else:
            self.process = subprocess.Popen(
                self.argv,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pgid = self.process.pid

    def _copy_terminal(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:
                return
            if not data:
                return
            self._log.write(data)
            self._log.flush()

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace").replace("\r\n", "\n")

    def wait_for_output(self, text: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.output():
                return True
            if self.process.poll() is not None:
                return text in self.output()
            time.sleep(0.05)
        return False

    def signal(self, how: str) -> None:
        """'sigint' (the launch process), 'sigint-group', 'sigterm-group', or 'ctrl-c' (tty only)."""
        if how == "sigint":
            self.process.send_signal(signal.SIGINT)
        elif how == "sigint-group":
            os.killpg(self.pgid, signal.SIGINT)
        elif how == "sigterm-group":
            os.killpg(self.pgid, signal.SIGTERM)
        elif how == "sigterm":
            self.process.send_signal(signal.SIGTERM)
        elif how == "ctrl-c":
            if self._master is None:
                raise ValueError("ctrl-c needs a process started with tty=True")
            os.write(self._master, b"\x03")
        else:
            raise ValueError(f"unknown way to stop a process: {how!r}")

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it is still running after ``timeout`` s."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        # zombies of the group count as gone: only the launch itself is our child
        return any(_pgid_of(pid) == self.pgid and not _is_zombie(pid) for pid in _all_pids())

    def wait_group(self, timeout: float) -> bool:
        """True once every process of the group is gone (within ``timeout`` s)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.group_alive():
                return True
            time.sleep(0.05)
        return not self.group_alive()

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None
        self._log.close()

    def __enter__(self) -> LaunchedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()


def _all_pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def ros2_launch(
    overlay: Path,
    launch_file: str,
    arguments: Mapping[str, str],
    domain_id: int,
    log_path: Path,
    tty: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> LaunchedProcess:
    """``ros2 launch aow_policy <launch_file> name:=value ...`` from ``overlay``, as a user runs it."""
    env = ros_environment(domain_id, overlay, extra_env)
    argv = ["ros2", "launch", "aow_policy", launch_file, *(f"{k}:={v}" for k, v in arguments.items())]
    return LaunchedProcess(argv, env, log_path, tty=tty)


# ---- the robot stand-in -------------------------------------------------------------------------


@dataclass
class ReceivedCommand:
    t: float  # monotonic arrival time
    names: list[str]
    position: np.ndarray
    velocity: np.ndarray


@dataclass
class DiagnosticsRecord:
    t: float
    name: str
    level: int
    message: str
    values: dict[str, str]


@dataclass
class StandInInputs:
    """What the stand-in publishes; the test changes these between phases."""

    joint_states: bool = True
    odometry: bool = True
    elevation_map: bool = True
    position: np.ndarray = field(default_factory=lambda: np.zeros(0))
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    effort: np.ndarray = field(default_factory=lambda: np.zeros(0))
    base_velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    nan_in_joint_states: bool = False


class RobotStandIn:
    """Plays the robot on a real ROS 2 graph (own rclpy context on ``domain_id``, own executor thread).

    Publishes ``joint_states`` and ``odometry`` at ``rate_hz`` (sensor-data QoS, as drivers do) and a
    flat ``elevation_map`` around the base at ``map_hz``; records ``joint_commands`` and
    ``/diagnostics``. ``inputs`` changes what is published (pauses, NaN, joint velocities/efforts).
    With ``play_robot=False`` it is the operator only (the sim bridge plays the robot): it records
    ``odometry`` (:attr:`odometry`: header stamp, vx, vy, yaw rate in the base frame; :attr:`positions`:
    header stamp and the base position x, y, z) instead.
    """

    def __init__(
        self,
        robot: Robot,
        domain_id: int,
        namespace: str = "",
        rate_hz: float = 400.0,
        map_hz: float = 10.0,
        controller: str = "/controller_node",
        play_robot: bool = True,
        realtime_priority: int = 40,  # 0: normal scheduling
    ):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import Twist
        from grid_map_msgs.msg import GridMap
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import JointState

        from aow_policy.node_support import rclpy_message_factory

        self.robot = robot
        self.controller = controller
        self.realtime_priority = realtime_priority
        n = len(robot.joint_names)
        self.inputs = StandInInputs(
            position=np.array(robot.default_positions, dtype=float), velocity=np.zeros(n), effort=np.zeros(n)
        )
        self.commands: list[ReceivedCommand] = []
        self.diagnostics: list[DiagnosticsRecord] = []
        self.published = {"joint_states": 0, "odometry": 0, "elevation_map": 0}
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("robot_stand_in", namespace=namespace or None, context=self.context)
        self.factory = rclpy_message_factory(with_grid_map=True)
        reliable1 = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.odometry: list[tuple[float, float, float, float]] = []
        self.positions: list[tuple[float, float, float, float]] = []  # stamp, base x, y, z (odometry pose)
        if play_robot:
            self.js_pub = self.node.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
            self.odom_pub = self.node.create_publisher(Odometry, "odometry", qos_profile_sensor_data)
            self.map_pub = self.node.create_publisher(GridMap, "elevation_map", reliable1)
            self.node.create_timer(1.0 / rate_hz, self._publish_state)
            self.node.create_timer(1.0 / map_hz, self._publish_map)
        else:
            self.node.create_subscription(Odometry, "odometry", self._on_odometry, qos_profile_sensor_data)
        self.cmd_pub = self.node.create_publisher(Twist, "cmd_vel", QoSProfile(depth=10))
        self.node.create_subscription(JointState, "joint_commands", self._on_command, QoSProfile(depth=100))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, QoSProfile(depth=100))
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._running = True
        self._thread = threading.Thread(target=self._spin, name="robot_stand_in", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # a robot's driver publishes on time whatever else the machine does: SCHED_FIFO where allowed
        # (root, CAP_SYS_NICE), so a loaded test machine does not stall the 400 Hz stream
        if self.realtime_priority > 0:
            enable_realtime(self.realtime_priority)
        while self._running and self.context.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def _publish_state(self) -> None:
        from aow_policy.messages import joint_state_msg, odometry_msg

        now, inputs = self.now(), self.inputs
        if inputs.joint_states:
            position = inputs.position.copy()
            if inputs.nan_in_joint_states:
                position[0] = math.nan
            msg = joint_state_msg(self.factory, self.robot.joint_names, position, inputs.velocity, inputs.effort, now)
            self.js_pub.publish(msg)
            self.published["joint_states"] += 1
        if inputs.odometry:
            msg = odometry_msg(self.factory, (0.0, 0.0, 0.55), (0, 0, 0, 1), inputs.base_velocity, (0, 0, 0), now)
            self.odom_pub.publish(msg)
            self.published["odometry"] += 1

    def _publish_map(self) -> None:
        from aow_policy.messages import grid_map_msg

        if not self.inputs.elevation_map:
            return
        cells = 40  # 4 m x 4 m at 0.1 m around the base: covers the 1.6 m x 1.0 m scan
        self.map_pub.publish(
            grid_map_msg(self.factory, {"elevation": np.zeros((cells, cells))}, 0.1, (0.0, 0.0), self.now(), "odom")
        )
        self.published["elevation_map"] += 1

    def _on_command(self, msg: Any) -> None:
        self.commands.append(
            ReceivedCommand(time.monotonic(), list(msg.name), np.array(msg.position), np.array(msg.velocity))
        )

    def _on_odometry(self, msg: Any) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        twist, position = msg.twist.twist, msg.pose.pose.position
        self.odometry.append((stamp, twist.linear.x, twist.linear.y, twist.angular.z))
        self.positions.append((stamp, position.x, position.y, position.z))

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            level = status.level if isinstance(status.level, int) else int.from_bytes(status.level, "little")
            self.diagnostics.append(DiagnosticsRecord(time.monotonic(), status.name, level, status.message, values))

    # ---- the operator's side ----
    def send_velocity_command(self, vx: float, vy: float = 0.0, yaw_rate: float = 0.0) -> None:
        from aow_policy.messages import twist_msg

        self.cmd_pub.publish(twist_msg(self.factory, vx, vy, yaw_rate))

    def call(self, service: str, timeout: float = 10.0) -> tuple[bool, str]:
        """Call ``<controller>/<service>`` (std_srvs/Trigger); (success, message)."""
        from std_srvs.srv import Trigger

        client = self.node.create_client(Trigger, f"{self.controller}/{service}")
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise RosGraphError(f"service {self.controller}/{service} did not appear within {timeout} s")
            done = threading.Event()
            future = client.call_async(Trigger.Request())
            future.add_done_callback(lambda _: done.set())
            if not done.wait(timeout):
                raise RosGraphError(f"service {self.controller}/{service} did not answer within {timeout} s")
            result = future.result()
            return bool(result.success), str(result.message)
        finally:
            self.node.destroy_client(client)

    def start(self, timeout: float = 15.0) -> tuple[bool, str]:
        """``~/start`` as an operator presses it: again while the controller has not yet received the
        robot's inputs (DDS discovery between a freshly started robot and the node takes a moment,
        longer on a loaded machine); any other refusal is returned at once."""
        end = time.monotonic() + timeout
        while True:
            ok, message = self.call("start")
            if ok or "none received" not in message or time.monotonic() >= end:
                return ok, message
            time.sleep(0.2)

    def controller_states(self, since: float = 0.0) -> list[DiagnosticsRecord]:
        return [d for d in list(self.diagnostics) if d.t >= since and d.name.endswith(": controller")]

    def wait_for_state(self, state: str, timeout: float, since: float = 0.0) -> DiagnosticsRecord | None:
        """The first /diagnostics status of the controller after ``since`` whose state is ``state``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for d in self.controller_states(since):
                if d.values.get("state") == state:
                    return d
            time.sleep(0.02)
        return None

    def commands_since(self, t: float) -> list[ReceivedCommand]:
        return [c for c in list(self.commands) if c.t >= t]

    def close(self) -> None:
        self._running = False
        self._thread.join(2.0)
        self.executor.shutdown()
        self.node.destroy_node()
        with contextlib.suppress(Exception):
            self.context.try_shutdown()

    def __enter__(self) -> RobotStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
