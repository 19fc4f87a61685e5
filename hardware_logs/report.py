"""The replay's outputs: summary.json (schema in schema/summary.schema.json), events.csv, a table.

All numbers in summary.json are finite or null: unconstrained joints have ``"limit": null``,
ratios over zero samples are null. Files are written to a temporary name and then renamed, so a
failed run never leaves a half-written report.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from aow_policy.fileio import atomic_write_text
from hardware_logs.analyse import BagResult
from hardware_logs.stats import UNITS, QuantityResult, Settings

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "summary.schema.json"
SCHEMA_VERSION = 1


def _num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _ratio(a: float, b: float) -> float | None:
    return float(a) / float(b) if b else None


def _event_dict(e: np.void, bag_names: Sequence[str], joint_names: Sequence[str]) -> dict[str, Any]:
    return {
        "bag": bag_names[int(e["bag"])],
        "joint": joint_names[int(e["joint"])],
        "phase": str(e["phase"]),
        "start_s": int(e["start_ns"]) * 1e-9,
        "start_stamp_ns": int(e["start_stamp_ns"]),
        "duration_s": float(e["duration_ns"]) * 1e-9,
        "samples": int(e["samples"]),
        "peak": float(e["peak"]),
        "peak_abs": float(e["peak_abs"]),
    }


def quantity_summary(
    q: QuantityResult, duration_s: float, settings: Settings, bag_names: Sequence[str]
) -> dict[str, Any]:
    available = q.available
    names = q.joint_names
    events_per_joint = np.bincount(q.events["joint"], minlength=len(names)) if len(q.events) else np.zeros(len(names))
    windows = duration_s / settings.window_s
    per_joint = {}
    for k, name in enumerate(names):
        per_joint[name] = {
            "limit": _num(q.limits[k]),
            "samples": int(q.samples[k]),
            "samples_over": int(q.samples_over[k]),
            "share_over": _ratio(q.samples_over[k], q.samples[k]),
            "events": int(events_per_joint[k]),
            "time_over_s": float(q.time_over[k]) * 1e-9,
            "peak": float(q.peak[k]),
            "peak_abs": _num(q.peak_abs[k]),
            "nan_samples": int(q.nan_samples[k]),
        }
    worst = np.argsort(-q.events["peak"], kind="stable")[: settings.worst_events]
    return {
        "available": available,
        "unit": UNITS[q.name],
        "samples": int(q.samples.sum()),
        "samples_over": int(q.samples_over.sum()),
        "share_over": _ratio(q.samples_over.sum(), q.samples.sum()),
        "nan_samples": int(q.nan_samples.sum()),
        "events": len(q.events),
        "time_over_s": float(q.time_over.sum()) * 1e-9,
        "violations_per_minute": _ratio(len(q.events), duration_s / 60.0) if available else None,
        "over_steps": int(q.over_bins),
        "windows": windows,
        "violations_per_window": _ratio(q.over_bins, windows) if available else None,
        "per_joint": per_joint,
        "worst_events": [_event_dict(q.events[i], bag_names, names) for i in worst.tolist()],
    }


def phase_summaries(
    velocity: QuantityResult, torque: QuantityResult, durations: dict[str, float], settings: Settings
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, duration in durations.items():
        entry: dict[str, Any] = {"duration_s": duration}
        for q in (velocity, torque):
            counts = q.phases.get(phase)
            samples = int(counts.samples.sum()) if counts else 0
            over = int(counts.samples_over.sum()) if counts else 0
            events = int((q.events["phase"] == phase).sum())
            windows = duration / settings.window_s
            entry[q.name] = {
                "samples": samples,
                "samples_over": over,
                "share_over": _ratio(over, samples),
                "events": events,
                "time_over_s": float(counts.time_over.sum()) * 1e-9 if counts else 0.0,
                "over_steps": int(counts.over_bins) if counts else 0,
                "violations_per_window": _ratio(counts.over_bins if counts else 0, windows) if q.available else None,
                "violations_per_minute": _ratio(events, duration / 60.0) if q.available else None,
            }
        out[phase] = entry
    return out


def _labelled_phases(durations: dict[str, float], has_diagnostics: bool) -> dict[str, float]:
    """Phases worth reporting: none without diagnostics, and none that lasted no time."""
    return {phase: d for phase, d in durations.items() if d > 0} if has_diagnostics else {}


def build_summary(
    results: Sequence[BagResult],
    velocity: QuantityResult | None,
    torque: QuantityResult | None,
    settings: Settings,
    robot: Any,
    topic: str,
    diagnostics_topic: str | None,
    fast: bool,
) -> dict[str, Any]:
    bag_names = [r.path for r in results]
    warnings = [f"{Path(r.path).name}: {w}" for r in results for w in r.warnings]
    good = [r for r in results if r.ok]
    duration = sum(r.duration_s for r in good)
    durations: dict[str, float] = {}
    for r in good:
        for phase, d in _labelled_phases(r.phase_durations, r.has_diagnostics).items():
            durations[phase] = durations.get(phase, 0.0) + d
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": "aow-replay",
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "robot": {"name": robot.name, "contract_hash": robot.contract_hash, "config": str(robot.source)},
        "settings": {
            "topic": topic,
            "diagnostics_topic": diagnostics_topic,
            "policy_dt_s": settings.policy_dt,
            "window_s": settings.window_s,
            "max_gap_s": settings.max_gap_s,
            "fast_path": fast,
        },
        "partial": any(r.partial or not r.ok for r in results),
        "warnings": warnings,
        "joints": list(robot.joint_names),
        "messages": sum(r.messages for r in good),
        "duration_s": duration,
    }
    if velocity is None or torque is None:
        empty = _empty_quantities(robot, settings)
        velocity, torque = empty
    summary["velocity"] = quantity_summary(velocity, duration, settings, bag_names)
    summary["torque"] = quantity_summary(torque, duration, settings, bag_names)
    summary["phases"] = phase_summaries(velocity, torque, durations, settings)
    summary["bags"] = [_bag_summary(r, settings) for r in results]
    return summary


def _empty_quantities(robot: Any, settings: Settings) -> tuple[QuantityResult, QuantityResult]:
    from hardware_logs.analyse import hist_max
    from hardware_logs.stats import QuantityAccumulator

    names = robot.joint_names
    return (
        QuantityAccumulator(
            "velocity", names, robot.constraint_velocity_limits, hist_max(robot, "velocity"), settings, ["all"]
        ).result(),
        QuantityAccumulator(
            "torque", names, robot.constraint_torque_limits, hist_max(robot, "torque"), settings, ["all"]
        ).result(),
    )


def _bag_summary(r: BagResult, settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": r.path,
        "ok": r.ok,
        "partial": r.partial or not r.ok,
        "warnings": list(r.warnings),
        "storage": r.storage,
        "ros_distro": r.ros_distro,
        "topics": {name: {"type": ty, "messages": n} for name, (ty, n) in sorted(r.topics.items())},
        "messages": r.messages,
        "messages_in_bag": r.messages_in_bag,
        "fast_path_messages": r.fast_messages,
        "full_path_messages": r.full_messages,
        "time_source": r.time_source,
        "start_stamp_ns": r.start_stamp_ns,
        "duration_s": r.duration_s,
    }
    if r.ok and r.velocity is not None and r.torque is not None:
        velocity, torque = r.velocity, r.torque
        own = [r.path]  # a single bag's events carry bag index 0
        out["velocity"] = quantity_summary(velocity, r.duration_s, settings, own)
        out["torque"] = quantity_summary(torque, r.duration_s, settings, own)
        out["phases"] = phase_summaries(
            velocity, torque, _labelled_phases(r.phase_durations, r.has_diagnostics), settings
        )
    return out


# ---- files ---------------------------------------------------------------------------------------


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def validate_summary(summary: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if the summary does not follow the documented schema."""
    import jsonschema

    jsonschema.validate(summary, load_schema())


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    validate_summary(summary)
    atomic_write_text(path, json.dumps(summary, indent=2, allow_nan=False) + "\n")


EVENT_COLUMNS = (
    "bag",
    "quantity",
    "joint",
    "phase",
    "start_s",
    "start_stamp_ns",
    "duration_s",
    "samples",
    "peak_overrun",
    "peak_abs",
    "limit",
    "unit",
)


def write_events(path: Path, results: Sequence[BagResult]) -> int:
    """All events of all bags, by bag then start time; returns the number of rows."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(EVENT_COLUMNS)
    rows = 0
    for r in results:
        if not r.ok:
            continue
        quantities = [q for q in (r.velocity, r.torque) if q is not None]
        merged = [(q, e) for q in quantities for e in q.events]
        merged.sort(key=lambda qe: (int(qe[1]["start_ns"]), qe[0].name, int(qe[1]["joint"])))
        for q, e in merged:
            k = int(e["joint"])
            writer.writerow(
                [
                    r.path,
                    q.name,
                    q.joint_names[k],
                    str(e["phase"]),
                    f"{int(e['start_ns']) * 1e-9:.6f}",
                    int(e["start_stamp_ns"]),
                    f"{float(e['duration_ns']) * 1e-9:.6f}",
                    int(e["samples"]),
                    f"{float(e['peak']):.6g}",
                    f"{float(e['peak_abs']):.6g}",
                    f"{float(q.limits[k]):.6g}",
                    UNITS[q.name],
                ]
            )
            rows += 1
    atomic_write_text(path, buf.getvalue())
    return rows


# ---- terminal ------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def format_table(summary: dict[str, Any]) -> str:
    """A fixed-width per-joint table of both quantities, then totals, phases and bags."""
    lines = []
    v, t = summary["velocity"], summary["torque"]
    head = (
        f"{'joint':<10} | {'v.limit':>7} {'over':>7} {'share':>7} {'events':>6} {'peak':>7} {'t.over':>7} |"
        f" {'τ.limit':>7} {'over':>7} {'share':>7} {'events':>6} {'peak':>7} {'t.over':>7}"
    )
    lines += [head, "-" * len(head)]

    def cells(q: dict[str, Any], j: dict[str, Any] | None) -> str:
        if not q["available"]:
            return f" {'unavailable':>51}"
        src = j if j is not None else q
        limit = _fmt(j["limit"]) if j is not None else ""
        share = src["share_over"]
        peak = j["peak"] if j is not None else max((p["peak"] for p in q["per_joint"].values()), default=0.0)
        return (
            f" {limit:>7} {src['samples_over']:>7} {_fmt(None if share is None else 100 * share, '.2f') + '%':>7}"
            f" {src['events']:>6} {_fmt(peak):>7} {_fmt(src['time_over_s'], '.2f') + 's':>7}"
        )

    for name in summary["joints"]:
        lines.append(f"{name:<10} |{cells(v, v['per_joint'][name])} |{cells(t, t['per_joint'][name])}")
    lines.append("-" * len(head))
    lines.append(f"{'all':<10} |{cells(v, None)} |{cells(t, None)}")
    lines.append("")
    lines.append(
        f"recorded {summary['duration_s']:.1f} s in {summary['messages']} messages;"
        f" violations per {summary['settings']['window_s']:g} s window (policy steps with any joint over):"
        f" velocity {_fmt(v['violations_per_window'])}, torque {_fmt(t['violations_per_window'])};"
        f" events per minute: velocity {_fmt(v['violations_per_minute'])}, torque {_fmt(t['violations_per_minute'])}"
    )
    for phase, p in summary["phases"].items():
        lines.append(
            f"  phase {phase:<9} {p['duration_s']:8.1f} s  velocity: {p['velocity']['events']} events,"
            f" {_fmt(p['velocity']['violations_per_window'])}/window  torque: {p['torque']['events']} events,"
            f" {_fmt(p['torque']['violations_per_window'])}/window"
        )
    if len(summary["bags"]) > 1:
        for b in summary["bags"]:
            status = "failed" if not b["ok"] else ("partial" if b["partial"] else "ok")
            ve = b.get("velocity", {}).get("events", "-")
            te = b.get("torque", {}).get("events", "-")
            lines.append(
                f"  bag {b['path']}: {status}, {b['messages']} msgs, {b['duration_s']:.1f} s, events v/τ {ve}/{te}"
            )
    if summary["partial"]:
        lines.append("PARTIAL RESULT: the statistics cover only what could be read; see the warnings.")
    for w in summary["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
