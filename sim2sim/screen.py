"""``python -m sim2sim.screen``: many policies (a run's checkpoints) over the terrain course, with the map only.

Which checkpoint of a run to evaluate in full? ``python -m sim2sim.evaluate --course`` answers
for one policy with everything: the flat sequences, and each course speed driven twice (with the
map and blanked). Choosing among a run's checkpoints needs less: whether each one crosses, without
a fall, at 0.8 x the commanded speed, at each speed of issue 23's bar (0.5 - 1.0 m/s). The screen
drives the course with the map only (the blanked run asks whether the scan is read at all, which
neighbouring checkpoints of one run answer alike; :func:`sim2sim.course_eval.map_run_checks` is
that part of the bar), in parallel worker processes (``--jobs``), and writes a table of policies
x speeds: "pass" with the mean speed, or why not (where it fell or stalled, or too slow).

Screen on one block field and confirm on another. The course and the operator are deterministic,
so a checkpoint chosen because it passes every speed on seed 1616 is chosen partly for its luck
there; ``--seed 1616 2323`` drives a second field of blocks (the slopes and stairs are the same)
and the table says whether the choice holds on both. The fields share their stairs, though, and
whether a gait climbs a riser can turn on where in its stride it meets it: moving the start 10 cm
along the lead-in (``--spawn 1.0 1.1 1.2``) changes that, and with several starts the by-speed
table gives each speed's crossing rate, a figure one drive per speed cannot. The chosen policy
then goes through ``sim2sim.evaluate`` (the whole bar, blanked map included) before anyone
believes it.

Writes ``OUT/screen.md`` and ``OUT/screen.json`` when ``--out`` is given; prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aow_policy.fileio import atomic_write_text
from aow_policy.policy_contract import PolicyContractError
from export.checkpoint_source import ExportError
from sim2sim import course_eval, evaluate
from sim2sim.course import COURSE_SEED, CourseConfig
from sim2sim.evaluate import identity_line, policy_identity
from sim2sim.policy_args import named_path_items
from training.checkpoint import CheckpointError

# Issue 23's bar spans 0.5 - 1.0 m/s; these are the speeds its evaluations drive.
BAR_SPEEDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0)
# The full evaluation's strips, block speed and stand-up, so that a screened drive is the drive
# sim2sim.evaluate repeats. Bound here, so that a test can screen a milder strip; each drive carries
# its own copy into its worker process.
BLOCK_SPEED = evaluate.BLOCK_SPEED
STAND_UP_S = evaluate.STAND_UP_S
COURSE = evaluate.COURSE
BLOCK = evaluate.BLOCK


@dataclass(frozen=True)
class Drive:
    """One run with the map: a policy over a strip at a speed, on a seed; ``column``: the table
    column it fills."""

    policy: str
    path: str
    strip: CourseConfig
    speed: float
    seed: int
    time_limit: float | None
    stand_up: float
    column: str


def drive(d: Drive) -> dict[str, Any]:
    """Drive ``d`` and judge it with the map-run part of the course bar."""
    run, course = course_eval.drive_course(
        d.path, d.speed, seed=d.seed, time_limit=d.time_limit, course_config=d.strip, stand_up=d.stand_up
    )
    checks = course_eval.map_run_checks(run)
    pace = course_eval.section_pace(course, d.speed)
    through = {name: t for name, t in run.section_times.items() if t is not None}
    slowest = max(through, key=lambda name: through[name] / pace[name], default=None)
    return {
        "policy": d.policy,
        "layout": d.strip.layout,
        "speed": d.speed,
        "seed": d.seed,
        # Where along the lead-in it started (m) and the table column it fills: with several
        # starts, what tells one drive of a speed from another in screen.json.
        "spawn": d.strip.spawn,
        "column": d.column,
        "resolution_m": d.strip.resolution,
        **checks,
        "passes": all(checks.values()),
        "end": run.end,
        "mean_speed": run.mean_speed,
        "progress_m": run.progress_m,
        "section_reached": run.section_reached,
        "final_section": run.final_section,
        "falls": run.falls,
        "fault": run.fault,
        "violations_per_episode": run.violations_per_episode,
        "section_times": run.section_times,
        # The section that took longest against its time at the commanded speed: where a slow
        # crossing lost its time.
        "slowest_section": None
        if slowest is None
        else {"name": slowest, "seconds": through[slowest], "pace_s": pace[slowest]},
        "wall_time": run.wall_time,
    }


def cell(result: dict[str, Any]) -> str:
    """A drive's table cell: "pass 0.68" (mean m/s), or the first reason it does not pass; a slow
    crossing names its slowest section against the pace ("slow 0.47, stairs_up 4.2×")."""
    speed = result["mean_speed"]
    if result["passes"]:
        return f"pass {speed:.2f}"
    if result["falls"]:
        fall = result["falls"][0]
        more = f" (+{len(result['falls']) - 1})" if len(result["falls"]) > 1 else ""
        return f"fell: {fall['section']}{more}"
    if result["fault"]:
        return f"fault: {result['final_section']}"
    if not result["crossed"]:
        return f"{result['end']}: {result['section_reached']}"
    slowest = result.get("slowest_section")
    where = f", {slowest['name']} {slowest['seconds'] / slowest['pace_s']:.1f}×" if slowest else ""
    return f"slow {speed:.2f}{where}"


def drives_for(
    policies: dict[str, Path],
    speeds: list[float],
    seeds: list[int],
    *,
    block: bool = False,
    time_limit: float | None = None,
    spawns: list[float] | None = None,
    resolution: float | None = None,
) -> list[Drive]:
    """Every drive of a screen: each policy at each speed on each seed from each start (``spawns``,
    metres along the lead-in; None: the strips' own), and the block at 1.0 m/s from each start (it
    has no random part: one drive per start, whatever the seeds). Columns name the start only when
    several are driven. ``resolution``: the strips' height-sample spacing in metres (None: theirs,
    0.02 m; training's 0.05 m makes each riser a 72 degree ramp instead of 82)."""
    starts: list[float | None] = list(spawns) if spawns else [None]

    def at(strip: CourseConfig, spawn: float | None) -> CourseConfig:
        if resolution is not None:
            strip = dataclasses.replace(strip, resolution=resolution)
        return strip if spawn is None else dataclasses.replace(strip, spawn=spawn)

    def named(column: str, spawn: float | None) -> str:
        return column if len(starts) == 1 else f"{column}, start {spawn:g} m"

    drives = []
    for name, path in policies.items():
        for seed in seeds:
            for speed in speeds:
                for spawn in starts:
                    column = named(f"{speed:g} m/s, seed {seed}", spawn)
                    drives.append(
                        Drive(name, str(path), at(COURSE, spawn), speed, seed, time_limit, STAND_UP_S, column)
                    )
        if block:
            for spawn in starts:
                strip = at(BLOCK, spawn)
                drives.append(
                    Drive(name, str(path), strip, BLOCK_SPEED, seeds[0], time_limit, STAND_UP_S, named("block", spawn))
                )
    return drives


def screen(drives: list[Drive], jobs: int = 1, progress: bool = True) -> list[dict[str, Any]]:
    """Run ``drives`` (in ``jobs`` worker processes when more than one) and return their results in order."""
    results: list[dict[str, Any] | None] = [None] * len(drives)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(drives), unit="drive", desc="screen")
    if jobs <= 1:
        for i, d in enumerate(drives):
            results[i] = drive(d)
            if bar is not None:
                bar.update()
    else:
        # Spawned, not forked: each worker builds its own MuJoCo and onnxruntime state.
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(drive, d): i for i, d in enumerate(drives)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


def table(drives: list[Drive], results: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, Any]]]:
    """The markdown table (a row per policy, a column per strip/speed/seed, then the count passed) and
    the per-policy summary."""
    columns = list(dict.fromkeys(d.column for d in drives))
    by_policy: dict[str, dict[str, dict[str, Any]]] = {}
    for d, r in zip(drives, results, strict=True):
        by_policy.setdefault(d.policy, {})[d.column] = r
    lines = [
        "| policy | " + " | ".join(columns) + " | passed |",
        "| --- | " + " | ".join("---" for _ in columns) + " | --- |",
    ]
    summary = {}
    for name, cells in by_policy.items():
        passed = [c for c in columns if c in cells and cells[c]["passes"]]
        summary[name] = {"passed": len(passed), "of": len(cells), "fails_at": [c for c in cells if c not in passed]}
        row = " | ".join(cell(cells[c]) if c in cells else "" for c in columns)
        lines.append(f"| {name} | {row} | {len(passed)} of {len(cells)} |")
    return "\n".join(lines) + "\n", summary


def by_speed_table(drives: list[Drive], results: list[dict[str, Any]]) -> str:
    """With several fields or starts: a row per policy, a column per speed (and the block), each
    cell the drives that passed ("2 of 3"): which speeds fail everywhere (the stairs are the same
    on every field) and which on one field's blocks or from some starts only."""
    speeds = sorted({d.speed for d in drives if d.strip.layout != "block"})
    keys: list[float | str] = [*speeds, *(["block"] if any(d.strip.layout == "block" for d in drives) else [])]
    tally: dict[str, dict[float | str, list[bool]]] = {}
    for d, r in zip(drives, results, strict=True):
        key = "block" if d.strip.layout == "block" else d.speed
        tally.setdefault(d.policy, {}).setdefault(key, []).append(bool(r["passes"]))
    over = [
        what for what, varied in (("fields", repeats(drives, "seed")), ("starts", repeats(drives, "spawn"))) if varied
    ]
    lines = [
        f"Passed per speed, over the {' and '.join(over)}:",
        "",
        "| policy | " + " | ".join(k if isinstance(k, str) else f"{k:g} m/s" for k in keys) + " |",
        "| --- | " + " | ".join("---" for _ in keys) + " |",
    ]
    for name, by_key in tally.items():
        cells = [f"{sum(by_key[k])} of {len(by_key[k])}" if k in by_key else "" for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def repeats(drives: list[Drive], what: str) -> bool:
    """Whether the course drives vary in ``what`` ("seed": the field of blocks, "spawn": the start)."""
    values = {d.seed if what == "seed" else d.strip.spawn for d in drives if d.strip.layout != "block"}
    return len(values) > 1


def report(
    drives: list[Drive], results: list[dict[str, Any]], identities: dict[str, dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """screen.md's text and screen.json's content; ``identities``: :func:`sim2sim.evaluate.policy_identity`
    per policy (what names it once its file is gone)."""
    text, summary = table(drives, results)
    if repeats(drives, "seed") or repeats(drives, "spawn"):
        text += "\n" + by_speed_table(drives, results)
    named = "\n".join(identity_line(name, identity) for name, identity in identities.items())
    spacings = sorted({d.strip.resolution for d in drives})
    grid = (
        ""
        if spacings == [COURSE.resolution]
        else f"Height samples every {', '.join(f'{r:g}' for r in spacings)} m (the strips' own: "
        f"{COURSE.resolution:g} m), so each riser is a ramp that wide.\n\n"
    )
    md = (
        "# Course screen (with the map only)\n\n"
        f"Policies:\n\n{named}\n\n{grid}"
        "Each cell is one drive with the elevation map: **pass** (crossed, no fall, mean speed at least "
        f"{course_eval.SPEED_FRACTION_BAR} x the commanded; the mean speed in m/s), or why not. The blanked "
        "run of the full bar is not driven: confirm a choice with `python -m sim2sim.evaluate --course`.\n\n" + text
    )
    payload = {
        "criteria": {"speed_fraction": course_eval.SPEED_FRACTION_BAR, "map_only": True},
        "policies": {d.policy: d.path for d in drives},
        "identities": identities,
        "summary": summary,
        "drives": results,
    }
    return md, payload


def checkpoints_to_screen(policies: Iterable[tuple[str, Path]], last: int) -> dict[str, Path]:
    """The ONNX files as they are; a checkpoint (``model_<it>.pt``) as "<name>_<it>" (its run
    directory's name where no NAME was given); a run directory as its ``last`` latest checkpoints.
    Names are checked here, after the iteration is appended: one NAME may stand for several
    checkpoints of a run (``spd=…/model_1250.pt spd=…/model_1280.pt``)."""
    from training.checkpoint import run_checkpoints

    resolved: dict[str, Path] = {}

    def add(name: str, path: Path) -> None:
        if name in resolved:
            raise ValueError(f"two policies would be named {name!r} ({resolved[name]}, {path}): name them, NAME=PATH")
        resolved[name] = path

    for name, path in policies:
        if path.is_dir():
            found = run_checkpoints(path)[-last:]
            if not found:
                raise ValueError(f"{name}: no checkpoints (model_<iteration>.pt) in {path}")
            for it, ckpt in found:
                add(f"{name}_{it}", ckpt)
        elif path.suffix == ".pt":
            run = path.resolve().parent.name if name == path.stem else name
            add(f"{run}_{path.stem.removeprefix('model_')}", path)
        else:
            add(name, path)
    return resolved


def export_checkpoints(policies: dict[str, Path], into: Path) -> dict[str, Path]:
    """Each checkpoint exported (and verified against PyTorch, as ``aow-export`` does) to ``into/NAME.onnx``;
    ONNX files are passed through."""
    from export import export_policy

    exported = {}
    for name, path in policies.items():
        if path.suffix != ".pt":
            exported[name] = path
            continue
        into.mkdir(parents=True, exist_ok=True)
        result = export_policy(path, into / f"{name}.onnx", log=lambda line: None)
        print(f"exported {path} to {result.onnx_path}", flush=True)
        exported[name] = result.onnx_path
    return exported


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim2sim.screen",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "policy",
        nargs="+",
        metavar="[NAME=]PATH",
        help="an exported policy (.onnx), a checkpoint (model_<it>.pt) or a run directory (its --last checkpoints); "
        "checkpoints are exported and verified first, into OUT/policies/ (or a temporary directory)",
    )
    p.add_argument(
        "--last", type=int, default=1, help="checkpoints taken from each run directory, the latest (default 1)"
    )
    p.add_argument(
        "--speed",
        type=float,
        nargs="+",
        default=list(BAR_SPEEDS),
        metavar="SPEED",
        help="commanded forward speeds on the course, m/s (default: %(default)s, issue 23's bar)",
    )
    p.add_argument(
        "--seed",
        type=int,
        nargs="+",
        default=[COURSE_SEED],
        help="seeds of the course's block field (default %(default)s); a second one confirms a choice",
    )
    p.add_argument(
        "--spawn",
        type=float,
        nargs="+",
        metavar="M",
        help="starts, metres from the strip's start along its flat lead-in (default: the strip's, 1.0 m); several "
        "(1.0 1.1 1.2) meet each riser in another phase of the gait and give a crossing rate per speed",
    )
    p.add_argument("--block", action="store_true", help="also the 20 cm block at 1.0 m/s (experiment A)")
    p.add_argument(
        "--resolution",
        type=float,
        metavar="M",
        help=f"metres between the strips' height samples (default {COURSE.resolution:g}); a riser is a ramp one "
        "sample wide, so 0.05 (the training stairs') asks whether a failure is the course's sharper risers",
    )
    p.add_argument("--time-limit", type=float, help="seconds of driving per run (default: the strip at half speed)")
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: the cores, %(default)s)"
    )
    p.add_argument("--out", type=Path, help="directory for screen.md and screen.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.last < 1:
            raise ValueError(f"--last must be at least 1, got {args.last}")
        policies = checkpoints_to_screen(named_path_items(args.policy, directories=True), args.last)
        for speed in args.speed:
            course_eval.check_speed(speed)
        spawns = args.spawn or []
        if (
            len(set(args.speed)) != len(args.speed)
            or len(set(args.seed)) != len(args.seed)
            or len(set(spawns)) != len(spawns)
        ):
            raise ValueError("a speed, seed or start is given twice")
        strips = (COURSE, BLOCK) if args.block else (COURSE,)
        if args.resolution is not None:
            try:
                strips = tuple(dataclasses.replace(strip, resolution=args.resolution) for strip in strips)
                for strip in strips:  # each length on the grid, so that no riser is a ramp two cells wide
                    strip.validate()
            except ValueError as e:
                raise ValueError(f"--resolution: {e}") from None
        try:  # on the strips as they will be drawn: a start off their grid is refused here too
            evaluate.check_spawns(spawns, strips)
        except ValueError as e:
            raise ValueError(f"--spawn: {e}") from None
        if args.time_limit is not None and not args.time_limit > 0:
            raise ValueError(f"--time-limit must be positive, got {args.time_limit}")
        if args.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    except ValueError as e:
        parser.error(str(e))
    with tempfile.TemporaryDirectory(prefix="aow-screen-") as scratch:
        export_dir = args.out / "policies" if args.out is not None else Path(scratch)
        try:
            policies = export_checkpoints(policies, export_dir)
            # Each file read once here: a file that is no policy is named before any worker starts.
            identities = {name: policy_identity(path) for name, path in policies.items()}
        except (PolicyContractError, ExportError, CheckpointError) as e:
            parser.error(str(e))
        drives = drives_for(
            policies,
            args.speed,
            args.seed,
            block=args.block,
            time_limit=args.time_limit,
            spawns=args.spawn,
            resolution=args.resolution,
        )
        results = screen(drives, jobs=min(args.jobs, len(drives)), progress=not args.no_progress)
    md, payload = report(drives, results, identities)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "screen.md", md)
        atomic_write_text(args.out / "screen.json", json.dumps(payload, indent=1) + "\n")
        print(f"wrote {args.out / 'screen.md'} and screen.json")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
