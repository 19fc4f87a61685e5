"""What a sim-to-sim run measures: command tracking per segment, falls, and joint-limit violations.

Tracking compares the scripted command with the simulator's true base velocity (base frame:
vx, vy and yaw rate) at every control period the controller spends in POLICY; the first
``settle`` seconds of each segment are reported separately, since a step in the command needs
time to be followed.

Joint-limit violations are counted by the runtime's own monitor core (:mod:`aow_policy.monitor`);
:class:`ViolationOnsets` sorts its events by when they start: within ``window`` seconds after a
step of the velocity command (the transient of a reaction to it), or elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim2sim.commands import CommandSchedule

AXES = ("vx", "vy", "yaw_rate")


@dataclass
class SegmentResult:
    name: str
    start: float  # s of script time (0 = controller entered POLICY)
    duration: float
    command: tuple[float, float, float]
    samples: int  # control periods in POLICY within the segment
    policy_fraction: float  # share of the segment's control periods spent in POLICY
    mean_abs_error: tuple[float, float, float] | None  # mean |v_cmd - v_base| (vx, vy, yaw rate)
    mean_abs_error_settled: tuple[float, float, float] | None  # the same after the settle time
    mean_velocity: tuple[float, float, float] | None


class SegmentTracker:
    """Accumulates |command - base velocity| per segment of a schedule."""

    def __init__(self, schedule: CommandSchedule, control_dt: float, settle: float = 1.0):
        self.schedule = schedule
        self.control_dt = control_dt
        self.settle = settle
        n = len(schedule.segments)
        self._sum = np.zeros((n, 3))
        self._sum_settled = np.zeros((n, 3))
        self._velocity = np.zeros((n, 3))
        self._count = np.zeros(n, dtype=np.int64)
        self._count_settled = np.zeros(n, dtype=np.int64)

    def add(self, script_time: float, velocity: np.ndarray) -> None:
        """One control period in POLICY at ``script_time`` with base velocity (vx, vy, yaw rate)."""
        i = self.schedule.index_at(script_time)
        if i is None:
            return
        seg = self.schedule.segments[i]
        error = np.abs(np.asarray(seg.command) - velocity)
        self._sum[i] += error
        self._velocity[i] += velocity
        self._count[i] += 1
        if script_time - seg.start >= self.settle:
            self._sum_settled[i] += error
            self._count_settled[i] += 1

    def results(self, script_end: float | None = None) -> list[SegmentResult]:
        """One result per segment. ``script_end``: the script time the run ended at, when an operator
        ended it early (the share in POLICY counts only the part of a segment that was run)."""
        out = []
        for i, seg in enumerate(self.schedule.segments):
            n, ns = int(self._count[i]), int(self._count_settled[i])
            ran = seg.duration if script_end is None else min(seg.duration, max(0.0, script_end - seg.start))
            expected = max(1, round(ran / self.control_dt))
            out.append(
                SegmentResult(
                    name=seg.name,
                    start=seg.start,
                    duration=seg.duration,
                    command=seg.command,
                    samples=n,
                    policy_fraction=min(1.0, n / expected),
                    mean_abs_error=_triple(self._sum[i] / n) if n else None,
                    mean_abs_error_settled=_triple(self._sum_settled[i] / ns) if ns else None,
                    mean_velocity=_triple(self._velocity[i] / n) if n else None,
                )
            )
        return out


def _triple(v: np.ndarray) -> tuple[float, float, float]:
    return (float(v[0]), float(v[1]), float(v[2]))


@dataclass(frozen=True)
class FallCriteria:
    min_height: float = 0.25  # m of base above the ground under it
    max_tilt: float = 1.0  # rad between the base's z axis and the vertical
    base_contact: bool = True  # the base touching the ground is a fall


@dataclass
class FallEvent:
    time: float
    reason: str


@dataclass
class FallDetector:
    """A fall starts when any criterion holds and ends when none does; each start is one event."""

    criteria: FallCriteria = field(default_factory=FallCriteria)
    events: list[FallEvent] = field(default_factory=list)
    fallen: bool = False

    def update(self, t: float, height: float, tilt: float, base_contact: bool) -> bool:
        c = self.criteria
        reasons = []
        if height < c.min_height:
            reasons.append(f"base {height:.2f} m above ground (< {c.min_height} m)")
        if tilt > c.max_tilt:
            reasons.append(f"tilted {math.degrees(tilt):.0f} deg (> {math.degrees(c.max_tilt):.0f})")
        if c.base_contact and base_contact:
            reasons.append("base touches the ground")
        if reasons and not self.fallen:
            self.events.append(FallEvent(t, "; ".join(reasons)))
        self.fallen = bool(reasons)
        return self.fallen


def as_plain(obj: Any) -> Any:
    """Dataclasses, tuples and numpy scalars -> JSON-ready Python values."""
    if hasattr(obj, "__dataclass_fields__"):
        return as_plain(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): as_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [as_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


COMMAND_STEP_WINDOW = 0.5  # s after a command change in which a violation counts as its transient


class ViolationOnsets:
    """Violation events per quantity, split by whether they start within ``window`` seconds after
    a change of the scripted command (``after_command_step``) or not (``elsewhere``); events before
    the controller entered POLICY are ``before_policy``."""

    def __init__(self, schedule: CommandSchedule, window: float = COMMAND_STEP_WINDOW):
        self.schedule, self.window = schedule, window
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, quantity: str, start: float, policy_start: float | None) -> None:
        if policy_start is None or start < policy_start:
            where = "before_policy"
        else:
            script_time = start - policy_start
            change = self.schedule.last_change_before(script_time)
            where = "after_command_step" if change is not None and script_time - change < self.window else "elsewhere"
        bucket = self.counts.setdefault(quantity, {"after_command_step": 0, "elsewhere": 0, "before_policy": 0})
        bucket[where] += 1
