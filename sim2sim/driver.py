"""The course driver: an operator that holds a straight line at a set forward speed.

What a person with a joystick does on issue 16's course: push forward at the commanded speed and
steer to stay on the line. Each /cmd_vel period (:class:`sim2sim.runner.Operator`) it reads the
pose of the latest nav_msgs/Odometry and commands ``(speed, 0, yaw_rate)``.

Steering law (pure pursuit on a straight line along +x at ``y = line_y``): aim at the point on
the line ``lookahead`` metres ahead of the robot's projection onto it,

    alpha    = atan2(line_y - y, lookahead) - heading          (wrapped to [-pi, pi])
    yaw_rate = clip(2 speed sin(alpha) / lookahead, -limit, limit)

the yaw rate that puts a robot moving at ``speed`` on the arc through that point (facing away from
it, |alpha| > 90°, the robot turns towards it at the limit instead). Linearised
(lateral offset e, heading psi): e'' = -(2 v^2 / L^2) e - (2 v / L) e', damping ratio 1/sqrt(2) at
any speed; with L = 1 m and v = 0.75 m/s an offset decays with a time constant of about 1.3 s
(about 1 m of travel). ``limit`` is the robot contract's yaw-rate range. The forward speed stays
the commanded one: the bar asks for a crossing at that speed, the steering only keeps the robot
on the course. There is no sideways command (vy = 0), as from a plain joystick.

The driver ends the run (``done``) when the base passes ``finish_x`` ("crossed"), or when its
furthest x has not grown by ``stall_distance`` in ``stall_time`` seconds of driving ("stalled":
stuck at an obstacle, or fallen). It keeps a trace of what it saw and commanded, which the
course evaluation reads for where the robot got to and where it fell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from aow_policy.robot import Robot
    from sim2sim.course import Course


@dataclass(frozen=True)
class DriverConfig:
    speed: float = 0.75  # m/s forward command (issue 16's bar: 0.5 - 1.0)
    lookahead: float = 1.0  # m ahead on the line (pure pursuit)
    stall_time: float = 10.0  # s without stall_distance of new progress ends the run
    stall_distance: float = 0.25  # m

    def validate(self) -> None:
        for name in ("speed", "lookahead", "stall_time", "stall_distance"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"driver {name} must be a positive number, got {value!r}")


def wrap_angle(a: float) -> float:
    """``a`` in [-pi, pi)."""
    return (a + math.pi) % (2.0 * math.pi) - math.pi


def pursuit_yaw_rate(lateral_offset: float, heading: float, speed: float, lookahead: float, limit: float) -> float:
    """The steering law (module docstring): yaw rate for a robot ``lateral_offset`` metres left of
    the line (y - line_y) with ``heading`` (rad, 0 along the line), clipped to +-``limit``."""
    alpha = wrap_angle(math.atan2(-lateral_offset, lookahead) - heading)
    if abs(alpha) > math.pi / 2:
        # Facing away from the point: sin(alpha) shrinks towards 0 as the robot turns further
        # away (pure pursuit's blind spot behind it); turn towards it as fast as allowed instead.
        return math.copysign(limit, alpha)
    return float(np.clip(2.0 * speed * math.sin(alpha) / lookahead, -limit, limit))


def odometry_pose(msg: Any) -> tuple[float, float, float]:
    """(x, y, yaw) of a nav_msgs/Odometry's pose."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    return float(p.x), float(p.y), yaw


@dataclass
class DriverTrace:
    """One row per cmd_vel period while driving: sim time (s), pose, commanded yaw rate."""

    time: list[float] = field(default_factory=list)
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    yaw: list[float] = field(default_factory=list)
    yaw_rate: list[float] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, dtype=np.float64) for k, v in vars(self).items()}

    def x_at(self, t: float) -> float | None:
        """The base x at the last row at or before sim time ``t`` (None before the first)."""
        i = int(np.searchsorted(np.asarray(self.time), t, side="right")) - 1
        return self.x[i] if i >= 0 else None


class LineDriver:
    """Drives along the line ``y = line_y`` in +x from ``start_x`` to ``finish_x`` (see the module
    docstring); an :class:`sim2sim.runner.Operator`."""

    def __init__(
        self, start_x: float, finish_x: float, line_y: float, yaw_limit: float, config: DriverConfig | None = None
    ):
        self.config = config if config is not None else DriverConfig()
        self.config.validate()
        if not finish_x > start_x:
            raise ValueError(f"the finish ({finish_x} m) must lie ahead (+x) of the start ({start_x} m)")
        if not yaw_limit > 0:
            raise ValueError(f"yaw_limit must be positive, got {yaw_limit}")
        self.start_x, self.finish_x, self.line_y, self.yaw_limit = start_x, finish_x, line_y, yaw_limit
        self.pose: tuple[float, float, float] | None = None  # latest odometry (x, y, yaw)
        self.pose_time = -math.inf
        self.best_x = -math.inf  # furthest x reached while driving
        self._best_gain_time = 0.0  # script time the furthest x last grew by stall_distance
        self._best_gain_x = -math.inf
        self.crossed_at: float | None = None  # script time the base passed finish_x
        self.end: str | None = None  # "crossed" or "stalled" once done
        self.trace = DriverTrace()

    @classmethod
    def for_course(cls, course: Course, robot: Robot, config: DriverConfig | None = None) -> LineDriver:
        """A driver from the course's start to its finish along its line, turning at most as fast
        as the robot contract's yaw-rate command range allows."""
        low, high = robot.commands.low[2], robot.commands.high[2]
        return cls(course.start[0], course.finish_x, course.line_y, float(min(-low, high)), config)

    @property
    def done(self) -> bool:
        return self.end is not None

    def on_odometry(self, msg: Any, t: float) -> None:
        self.pose = odometry_pose(msg)
        self.pose_time = t

    def command(self, script_time: float, scheduled: tuple[float, float, float]) -> tuple[float, float, float]:
        cfg = self.config
        if script_time < 0.0 or self.pose is None:  # standing up: the script's (zero) command
            return scheduled
        x, y, yaw = self.pose
        if x >= self.finish_x and self.crossed_at is None:
            self.crossed_at = script_time
            self.end = "crossed"
        if self._best_gain_x == -math.inf:  # the first period of driving: the stall clock starts
            self._best_gain_x, self._best_gain_time = x, script_time
        self.best_x = max(self.best_x, x)
        if self.best_x >= self._best_gain_x + cfg.stall_distance:
            self._best_gain_x, self._best_gain_time = self.best_x, script_time
        elif script_time - self._best_gain_time > cfg.stall_time and self.end is None:
            self.end = "stalled"
        if self.end is not None:  # the run ends at the next period; stop meanwhile
            rate = 0.0
            command = (0.0, 0.0, 0.0)
        else:
            rate = pursuit_yaw_rate(y - self.line_y, yaw, cfg.speed, cfg.lookahead, self.yaw_limit)
            command = (cfg.speed, 0.0, rate)
        tr = self.trace
        tr.time.append(self.pose_time)
        tr.x.append(x)
        tr.y.append(y)
        tr.yaw.append(yaw)
        tr.yaw_rate.append(rate)
        return command
