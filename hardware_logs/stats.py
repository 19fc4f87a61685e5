"""Streaming violation statistics over joint samples, mergeable exactly across bags.

Definitions (the violation predicates themselves come from :mod:`aow_policy.violations`):

* A *sample* is one joint's value in one JointState message that carries that joint and a finite
  value; NaN values are counted separately and are not samples.
* Each sample *holds* until the next message: its duration ``dt`` is the time to the next
  message. At a *break* (a timestamp going backwards, or a gap longer than ``max_gap_s``) the time
  to the next message is unknown, so the sample holds for the previous ``dt``; the last message of
  a bag does the same. *Elapsed time* is the running sum of ``dt`` from the start of the bag:
  monotonic even when the stamps are not, it places events and policy bins.
* An *event* is a run of consecutive messages in which the joint is over its limit; a break, a
  message without the joint or a NaN ends it. Its start is the elapsed time of its first sample,
  its duration the sum of its samples' ``dt``, its peak the largest overrun (``|value| - limit``).
  Events are attributed to the phase in which they start.
* The paper's metric: elapsed time is cut into bins of the policy period (20 ms at 50 Hz); a bin
  counts once if any sample of any joint in it is over the limit; ``violations_per_window`` is
  the number of such bins per ``window_s`` (20 s, one training episode) of recorded time.
* ``violations_per_minute`` is events per minute of recorded time.

Everything is a sum, a maximum or a list, so per-bag results merge into exact combined results
(:func:`merge_quantities`), whichever process computed them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from aow_policy import violations

QUANTITIES = ("velocity", "torque")
UNITS = {"velocity": "rad/s", "torque": "N·m"}
HIST_BINS = 120

EVENT_DTYPE = np.dtype(
    [
        ("joint", np.int32),
        ("phase", "U24"),
        ("start_ns", np.int64),  # elapsed time since the bag's first message
        ("start_stamp_ns", np.int64),  # the message's own timestamp
        ("duration_ns", np.float64),  # integer nanoseconds: sums are exact in any order
        ("samples", np.int64),
        ("peak", np.float64),  # largest overrun
        ("peak_abs", np.float64),  # largest |value|
        ("bag", np.int32),  # index into the list of bags (set when results are merged)
    ]
)


@dataclass(frozen=True)
class Settings:
    policy_dt: float  # from the robot contract
    window_s: float = 20.0  # one training episode (the paper's 20 s)
    max_gap_s: float = 1.0
    worst_events: int = 10

    @property
    def policy_dt_ns(self) -> int:
        return round(self.policy_dt * 1e9)


@dataclass
class PhaseCounts:
    """Per-phase sums for one quantity (arrays per joint)."""

    samples: np.ndarray
    samples_over: np.ndarray
    time_over: np.ndarray  # ns
    over_bins: int = 0

    @classmethod
    def zeros(cls, joints: int) -> PhaseCounts:
        return cls(np.zeros(joints, np.int64), np.zeros(joints, np.int64), np.zeros(joints))

    def add(self, other: PhaseCounts) -> None:
        self.samples += other.samples
        self.samples_over += other.samples_over
        self.time_over += other.time_over
        self.over_bins += other.over_bins


@dataclass
class QuantityResult:
    """Sufficient statistics of one quantity (velocity or torque) over one or more bags."""

    name: str
    joint_names: tuple[str, ...]
    limits: np.ndarray  # per joint, +inf where unconstrained
    samples: np.ndarray
    samples_over: np.ndarray
    nan_samples: np.ndarray
    time_over: np.ndarray  # ns (integer-valued float64, exact below 104 days)
    peak: np.ndarray  # largest overrun per joint (0 if never over)
    peak_abs: np.ndarray  # largest |value| per joint (nan if no sample)
    over_bins: int
    hist_max: np.ndarray  # per joint upper edge of the |value| histogram
    hist: np.ndarray  # (joints, HIST_BINS + 1): last column counts values beyond hist_max
    phases: dict[str, PhaseCounts] = field(default_factory=dict)
    events: np.ndarray = field(default_factory=lambda: np.zeros(0, EVENT_DTYPE))
    present_messages: int = 0  # messages that carried this array at all

    @property
    def available(self) -> bool:
        return self.present_messages > 0

    @property
    def constrained(self) -> np.ndarray:
        return np.isfinite(self.limits)


def merge_quantities(results: Sequence[QuantityResult], bag_ids: Sequence[int] | None = None) -> QuantityResult:
    """Exact combination: sums of counts, maxima of peaks, union of events and histograms."""
    first = results[0]
    out = QuantityResult(
        name=first.name,
        joint_names=first.joint_names,
        limits=first.limits,
        samples=sum((r.samples for r in results), np.zeros_like(first.samples)),
        samples_over=sum((r.samples_over for r in results), np.zeros_like(first.samples_over)),
        nan_samples=sum((r.nan_samples for r in results), np.zeros_like(first.nan_samples)),
        time_over=sum((r.time_over for r in results), np.zeros_like(first.time_over)),
        peak=np.max([r.peak for r in results], axis=0),
        peak_abs=np.fmax.reduce([r.peak_abs for r in results], axis=0),
        over_bins=sum(r.over_bins for r in results),
        hist_max=first.hist_max,
        hist=sum((r.hist for r in results), np.zeros_like(first.hist)),
        present_messages=sum(r.present_messages for r in results),
    )
    for r in results:
        for phase, counts in r.phases.items():
            out.phases.setdefault(phase, PhaseCounts.zeros(len(first.joint_names))).add(counts)
    events = []
    for i, r in enumerate(results):
        e = r.events.copy()
        if bag_ids is not None:
            e["bag"] = bag_ids[i]
        events.append(e)
    out.events = np.concatenate(events) if events else np.zeros(0, EVENT_DTYPE)
    return out


class QuantityAccumulator:
    """Streams one quantity's samples; rows arrive in message order, in batches."""

    def __init__(
        self,
        name: str,
        joint_names: Sequence[str],
        limits: np.ndarray,
        hist_max: np.ndarray,
        settings: Settings,
        phase_names: Sequence[str],
    ) -> None:
        self.name = name
        self.phase_names = np.array(phase_names, dtype=EVENT_DTYPE["phase"])
        self.joint_names = tuple(joint_names)
        self.limits = np.asarray(limits, dtype=np.float64)
        self.settings = settings
        j = len(self.joint_names)
        self.samples = np.zeros(j, np.int64)
        self.samples_over = np.zeros(j, np.int64)
        self.nan_samples = np.zeros(j, np.int64)
        self.time_over = np.zeros(j)
        self.peak = np.zeros(j)
        self.peak_abs = np.full(j, np.nan)
        self.over_bins = 0
        self.present_messages = 0
        self.hist_max = np.asarray(hist_max, dtype=np.float64)
        self.hist = np.zeros((j, HIST_BINS + 1), np.int64)
        self.phase_counts: dict[int, PhaseCounts] = {}
        self._events: list[np.ndarray] = []
        self._last_bin = -1
        # An event still open at the end of the previous batch, per joint.
        self._open = np.zeros(j, bool)
        self._open_event = np.zeros(j, EVENT_DTYPE)

    def update(
        self,
        values: np.ndarray,
        present: np.ndarray,
        dt_ns: np.ndarray,
        elapsed_ns: np.ndarray,
        stamp_ns: np.ndarray,
        breaks: np.ndarray,
        phase: np.ndarray,
    ) -> None:
        """Add rows. ``values``/``present``: (rows, joints); the rest per row.

        ``breaks[i]``: row i is not continuous with the row before it (events end there).
        ``dt_ns[i]``: how long row i holds; ``elapsed_ns[i]``: elapsed time at its start (ns);
        ``phase[i]``: phase id of row i.
        """
        n = len(dt_ns)
        if n == 0:
            return
        if present.ndim == 1:  # one presence mask for every row (the usual case)
            self.present_messages += n if present.any() else 0
            present = np.broadcast_to(present, values.shape)
            uniform = bool(present[0].all())
        else:
            self.present_messages += int(present.any(axis=1).sum())
            uniform = False
        # One pass gives |values| and, through the NaN-propagating column maxima, whether any
        # value is NaN; masking passes only when some sample is missing or NaN.
        magnitude = np.abs(values)
        column_max = magnitude.max(axis=0)
        if uniform and not np.isnan(column_max).any():
            valid, clean = present, values
        else:
            nan = present & np.isnan(values)
            self.nan_samples += nan.sum(axis=0)
            valid = present & ~nan
            clean = np.where(valid, values, 0.0)
            magnitude = np.abs(clean)
            column_max = magnitude.max(axis=0)
        counted = np.full(values.shape[1], n, np.int64) if valid is present and uniform else valid.sum(axis=0)
        self.samples += counted
        self.peak_abs = np.where(counted > 0, np.fmax(self.peak_abs, column_max), self.peak_abs)
        self._histogram(magnitude, None if valid is present and uniform else valid)

        single_phase = bool((phase == phase[0]).all())
        phases = [int(phase[0])] if single_phase else np.unique(phase).tolist()
        for p in phases:
            counts = self.phase_counts.setdefault(p, PhaseCounts.zeros(len(self.joint_names)))
            counts.samples += counted if single_phase else valid[phase == p].sum(axis=0)
        # A joint is over somewhere in the batch exactly when its largest |value| is over.
        over_joints = np.flatnonzero(violations.over_limit(column_max, self.limits))
        if not len(over_joints):
            return  # the common case on a good run: nothing else changes
        over = np.zeros(values.shape, bool)
        excess = np.zeros(values.shape)
        part, limits = clean[:, over_joints], self.limits[over_joints]
        part_over = violations.over_limit(part, limits)  # never over where not valid (clean is 0 there)
        over[:, over_joints] = part_over
        excess[:, over_joints] = np.where(part_over, violations.overrun(part, limits), 0.0)
        over_dt = np.where(over, dt_ns[:, None].astype(np.float64), 0.0)
        self.samples_over += over.sum(axis=0)
        self.time_over += over_dt.sum(axis=0)
        self.peak = np.maximum(self.peak, excess.max(axis=0))

        any_over = over.any(axis=1)
        bins = elapsed_ns // self.settings.policy_dt_ns
        over_rows = np.flatnonzero(any_over)
        over_bins = bins[over_rows]
        new_bin = np.empty(len(over_bins), bool)
        if len(over_bins):
            new_bin[0] = over_bins[0] != self._last_bin
            new_bin[1:] = over_bins[1:] != over_bins[:-1]
            self._last_bin = int(over_bins[-1])
        self.over_bins += int(new_bin.sum())

        for p in phases:
            counts = self.phase_counts[p]
            rows = slice(None) if single_phase else phase == p
            counts.samples_over += over[rows].sum(axis=0)
            counts.time_over += over_dt[rows].sum(axis=0)
            counts.over_bins += int(new_bin.sum() if single_phase else new_bin[phase[over_rows] == p].sum())

        self._segment_events(over, excess, magnitude, over_dt, elapsed_ns, stamp_ns, breaks, phase)

    def _histogram(self, magnitude: np.ndarray, valid: np.ndarray | None) -> None:
        j = len(self.joint_names)
        # Truncation is floor for these non-negative values; the last bin collects the overflow.
        idx = (magnitude * (HIST_BINS / self.hist_max)).astype(np.int64)
        np.minimum(idx, HIST_BINS, out=idx)
        idx += np.arange(j) * (HIST_BINS + 1)
        flat = idx.ravel() if valid is None else idx[valid]
        self.hist += np.bincount(flat, minlength=j * (HIST_BINS + 1)).reshape(j, HIST_BINS + 1)

    def _segment_events(
        self,
        over: np.ndarray,
        excess: np.ndarray,
        magnitude: np.ndarray,
        over_dt: np.ndarray,
        elapsed_ns: np.ndarray,
        stamp_ns: np.ndarray,
        breaks: np.ndarray,
        phase: np.ndarray,
    ) -> None:
        # continues[i, k]: row i extends an event of joint k that was running in row i-1.
        continues = np.empty_like(over)
        continues[0] = self._open & ~breaks[0]
        continues[1:] = over[:-1] & ~breaks[1:, None]
        continues &= over
        # An open event that does not continue into this batch ended with the previous batch.
        ended = self._open & ~continues[0]
        for k in np.flatnonzero(ended).tolist():
            self._events.append(self._open_event[k : k + 1].copy())
        self._open &= continues[0]

        starts = over & ~continues
        for k in np.flatnonzero(over.any(axis=0)).tolist():
            seg = np.flatnonzero(starts[:, k])
            carried = bool(continues[0, k])
            if carried:
                seg = np.concatenate(([0], seg))
            col_over = over[:, k]
            # Rows between two starts that are over all belong to the first event, so sums and
            # maxima over [start_i, start_{i+1}) are the event's own.
            ev = np.zeros(len(seg), EVENT_DTYPE)
            ev["joint"] = k
            ev["phase"] = self.phase_names[phase[seg]]
            ev["start_ns"] = elapsed_ns[seg]
            ev["start_stamp_ns"] = stamp_ns[seg]
            ev["duration_ns"] = np.add.reduceat(over_dt[:, k], seg)
            ev["samples"] = np.add.reduceat(col_over.astype(np.int64), seg)
            ev["peak"] = np.maximum.reduceat(excess[:, k], seg)
            ev["peak_abs"] = np.maximum.reduceat(np.where(col_over, magnitude[:, k], 0.0), seg)
            if carried:
                prev = self._open_event[k]
                for name in ("phase", "start_ns", "start_stamp_ns"):
                    ev[name][0] = prev[name]
                ev["duration_ns"][0] += prev["duration_ns"]
                ev["samples"][0] += prev["samples"]
                ev["peak"][0] = max(ev["peak"][0], prev["peak"])
                ev["peak_abs"][0] = max(ev["peak_abs"][0], prev["peak_abs"])
            still_open = bool(col_over[-1])
            closed = ev[:-1] if still_open else ev
            if len(closed):
                self._events.append(closed)
            self._open[k] = still_open
            if still_open:
                self._open_event[k] = ev[-1]

    def close_events(self) -> None:
        """End every open event (at a break handled by the caller, or at the end of the bag)."""
        for k in np.flatnonzero(self._open).tolist():
            self._events.append(self._open_event[k : k + 1].copy())
        self._open[:] = False

    def result(self) -> QuantityResult:
        self.close_events()
        events = np.concatenate(self._events) if self._events else np.zeros(0, EVENT_DTYPE)
        events = events[np.lexsort((events["joint"], events["start_ns"]))]
        phases = {str(self.phase_names[p]): c for p, c in self.phase_counts.items()}
        return QuantityResult(
            name=self.name,
            joint_names=self.joint_names,
            limits=self.limits,
            samples=self.samples,
            samples_over=self.samples_over,
            nan_samples=self.nan_samples,
            time_over=self.time_over,
            peak=self.peak,
            peak_abs=self.peak_abs,
            over_bins=self.over_bins,
            hist_max=self.hist_max,
            hist=self.hist,
            phases=phases,
            events=events,
            present_messages=self.present_messages,
        )
