"""Is the course measurably worse with the map blanked, counted over the drives?

The course bar of :mod:`sim2sim.course_eval` compares each blanked run with its own map run, one
drive at a time. A policy that reads its scan *and* can climb the course's stairs blind at speed
fails that reading at the speeds where it climbs blind, however much it gains from the map
elsewhere. This module asks the question over a set of drives instead (several speeds, starts or
block fields): the same check, crossed at >= 0.8 x the command without a fall
(:func:`sim2sim.course_eval.map_run_checks`), applied to the map run and to the blanked run of each
drive, and the two counts compared with a one-sided exact test (Fisher's, from the hypergeometric
tail): the chance that a policy to which the map made no difference would show as few blanked
passes as were seen, given how many passes there were in all.

Per speed the drives are the starts and fields; over all speeds they are pooled, which is sound
here because every speed has the same drives (a plain pooled table, no stratification).
``ALPHA`` (0.05) is the level below which the blanked course counts as measurably worse.

``python -m sim2sim.scan_effect EVALUATION.json`` computes it from an evaluation that was already
driven (``python -m sim2sim.evaluate --course --speed ... --spawn ...``); the evaluation itself
reports it whenever it drives more than one course drive.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sim2sim.course_eval import map_run_checks

ALPHA = 0.05  # one-sided level for "measurably worse"
# The JSON keys sim2sim.evaluate gives course drives ("course", "course_<speed>[_seed<s>][_start<m>]").
COURSE_KEY = re.compile(r"^course(_[0-9.]+)?(_seed\d+)?(_start[0-9.]+)?$")


def one_sided_exact_p(map_passes: int, map_drives: int, blank_passes: int, blank_drives: int) -> float:
    """P(blanked passes <= ``blank_passes``) when the map makes no difference: the hypergeometric
    tail of Fisher's exact test, the margins (drives per mode, passes in all) held fixed."""
    for name, passes, drives in (("map", map_passes, map_drives), ("blank", blank_passes, blank_drives)):
        if drives < 1 or not 0 <= passes <= drives:
            raise ValueError(f"{name}: {passes} passes of {drives} drives is not a count of drives")
    total_passes, total = map_passes + blank_passes, map_drives + blank_drives
    lowest = max(0, total_passes - map_drives)  # blanked passes cannot be fewer than this
    tail = sum(
        math.comb(total_passes, k) * math.comb(total - total_passes, blank_drives - k)
        for k in range(lowest, blank_passes + 1)
    )
    return tail / math.comb(total, blank_drives)


def _row(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    n = len(pairs)
    map_passes, blank_passes = sum(m for m, _ in pairs), sum(b for _, b in pairs)
    return {
        "drives": n,
        "map": map_passes,
        "blank": blank_passes,
        "p": one_sided_exact_p(map_passes, n, blank_passes, n),
    }


def scan_effect(drives: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy, from course strips as ``sim2sim.evaluate`` writes them (each with ``speed`` and
    ``policies[name]["map" | "blank"]``): per commanded speed and over all, how many map runs and
    how many blanked runs crossed at speed without a fall, the one-sided exact p, and whether the
    blanked course is measurably worse over all drives (p < ``ALPHA``)."""
    pairs: dict[str, dict[str, list[tuple[bool, bool]]]] = {}
    for strip in drives:
        speed = f"{float(strip['speed']):g}"
        for name, runs in strip["policies"].items():
            with_map, blanked = (all(map_run_checks(runs[mode]).values()) for mode in ("map", "blank"))
            pairs.setdefault(name, {}).setdefault(speed, []).append((with_map, blanked))
    if not pairs:
        raise ValueError("no course drives to compare")
    result = {}
    for name, by_speed in pairs.items():
        per_speed = {s: _row(p) for s, p in sorted(by_speed.items(), key=lambda kv: float(kv[0]))}
        everything = _row([pair for p in by_speed.values() for pair in p])
        result[name] = {
            "per_speed": per_speed,
            "all": everything,
            "alpha": ALPHA,
            "measurably_worse": everything["p"] < ALPHA,
        }
    return result


def _p_text(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def markdown(effect: dict[str, dict[str, Any]]) -> str:
    """One row per policy and speed, then one over all speeds with the verdict."""
    lines = [
        "Map runs and blanked runs that crossed at >= 0.8 x the command without a fall; p: one-sided "
        f"exact (Fisher) test that blanking makes no difference; measurably worse where p < {ALPHA:g} "
        "over all drives (`sim2sim.scan_effect`).",
        "",
        "| policy | speed | drives | with the map | blanked | p |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, e in effect.items():
        for speed, row in e["per_speed"].items():
            counts = f"{row['drives']} | {row['map']} | {row['blank']}"
            lines.append(f"| {name} | {speed} m/s | {counts} | {_p_text(row['p'])} |")
        row = e["all"]
        verdict = "measurably worse" if e["measurably_worse"] else "not measurably worse"
        lines.append(
            f"| {name} | **all speeds** | {row['drives']} | {row['map']} | {row['blank']} | "
            f"**{_p_text(row['p'])}: {verdict}** |"
        )
    return "\n".join(lines) + "\n"


def course_drives(evaluation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The course drives of one ``evaluation.json`` (the block strip is not one of them)."""
    return [v for k, v in evaluation.items() if COURSE_KEY.match(k) and isinstance(v, Mapping) and "policies" in v]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim2sim.scan_effect",
        description="Whether the course is measurably worse with the map blanked, over the drives of "
        "one or more sim2sim.evaluate outputs (evaluation.json): map and blanked passes per speed and "
        "a one-sided exact test.",
    )
    parser.add_argument("evaluations", nargs="+", type=Path, help="evaluation.json files of sim2sim.evaluate --course")
    parser.add_argument("--policy", action="append", help="only this policy (its name in the evaluations); repeatable")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line after the table")
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    drives: list[Mapping[str, Any]] = []
    for path in args.evaluations:
        try:
            evaluation = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            parser.error(f"{path}: cannot read an evaluation ({error})")
        found = course_drives(evaluation)
        if not found:
            parser.error(f"{path}: no course drives (was it written by sim2sim.evaluate --course?)")
        drives += found
    effect = scan_effect(drives)
    if args.policy:
        missing = [name for name in args.policy if name not in effect]
        if missing:
            parser.error(f"--policy: no drives of {', '.join(missing)} (the evaluations hold {', '.join(effect)})")
        effect = {name: effect[name] for name in args.policy}
    table = markdown(effect)
    print(table, end="")
    if args.out:
        args.out.write_text(table)
    if args.json:
        print(json.dumps(effect))
    return 0


if __name__ == "__main__":
    sys.exit(main())
