"""Violation monitor core: joint speed and torque overruns from a stream of joint samples.

Definitions are those of the training costs (:mod:`aow_policy.violations`): a joint violates a
limit when ``|value| > limit`` (strictly), with the robot contract's constraint limits (leg joints
only by default; unconstrained joints have an infinite limit).

* Events, per joint and quantity ("velocity", "effort"): ``start`` is the time of the first sample
  over the limit, ``end`` the time of the first sample back within it, so ``duration = end -
  start`` equals samples x sample period on a regular stream; ``peak`` is the largest ``|value|``.
  An event still open when the stream ends is closed at the last sample with ``ongoing = True``.
* Counters per joint: events, samples over the limit, time over the limit.
* Per policy step (windows of ``policy_dt`` from the first sample), the paper's indicator costs
  c_qv and c_tau: a step violates when any joint is over its limit. Two readings are kept:
  ``any`` (any sample in the window, the conservative one) and ``sampled`` (the last sample of
  the window, the state the policy sees next, as training evaluates its cost). Scaled to
  ``episode_s`` (20 s, 1000 steps) they are comparable to the paper's "violations per episode".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from aow_policy.messages import JointStateReader, MessageError
from aow_policy.robot import Robot
from aow_policy.violations import over_limit

QUANTITIES = ("velocity", "effort")
CONSTRAINTS = {"velocity": "joint_speed", "effort": "joint_torque"}
_WINDOW_EPS = 1e-6  # of a policy period: sample times that are multiples of it land in the right window


@dataclass(frozen=True)
class ViolationEvent:
    quantity: str
    joint: str
    start: float
    end: float
    duration: float
    samples: int
    peak: float
    limit: float
    ongoing: bool = False

    @property
    def overrun(self) -> float:
        return self.peak - self.limit

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overrun"] = self.overrun
        return d


class _Tracker:
    """Open events and counters of one quantity over all joints."""

    def __init__(self, quantity: str, names: tuple[str, ...], limits: np.ndarray):
        n = len(names)
        self.quantity, self.names, self.limits = quantity, names, np.asarray(limits, dtype=np.float64)
        self.active = np.zeros(n, dtype=bool)
        self.start = np.zeros(n)
        self.peak = np.zeros(n)
        self.samples = np.zeros(n, dtype=np.int64)
        self.events = np.zeros(n, dtype=np.int64)
        self.samples_over = np.zeros(n, dtype=np.int64)
        self.time_over = np.zeros(n)
        self.max_abs = np.zeros(n)
        self.samples_any = 0  # samples with any joint over (c at the sample rate)

    def update(self, t: float, values: np.ndarray) -> tuple[bool, list[ViolationEvent]]:
        mag = np.abs(values)
        over = over_limit(values, self.limits)
        np.fmax(self.max_abs, mag, out=self.max_abs)
        closed = []
        for j in np.flatnonzero(self.active & ~over):
            closed.append(self._close(j, t, ongoing=False))
        started = over & ~self.active
        self.start[started] = t
        self.peak[started] = 0.0
        self.samples[started] = 0
        self.active |= over
        np.fmax(self.peak, np.where(over, mag, 0.0), out=self.peak)
        self.samples += over
        self.samples_over += over
        any_over = bool(over.any())
        self.samples_any += any_over
        return any_over, closed

    def _close(self, j: int, end: float, ongoing: bool) -> ViolationEvent:
        duration = end - self.start[j]
        event = ViolationEvent(
            quantity=self.quantity,
            joint=self.names[j],
            start=float(self.start[j]),
            end=float(end),
            duration=float(duration),
            samples=int(self.samples[j]),
            peak=float(self.peak[j]),
            limit=float(self.limits[j]),
            ongoing=ongoing,
        )
        self.active[j] = False
        self.events[j] += 1
        self.time_over[j] += duration
        return event

    def finish(self, t: float) -> list[ViolationEvent]:
        return [self._close(j, t, ongoing=True) for j in np.flatnonzero(self.active)]


class ViolationMonitor:
    """Feed samples with :meth:`update` (arrays in contract order) or :meth:`update_joint_state`."""

    def __init__(self, robot: Robot, policy_dt: float | None = None, episode_s: float = 20.0):
        self.robot = robot
        self.joint_names = robot.joint_names
        self.policy_dt = policy_dt if policy_dt is not None else robot.rates.policy_dt
        self.episode_s = episode_s
        self.trackers = {
            "velocity": _Tracker("velocity", self.joint_names, robot.constraint_velocity_limits),
            "effort": _Tracker("effort", self.joint_names, robot.constraint_torque_limits),
        }
        self._reader = JointStateReader(self.joint_names)
        self.samples = 0
        self.samples_without_effort = 0
        self.nonfinite_samples = 0
        self.refused_messages = 0
        self.first_time = math.nan
        self.last_time = math.nan
        self.out_of_order = 0
        # policy-step windows
        self._window = -1
        self._window_any = dict.fromkeys(QUANTITIES, False)
        self._window_last = dict.fromkeys(QUANTITIES, False)
        self.policy_steps = 0
        self.violating_steps_any = dict.fromkeys((*QUANTITIES, "any"), 0)
        self.violating_steps_sampled = dict.fromkeys((*QUANTITIES, "any"), 0)
        self._interval_start = self._interval_snapshot()

    # ---- feeding -------------------------------------------------------------------------
    def update(self, t: float, velocity: np.ndarray, effort: np.ndarray | None = None) -> list[ViolationEvent]:
        """One sample at time ``t`` (s); returns the events that ended with it."""
        if self.samples and t < self.last_time:
            self.out_of_order += 1  # a reordered sample would corrupt durations; skip it
            return []
        if self.samples == 0:
            self.first_time = t
        self._advance_window(t)
        velocity = np.asarray(velocity, dtype=np.float64)
        if not np.isfinite(velocity).all() or (effort is not None and not np.isfinite(effort).all()):
            self.nonfinite_samples += 1
        closed: list[ViolationEvent] = []
        v_any, events = self.trackers["velocity"].update(t, velocity)
        closed += events
        e_any = False
        if effort is None:
            self.samples_without_effort += 1
        else:
            e_any, events = self.trackers["effort"].update(t, np.asarray(effort, dtype=np.float64))
            closed += events
        self._window_any["velocity"] |= v_any
        self._window_any["effort"] |= e_any
        self._window_last["velocity"], self._window_last["effort"] = v_any, e_any
        self.samples += 1
        self.last_time = t
        return closed

    def update_joint_state(self, msg: Any, t: float | None = None) -> list[ViolationEvent]:
        """A sensor_msgs/JointState (by name); ``t`` defaults to its header stamp."""
        try:
            self._reader.read(msg)
        except MessageError:
            self.refused_messages += 1
            raise
        r = self._reader
        if not r.has_velocity:
            self.refused_messages += 1
            raise MessageError("JointState has no velocities: joint speed cannot be monitored")
        return self.update(r.stamp if t is None else t, r.velocity, r.effort if r.has_effort else None)

    def _advance_window(self, t: float) -> None:
        window = math.floor((t - self.first_time) / self.policy_dt + _WINDOW_EPS)
        if window != self._window:
            if self._window >= 0:
                self._close_window()
            self._window = window

    def _close_window(self) -> None:
        self.policy_steps += 1
        for readings, counts in (
            (self._window_any, self.violating_steps_any),
            (self._window_last, self.violating_steps_sampled),
        ):
            for q in QUANTITIES:
                counts[q] += readings[q]
            counts["any"] += readings["velocity"] or readings["effort"]
        self._window_any = dict.fromkeys(QUANTITIES, False)

    def finish(self) -> list[ViolationEvent]:
        """End of stream: close the last policy window and any open events (``ongoing=True``)."""
        closed = []
        if self.samples:
            for tracker in self.trackers.values():
                closed += tracker.finish(self.last_time)
            if self._window >= 0:
                self._close_window()
                self._window = -1
        return closed

    # ---- reporting -----------------------------------------------------------------------
    def per_episode(self, counts: dict[str, int]) -> dict[str, float]:
        """Violating policy steps scaled to an episode of ``episode_s`` seconds."""
        if self.policy_steps == 0:
            return dict.fromkeys(counts, 0.0)
        steps_per_episode = self.episode_s / self.policy_dt
        return {k: v / self.policy_steps * steps_per_episode for k, v in counts.items()}

    def joint_counters(self) -> dict[str, dict[str, dict[str, float]]]:
        """{quantity: {joint: {events, samples_over, time_over_s, max_abs, limit}}} for constrained joints."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for q, tr in self.trackers.items():
            out[q] = {
                name: {
                    "events": int(tr.events[j]),
                    "samples_over": int(tr.samples_over[j]),
                    "time_over_s": float(tr.time_over[j]),
                    "max_abs": float(tr.max_abs[j]),
                    "limit": float(tr.limits[j]),
                }
                for j, name in enumerate(tr.names)
                if math.isfinite(tr.limits[j])
            }
        return out

    def summary(self) -> dict[str, Any]:
        """Totals so far (JSON-ready)."""
        duration = (self.last_time - self.first_time) if self.samples else 0.0
        return {
            "samples": self.samples,
            "duration_s": duration,
            # the span the totals cover (sample times, s): to compare with a recording of part of it
            "first_sample_time": self.first_time if self.samples else None,
            "last_sample_time": self.last_time if self.samples else None,
            "samples_without_effort": self.samples_without_effort,
            "nonfinite_samples": self.nonfinite_samples,
            "out_of_order_samples": self.out_of_order,
            "refused_messages": self.refused_messages,
            "events": {q: int(tr.events.sum()) for q, tr in self.trackers.items()},
            "violating_samples": {q: tr.samples_any for q, tr in self.trackers.items()},
            "policy_dt": self.policy_dt,
            "policy_steps": self.policy_steps,
            "violating_policy_steps": dict(self.violating_steps_any),
            "violating_policy_steps_sampled": dict(self.violating_steps_sampled),
            "violations_per_episode": self.per_episode(self.violating_steps_any),
            "violations_per_episode_sampled": self.per_episode(self.violating_steps_sampled),
            "episode_s": self.episode_s,
            "constraint_limits": {CONSTRAINTS[q]: self.robot.constraints[CONSTRAINTS[q]].limit for q in QUANTITIES},
            "joints": self.joint_counters(),
        }

    def _interval_snapshot(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "events": {q: int(tr.events.sum()) for q, tr in self.trackers.items()},
            "violating_samples": {q: tr.samples_any for q, tr in self.trackers.items()},
            "policy_steps": self.policy_steps,
            "violating_policy_steps": self.violating_steps_any["any"],
        }

    def interval_summary(self, t: float) -> dict[str, Any]:
        """What happened since the previous call (for a per-second summary), plus the open events."""
        now, before = self._interval_snapshot(), self._interval_start
        self._interval_start = now
        return {
            "t": t,
            "samples": now["samples"] - before["samples"],
            "events_ended": {q: now["events"][q] - before["events"][q] for q in QUANTITIES},
            "violating_samples": {q: now["violating_samples"][q] - before["violating_samples"][q] for q in QUANTITIES},
            "policy_steps": now["policy_steps"] - before["policy_steps"],
            "violating_policy_steps": now["violating_policy_steps"] - before["violating_policy_steps"],
            "open_events": {q: [tr.names[j] for j in np.flatnonzero(tr.active)] for q, tr in self.trackers.items()},
        }
