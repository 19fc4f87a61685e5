"""``aow-status RUN_DIR [RUN_DIR ...]``: where training runs stand, read from their files.

For a run started in the background (``aow-train --no-progress --max-minutes ...``) or copied from
another machine: its task and algorithm, the iteration against its target, the environment steps
in the run and in its whole line (a run made with ``--fork`` continues its parent's iterations:
the parent's steps up to the fork are counted where the parent's directory is found, as given or
beside the run), whether it is still writing (``metrics.jsonl`` touched within a few iterations'
time), its speed, the stretch's time budget and when it ends, the latest checkpoint, and the last
``--window`` iterations against the window before them: reward, episode length, violations per
episode of every constraint, terrain levels per sub-terrain kind, and what ended the episodes.

A directory of runs (``aow-compare --out``, ``runs/``) stands for every run in it. ``--json``: one
JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from training.checkpoint import run_checkpoints
from training.run_files import RunFileError, env_steps, read_jsonl, run_config

# metrics.jsonl key families summarised per window: the prefix and the name the report gives them.
FAMILIES = (
    ("episode/violations/", "violations per episode"),
    ("episode/terrain_level/", "terrain level by kind"),
    ("episode/ends/", "share of ending episodes"),
)
SCALARS = ("mean_reward", "mean_episode_length", "episode/terrain_level", "time/steps_per_s")
# A run counts as still writing while its metrics file is younger than this many iterations' time.
LIVE_ITERATIONS = 3.0


class StatusError(ValueError):
    """A path that holds no run, or a run whose files cannot be read."""


@dataclass
class Ancestor:
    """A run whose weights this one continues: ``fork`` (``aow-train --fork``: its iterations go
    on) or ``init`` (``--init-from``: its weights start a new run, maybe of another task)."""

    link: str
    recorded: str  # the checkpoint as the child's config names it
    at: int | None  # that checkpoint's iteration
    path: str | None  # the parent's run directory, where found here
    task: str | None
    steps: float | None  # its environment steps up to ``at`` (None: not here)


@dataclass
class RunStatus:
    path: str
    task: str
    algo: str
    iteration: int
    target: int | None
    steps_in_run: float
    ancestors: list[Ancestor]  # nearest first, up to the first one not found here
    steps_by_task: dict[str, float]  # this run's and its found ancestors' steps
    seconds_since_write: float
    seconds_per_iteration: float
    running: bool
    stretch_started: str | None
    stretch_budget_s: float | None
    stretch_ends: str | None  # local time, while running under a budget
    latest_checkpoint: str | None
    window: int
    recent: dict[str, float] = field(default_factory=dict)
    before: dict[str, float] = field(default_factory=dict)


def find_runs(path: Path) -> list[Path]:
    """``path`` itself when it is a run (it has ``metrics.jsonl``), else the runs below it, up to
    two levels down (``runs/NAME``, ``OUT/runs/ALGO_sSEED``), in name order."""
    if (path / "metrics.jsonl").is_file():
        return [path]
    if not path.is_dir():
        raise StatusError(f"{path}: no such directory")
    found = sorted({p.parent for pattern in ("*/metrics.jsonl", "*/*/metrics.jsonl") for p in path.glob(pattern)})
    if not found:
        raise StatusError(f"{path}: not a run directory (no metrics.jsonl) and no runs below it")
    return found


def _parent(run_dir: Path, config: dict[str, Any], search: Sequence[Path]) -> tuple[Ancestor, dict[str, Any]] | None:
    """The run this one continues (its ``fork_from``, else its ``init_from``), looked for as
    recorded (relative to the working directory), beside the run, then in each ``search`` folder;
    with the parent's config (empty where it is not here), read once for the walk up the line."""
    links = [(link, config[key]) for link, key in (("fork", "fork_from"), ("init", "init_from")) if config.get(key)]
    if not links:
        return None
    link, recorded = links[0]
    checkpoint = Path(str(recorded))
    try:
        at: int | None = int(checkpoint.stem.split("_", 1)[1])
    except (IndexError, ValueError):
        at = None
    name = checkpoint.parent.name
    for candidate in (checkpoint.parent, run_dir.parent / name, *(folder / name for folder in search)):
        if (candidate / "metrics.jsonl").is_file() and candidate.resolve() != run_dir.resolve():
            parent_config = run_config(candidate)
            task = parent_config.get("task")
            steps = _steps(candidate, at) if at is not None else None
            found = Ancestor(link, str(recorded), at, str(candidate), None if task is None else str(task), steps)
            return found, parent_config
    return Ancestor(link, str(recorded), at, None, None, None), {}


def _steps(run_dir: Path, iterations_done: int) -> float:
    if iterations_done <= 0:
        return 0.0
    return float(env_steps(run_dir, np.array([iterations_done - 1]))[0])


def _window_means(records: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k in SCALARS if any(k in r for r in records)]
    keys += sorted({k for r in records for k in r for prefix, _ in FAMILIES if k.startswith(prefix)})
    means = {}
    for key in keys:
        values = [float(r[key]) for r in records if isinstance(r.get(key), int | float) and math.isfinite(r[key])]
        if values:
            means[key] = float(np.mean(values))
    return means


def run_status(run_dir: Path, window: int = 10, now: float | None = None, search: Sequence[Path] = ()) -> RunStatus:
    """The status of one run directory (see the module's docstring); ``search``: more folders
    where the runs it continues may be (by directory name)."""
    now = time.time() if now is None else now
    metrics = run_dir / "metrics.jsonl"
    records = read_jsonl(metrics)
    if not records:
        raise StatusError(f"{run_dir}: metrics.jsonl has no iterations yet")
    config = run_config(run_dir)
    segments = read_jsonl(run_dir / "segments.jsonl")
    iteration = int(records[-1]["iteration"]) + 1  # metrics count iterations from 0
    in_run = _steps(run_dir, iteration)

    ancestors: list[Ancestor] = []
    steps_by_task = {str(config.get("task", "?")): in_run}
    child, child_config, seen = run_dir, config, {run_dir.resolve()}
    while (found := _parent(child, child_config, search)) is not None:
        parent, child_config = found
        ancestors.append(parent)
        if parent.path is None or parent.steps is None or Path(parent.path).resolve() in seen:
            break  # not here (or a loop in copied files): the line's count stops at this run
        seen.add(Path(parent.path).resolve())
        steps_by_task[parent.task or "?"] = steps_by_task.get(parent.task or "?", 0.0) + parent.steps
        child = Path(parent.path)

    last = records[-1]
    per_iteration = float(last.get("time/collection_s", 0.0)) + float(last.get("time/update_s", 0.0))
    age = max(0.0, now - metrics.stat().st_mtime)
    running = age < max(60.0, LIVE_ITERATIONS * per_iteration)
    segment = segments[-1] if segments else {}
    budget = segment.get("time_budget_s")
    ends = None
    if running and budget and segment.get("started"):
        started = datetime.strptime(segment["started"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
        ends = time.strftime("%H:%M", time.localtime(started + float(budget)))
    checkpoints = run_checkpoints(run_dir)
    recent, before = records[-window:], records[-2 * window : -window]
    return RunStatus(
        path=str(run_dir),
        task=str(config.get("task", "?")),
        algo=str(config.get("algo", "?")),
        iteration=iteration,
        target=segment.get("target", config.get("iterations")),
        steps_in_run=in_run,
        ancestors=ancestors,
        steps_by_task=steps_by_task,
        seconds_since_write=age,
        seconds_per_iteration=per_iteration,
        running=running,
        stretch_started=segment.get("started"),
        stretch_budget_s=budget,
        stretch_ends=ends,
        latest_checkpoint=checkpoints[-1][1].name if checkpoints else None,
        window=len(recent),
        recent=_window_means(recent),
        before=_window_means(before),
    )


def _count(steps: float) -> str:
    return f"{steps / 1e6:.1f} M" if steps >= 1e6 else f"{steps:,.0f}"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _value(s: RunStatus, key: str, digits: int = 2) -> str:
    value = s.recent.get(key)
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    if key in s.before:
        text += f" ({value - s.before[key]:+.{digits}f})"
    return text


def format_status(s: RunStatus) -> str:
    """A few lines for a person: identity and progress, liveness, then the last window's figures
    with their change against the window before (in brackets)."""
    target = f" of {s.target}" if s.target else ""
    out = [f"{s.path}: {s.task}, {s.algo}, it. {s.iteration}{target}, {_count(s.steps_in_run)} steps in this run"]
    if s.ancestors:
        links = [Path(s.path).name]
        for a in s.ancestors:
            where = Path(a.path).name if a.path else f"{a.recorded} (not here: --parents DIR)"
            links.append(f"{a.link} at it. {a.at} of {where}" if a.at is not None else f"{a.link} of {where}")
        by_task = ", ".join(f"{task} {_count(steps)}" for task, steps in s.steps_by_task.items())
        out.append(f"  line: {' <- '.join(links)}; steps by task: {by_task}")
    sps = s.recent.get("time/steps_per_s")
    speed = f"{sps:,.0f} env-steps/s, {s.seconds_per_iteration:.1f} s per iteration" if sps else ""
    if s.target and s.iteration >= s.target:
        live = f"  finished (its target) {_ago(s.seconds_since_write)} ({speed})"
    elif s.running:
        live = f"  running: last iteration {_ago(s.seconds_since_write)}, {speed}"
        if s.stretch_ends:
            live += f"; this stretch's budget ({s.stretch_budget_s / 60:.0f} min) ends at {s.stretch_ends}"
    else:
        live = f"  not running: last iteration {_ago(s.seconds_since_write)} ({speed})"
    out.append(live + f"; latest checkpoint {s.latest_checkpoint or 'none'}")
    head = f"  last {s.window} it.{' (change against the ' + str(s.window) + ' before)' if s.before else ''}:"
    out.append(
        f"{head} reward {_value(s, 'mean_reward')}, episode length {_value(s, 'mean_episode_length', 0)}"
        + (f", terrain level {_value(s, 'episode/terrain_level')}" if "episode/terrain_level" in s.recent else "")
    )
    for prefix, label in FAMILIES:
        keys = [k for k in s.recent if k.startswith(prefix)]
        if prefix == "episode/ends/":
            keys = [k for k in keys if s.recent[k] > 0 or s.before.get(k, 0) > 0]
        if keys:
            out.append(f"    {label}: " + ", ".join(f"{k[len(prefix) :]} {_value(s, k)}" for k in keys))
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aow-status",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR", help="a run directory, or a directory of runs")
    p.add_argument(
        "--window", type=int, default=10, help="iterations averaged (default 10), compared with as many before"
    )
    p.add_argument(
        "--parents",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a folder where the runs these continue may be, by name (repeatable; e.g. policies/runs)",
    )
    p.add_argument(
        "--json", action="store_true", help="also print one JSON object (every run's status) as the last line"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.window < 1:
        print(f"aow-status: error: --window must be >= 1, got {args.window}", file=sys.stderr)
        return 2
    statuses: list[RunStatus] = []
    failed = False
    for path in args.paths:
        try:
            runs = find_runs(path)
        except StatusError as e:
            print(f"aow-status: error: {e}", file=sys.stderr)
            failed = True
            continue
        for run_dir in runs:
            try:
                statuses.append(run_status(run_dir, args.window, search=args.parents))
            except (StatusError, RunFileError) as e:
                print(f"aow-status: {e}", file=sys.stderr)
                failed = True
    print("\n\n".join(format_status(s) for s in statuses))
    if args.json:
        print(json.dumps({"runs": [asdict(s) for s in statuses]}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
