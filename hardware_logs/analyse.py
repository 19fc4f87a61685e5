"""One bag, end to end: raw batches -> decoded JointStates -> joints by name -> statistics.

Also builds the controller-state timeline from the controller's diagnostics. The controller
(``aow_policy``'s controller node) publishes ``diagnostic_msgs/msg/DiagnosticArray`` on
``/diagnostics``; a status in it carries a ``KeyValue`` with key ``state`` and a value such as
``STAND_UP``, ``POLICY`` or ``DAMPING``. Each state holds from that message's stamp until the next
one; samples before the first are in phase ``unknown``. Phase names are the lower-cased values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aow_policy.robot import Robot
from hardware_logs.fastcdr import JOINT_STATE_TYPE, BulkDecoder, DecodedJointStates
from hardware_logs.plots import Envelope
from hardware_logs.prefetch import prefetched
from hardware_logs.reader import BagError, BagInfo, BagSource
from hardware_logs.stats import QuantityAccumulator, QuantityResult, Settings

STATE_KEY = "state"
UNLABELLED = "all"  # the one phase of a bag without controller diagnostics
BEFORE_FIRST_STATE = "unknown"
MAX_REPEATED_WARNINGS = 5


@dataclass
class BagResult:
    path: str
    ok: bool  # False: nothing could be analysed (the error is in warnings)
    partial: bool
    warnings: list[str]
    storage: str = ""
    ros_distro: str | None = None
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    messages: int = 0  # JointState messages analysed
    messages_in_bag: int = 0
    fast_messages: int = 0
    full_messages: int = 0
    time_source: str = "header"
    start_stamp_ns: int | None = None
    duration_s: float = 0.0
    phase_durations: dict[str, float] = field(default_factory=dict)
    has_diagnostics: bool = False
    velocity: QuantityResult | None = None
    torque: QuantityResult | None = None
    velocity_envelope: Envelope | None = None
    torque_envelope: Envelope | None = None


def hist_max(robot: Robot, quantity: str) -> np.ndarray:
    """Upper edge of the |value| histogram per joint: 1.5x the larger of actuator and constraint."""
    actuator = robot.velocity_limits if quantity == "velocity" else robot.torque_limits
    constraint = robot.constraint_velocity_limits if quantity == "velocity" else robot.constraint_torque_limits
    return 1.5 * np.fmax(actuator, np.where(np.isfinite(constraint), constraint, 0.0))


def diagnostics_state(msg: Any) -> str | None:
    """The controller state a DiagnosticArray reports (the value of its first ``state`` key), or None."""
    for status in msg.status:
        for kv in status.values:
            if kv.key == STATE_KEY:
                return kv.value
    return None


def state_timeline(source: BagSource) -> tuple[np.ndarray, list[str]]:
    """(stamps ns, state) sorted by stamp, consecutive repeats dropped."""
    entries: list[tuple[int, str]] = []
    for bag_time, msg in source.diagnostics():
        state = diagnostics_state(msg)
        if state is None:
            continue
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        entries.append((stamp if stamp > 0 else bag_time, state.strip().lower() or BEFORE_FIRST_STATE))
    entries.sort(key=lambda e: e[0])
    times, states = [], []
    for t, s in entries:
        if not states or states[-1] != s:
            times.append(t)
            states.append(s)
    return np.array(times, dtype=np.int64), states


class _RowAssembler:
    """Decoded groups -> per-row arrays in contract order, matched by joint name."""

    def __init__(self, robot: Robot, warn: Any) -> None:
        self.robot = robot
        self.warn = warn
        self._maps: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, int]] = {}
        self._unknown: set[str] = set()
        self.last_names: tuple[str, ...] | None = None
        self.name_changes = 0
        self.mismatched = {"velocity": 0, "effort": 0}

    def _map(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, int]:
        if names not in self._maps:
            lookup = {n: i for i, n in enumerate(self.robot.joint_names)}
            msg_idx, contract_idx, seen = [], [], set()
            for i, n in enumerate(names):
                if n in lookup and n not in seen:
                    msg_idx.append(i)
                    contract_idx.append(lookup[n])
                    seen.add(n)
                elif n not in lookup and n not in self._unknown:
                    self._unknown.add(n)
                    self.warn(f"joint {n!r} is not in the robot contract; its values are ignored", False)
                elif n in seen:
                    self.warn(f"joint {n!r} appears twice in one message; the first value is used")
            self._maps[names] = (np.array(msg_idx, np.int64), np.array(contract_idx, np.int64), len(names))
        return self._maps[names]

    def assemble(
        self, decoded: DecodedJointStates, n: int, bag_time: np.ndarray, first_row: int
    ) -> tuple[np.ndarray, ...]:
        joints = len(self.robot.joint_names)
        stamp = np.zeros(n, np.int64)
        ok = np.zeros(n, bool)
        values: dict[str, np.ndarray] = {}
        present: dict[str, np.ndarray] = {}
        names_id = np.full(n, -1, np.int64)
        group_names: list[tuple[str, ...]] = []
        whole = len(decoded.groups) == 1 and len(decoded.groups[0].rows) == n and not decoded.undecodable
        for g in decoded.groups:
            msg_idx, contract_idx, count = self._map(g.names)
            stamp[g.rows] = g.stamp_ns
            ok[g.rows] = True
            names_id[g.rows] = len(group_names)
            group_names.append(g.names)
            for q, arr in (("velocity", g.velocity), ("effort", g.effort)):
                if arr.shape[1] == 0 or len(msg_idx) == 0:
                    continue
                if arr.shape[1] != count:
                    self.mismatched[q] += len(g.rows)
                    continue
                if whole:
                    # One layout for the whole batch, rows in order (the usual case): the decoded
                    # array itself when the bag lists the contract's joints in contract order, else
                    # one column gather; presence is one mask for all rows.
                    mask = np.zeros(joints, bool)
                    mask[contract_idx] = True
                    if len(contract_idx) == joints and (contract_idx == np.arange(joints)).all() and count == joints:
                        values[q] = arr
                    elif len(contract_idx) == joints:
                        order = np.empty(joints, np.int64)
                        order[contract_idx] = msg_idx
                        values[q] = arr[:, order]
                    else:
                        values[q] = np.full((n, joints), np.nan)
                        values[q][:, contract_idx] = arr[:, msg_idx]
                    present[q] = mask
                    continue
                if q not in values:
                    values[q] = np.full((n, joints), np.nan)
                    present[q] = np.zeros((n, joints), bool)
                rows = g.rows[:, None]
                values[q][rows, contract_idx] = arr[:, msg_idx]
                present[q][rows, contract_idx] = True
        for q in ("velocity", "effort"):
            if q not in values:
                values[q] = np.full((n, joints), np.nan)
                present[q] = np.zeros(joints, bool)
        for row, reason in decoded.undecodable:
            self.warn(f"message #{first_row + row} (bag time {int(bag_time[row])}) could not be decoded: {reason}")
        self._track_names(names_id, ok, group_names, bag_time, first_row)
        return stamp, ok, values["velocity"], present["velocity"], values["effort"], present["effort"]

    def _track_names(
        self,
        names_id: np.ndarray,
        ok: np.ndarray,
        group_names: list[tuple[str, ...]],
        bag_time: np.ndarray,
        first_row: int,
    ) -> None:
        rows = np.flatnonzero(ok)
        if not len(rows):
            return
        ids = names_id[rows]
        canonical = [group_names.index(n) for n in group_names]  # equal name tuples share an id
        ids = np.array(canonical, np.int64)[ids]
        change = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        candidates = [0, *change.tolist()]
        for c in candidates:
            names = group_names[ids[c]]
            if self.last_names is not None and names != self.last_names:
                self.name_changes += 1
                if self.name_changes <= MAX_REPEATED_WARNINGS:
                    before, after = self.last_names, names
                    detail = (
                        f"order changed to {list(after)}"
                        if set(before) == set(after)
                        else f"removed {sorted(set(before) - set(after))}, added {sorted(set(after) - set(before))}"
                    )
                    self.warn(
                        f"joint names changed at message #{first_row + int(rows[c])} "
                        f"(bag time {int(bag_time[rows[c]])}): {detail}; joints are matched by name"
                    )
            self.last_names = names


class BagAnalysis:
    """Streams rows of one bag into both quantities' accumulators and the plot envelopes."""

    def __init__(
        self,
        robot: Robot,
        settings: Settings,
        timeline: tuple[np.ndarray, list[str]],
        expected_duration_s: float = 0.0,
    ) -> None:
        self.robot = robot
        self.settings = settings
        self.timeline_t, states = timeline
        self.has_timeline = bool(states)
        self.phase_names = [BEFORE_FIRST_STATE, *dict.fromkeys(states)] if states else [UNLABELLED]
        self._timeline_ids = np.array([self.phase_names.index(s) for s in states], np.int64)
        names = robot.joint_names
        self.velocity = QuantityAccumulator(
            "velocity",
            names,
            robot.constraint_velocity_limits,
            hist_max(robot, "velocity"),
            settings,
            self.phase_names,
        )
        self.torque = QuantityAccumulator(
            "torque", names, robot.constraint_torque_limits, hist_max(robot, "torque"), settings, self.phase_names
        )
        width = Envelope.initial_width(settings.policy_dt, expected_duration_s)
        self.velocity_envelope = Envelope(len(names), width)
        self.torque_envelope = Envelope(len(names), width)
        self.phase_time = np.zeros(len(self.phase_names))
        self.elapsed_ns = 0
        self.rows = 0
        self.backwards = 0
        self.gaps = 0
        self.first_issue: dict[str, str] = {}
        self._carry: tuple[np.ndarray, ...] | None = None
        self._last_t: int | None = None
        self._last_dt = -1  # ns; -1: not known yet
        self._max_gap_ns = int(settings.max_gap_s * 1e9)

    def push(self, t: np.ndarray, vel: np.ndarray, vel_ok: np.ndarray, eff: np.ndarray, eff_ok: np.ndarray) -> None:
        """Rows in message order; t in ns. The last row is held back until its successor is known."""
        if not len(t):
            return
        brk = np.zeros(len(t), bool)
        prev = np.r_[self._last_t if self._last_t is not None else t[0], t[:-1]]
        step = t - prev
        back = step < 0
        gap = step > self._max_gap_ns
        brk = back | gap
        if self._last_t is None:
            brk[0] = False
        self._note(back, gap, t, prev)
        self._last_t = int(t[-1])
        rows = (t, vel, vel_ok, eff, eff_ok, brk)
        if self._carry is not None:
            # The held-back row's successor is this batch's first row.
            gap = np.array([-1 if brk[0] else t[0] - self._carry[0][0]], np.int64)
            self._process(self._carry, gap)
        self._carry = tuple(r if r.ndim == 1 and r.dtype == bool and r is not brk else r[-1:] for r in rows)
        if len(t) > 1:
            dt = np.diff(t)
            dt[brk[1:]] = -1
            self._process(tuple(r if r.ndim == 1 and r.dtype == bool and r is not brk else r[:-1] for r in rows), dt)

    def _note(self, back: np.ndarray, gap: np.ndarray, t: np.ndarray, prev: np.ndarray) -> None:
        for kind, mask in (("backwards", back), ("gap", gap)):
            count = int(mask.sum())
            if not count:
                continue
            if kind == "backwards":
                self.backwards += count
            else:
                self.gaps += count
            if kind not in self.first_issue:
                i = int(np.flatnonzero(mask)[0])
                self.first_issue[kind] = (
                    f"first at message #{self.rows_seen(i)}: {prev[i] * 1e-9:.6f} s -> {t[i] * 1e-9:.6f} s"
                )

    def rows_seen(self, i: int) -> int:
        return self.rows + (1 if self._carry is not None else 0) + i

    def _fill_dt(self, dt: np.ndarray) -> np.ndarray:
        """Unknown intervals (-1, at breaks) take the previous known one; 0 before any is known."""
        known = dt >= 0
        if known.all():
            self._last_dt = int(dt[-1])
            return dt
        idx = np.where(known, np.arange(len(dt)), -1)
        np.maximum.accumulate(idx, out=idx)
        filled = np.where(idx >= 0, dt[np.maximum(idx, 0)], max(self._last_dt, 0))
        if known.any():
            self._last_dt = int(dt[known][-1])
        return filled

    def _process(self, rows: tuple[np.ndarray, ...], dt_ns: np.ndarray) -> None:
        t, vel, vel_ok, eff, eff_ok, brk = rows
        dt_ns = self._fill_dt(dt_ns)
        # Integer nanoseconds keep the policy bins exact; seconds are derived from them.
        elapsed_ns = self.elapsed_ns + np.cumsum(dt_ns) - dt_ns
        self.elapsed_ns = int(elapsed_ns[-1] + dt_ns[-1])
        elapsed = elapsed_ns * 1e-9
        if self.has_timeline:
            k = np.searchsorted(self.timeline_t, t, side="right") - 1
            phase = np.where(k >= 0, self._timeline_ids[np.maximum(k, 0)], 0)
        else:
            phase = np.zeros(len(t), np.int64)
        # float64 sums of integer nanoseconds are exact (below 2**53 ns), so batching cannot change them.
        self.phase_time += np.bincount(phase, weights=dt_ns.astype(np.float64), minlength=len(self.phase_names))
        for acc, env, values, ok in (
            (self.velocity, self.velocity_envelope, vel, vel_ok),
            (self.torque, self.torque_envelope, eff, eff_ok),
        ):
            acc.update(values, ok, dt_ns, elapsed_ns, t, brk, phase)
            env.update(elapsed, values)
        self.rows += len(t)

    @property
    def elapsed(self) -> float:
        return self.elapsed_ns * 1e-9

    def finish(self) -> None:
        if self._carry is not None:
            last = np.array([max(self._last_dt, 0)], np.int64)
            carry, self._carry = self._carry, None
            self._process(carry, last)


def analyse_bag(
    path: str | Path,
    robot: Robot,
    settings: Settings,
    topic: str = "/joint_states",
    diagnostics_topic: str | None = "/diagnostics",
    distro: str | None = None,
    fast: bool = True,
    progress: bool | None = None,
    batch_size: int | None = None,
) -> BagResult:
    """Analyse one bag; never raises for bad bags (the result says what went wrong)."""
    from tqdm import tqdm

    result = BagResult(path=str(path), ok=False, partial=True, warnings=[])
    extra = {"batch_size": batch_size} if batch_size else {}
    try:
        with BagSource(path, topic, diagnostics_topic, distro=distro, bulk=fast, **extra) as source:
            info: BagInfo = source.info
            result.storage, result.ros_distro, result.topics = info.storage, info.ros_distro, info.topics
            result.messages_in_bag = info.topic_messages
            timeline = state_timeline(source)
            result.has_diagnostics = bool(timeline[1])
            analysis = BagAnalysis(robot, settings, timeline, info.duration_ns * 1e-9)
            decoder = BulkDecoder(source.deserializer(JOINT_STATE_TYPE), fast=fast, position=False)
            assembler = _RowAssembler(robot, source._warn)
            use_bag_time: bool | None = None
            undecodable = 0
            with tqdm(
                total=info.topic_messages or None,
                unit="msg",
                unit_scale=True,
                desc=Path(path).name,
                disable=(not progress) if progress is not None else (info.topic_messages < 200_000 or None),
                leave=False,
            ) as bar:
                for batch in prefetched(source.batches()):
                    n = len(batch)
                    if batch.stacked is not None:
                        decoded = decoder.decode_stacked(batch.stacked, n, batch.length)
                    else:
                        decoded = decoder.decode(batch.data or [])
                    stamp, ok, vel, vel_ok, eff, eff_ok = assembler.assemble(
                        decoded, n, batch.bag_time_ns, result.messages + undecodable
                    )
                    undecodable += int((~ok).sum())
                    if use_bag_time is None and ok.any():
                        use_bag_time = bool(stamp[np.flatnonzero(ok)[0]] == 0)
                    t = batch.bag_time_ns if use_bag_time else stamp
                    if not ok.all():
                        t, vel, eff = t[ok], vel[ok], eff[ok]
                        vel_ok = vel_ok if vel_ok.ndim == 1 else vel_ok[ok]
                        eff_ok = eff_ok if eff_ok.ndim == 1 else eff_ok[ok]
                    if result.start_stamp_ns is None and len(t):
                        result.start_stamp_ns = int(t[0])
                    analysis.push(t, vel, vel_ok, eff, eff_ok)
                    result.messages += len(t)
                    bar.update(n)
            analysis.finish()
            result.fast_messages, result.full_messages = decoder.fast_messages, decoder.full_messages
            result.time_source = "bag" if use_bag_time else "header"
            _final_warnings(result, analysis, assembler, source, undecodable)
            result.warnings = source.warnings
            result.partial = source.partial
    except BagError as e:
        result.warnings.append(str(e))
        return result
    result.ok = True
    result.duration_s = analysis.elapsed
    result.phase_durations = dict(zip(analysis.phase_names, (analysis.phase_time * 1e-9).tolist(), strict=True))
    result.velocity = analysis.velocity.result()
    result.torque = analysis.torque.result()
    result.velocity_envelope = analysis.velocity_envelope
    result.torque_envelope = analysis.torque_envelope
    return result


def _final_warnings(
    result: BagResult, analysis: BagAnalysis, assembler: _RowAssembler, source: BagSource, undecodable: int
) -> None:
    warn = source._warn
    if result.time_source == "bag":
        warn("JointState header stamps are zero: using the bag's receive times", False)
    if undecodable:
        warn(f"{undecodable} messages could not be decoded and were skipped")
    if assembler.name_changes > MAX_REPEATED_WARNINGS:
        warn(f"joint names changed {assembler.name_changes} times in all")
    if analysis.backwards:
        warn(
            f"timestamps go backwards {analysis.backwards} times ({analysis.first_issue['backwards']}); "
            "events end there and the time to the next message is taken as the previous interval"
        )
    if analysis.gaps:
        warn(
            f"{analysis.gaps} gaps longer than {analysis.settings.max_gap_s} s between messages "
            f"({analysis.first_issue['gap']}); events end there and the gap is not counted as recorded time",
            False,
        )
    for q, label in (("velocity", "velocity"), ("effort", "effort")):
        if assembler.mismatched[q]:
            warn(
                f"{assembler.mismatched[q]} messages have a {label} array whose length differs from the names; ignored"
            )
    for acc, label in ((analysis.velocity, "velocity"), (analysis.torque, "effort")):
        nan = int(acc.nan_samples.sum())
        if nan:
            joints = [n for n, c in zip(acc.joint_names, acc.nan_samples, strict=True) if c]
            warn(f"{nan} NaN {label} values (joints {joints}) were excluded from the statistics")
    if result.messages:
        if analysis.torque.present_messages == 0:
            warn("effort fields are empty: torque statistics unavailable (velocity is still computed)")
        elif analysis.torque.present_messages < result.messages:
            warn(
                f"effort is empty in {result.messages - analysis.torque.present_messages} of {result.messages} messages"
            )
        if analysis.velocity.present_messages == 0:
            warn("velocity fields are empty: velocity statistics unavailable")
        elif analysis.velocity.present_messages < result.messages:
            warn(
                f"velocity is empty in {result.messages - analysis.velocity.present_messages} "
                f"of {result.messages} messages"
            )
    elif result.messages_in_bag or not source.partial:
        warn(f"no JointState message on {source.topic} could be analysed")


def merge_bag_results(results: Sequence[BagResult]) -> tuple[QuantityResult | None, QuantityResult | None]:
    from hardware_logs.stats import merge_quantities

    good = [(i, r) for i, r in enumerate(results) if r.ok and r.velocity is not None]
    if not good:
        return None, None
    ids = [i for i, _ in good]
    velocity = merge_quantities([r.velocity for _, r in good], ids)  # type: ignore[misc]
    torque = merge_quantities([r.torque for _, r in good], ids)  # type: ignore[misc]
    return velocity, torque
