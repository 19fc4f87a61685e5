"""``python -m sim2sim.follow``: screen training runs' new checkpoints while they train, and keep them.

A rough-terrain line's course record swings between checkpoints tens of iterations apart, more
than any training metric shows, so a checkpoint is chosen by its screen (``sim2sim.screen``).
Beside a run that means screening its checkpoints as they come and keeping the good ones: a run
keeps only its resume checkpoint once the session ends, and a checkpoint that screened well but
was not kept is gone. This does both, in turn over the runs given, until ``--minutes`` pass:

- the newest checkpoint of each run, at least ``--every`` iterations after the last one screened
  (the first one at once), copied without its runner state (``training.slim_checkpoint
  --policy``, about 3 MB) to ``OUT/<run>/model_<it>.pt``;
- screened with the options after ``--`` (sim2sim.screen's own: ``--spawn``, ``--block``,
  ``--seed``, ``--jobs`` ...), its ``screen.md`` and ``screen.json`` kept as
  ``OUT/<run>/screen_<it>.md`` / ``.json``;
- one line per screen printed (course and block drives passed), and ``OUT/history.png`` and
  ``OUT/history.md`` (``sim2sim.screen_history`` over every run followed) redrawn.

A screen that starts before the time is up runs to its end. Started again on the same ``OUT`` it
goes on from the screens there. ``--once`` screens each run's pending checkpoint once and stops.

    nice -n 2 python -m sim2sim.follow runs/rough_kappa_np3o runs/rough_track_ppo --every 10 \\
        --minutes 110 --out runs/follow -- --spawn 1.0 1.1 1.2 1.3 1.4 1.5 --block --jobs 1 --no-progress
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sim2sim import screen, screen_history
from training.checkpoint import CheckpointError, run_checkpoints
from training.slim_checkpoint import slim_files


def screened_iterations(kept: Path) -> list[int]:
    """The iterations already screened into ``kept`` (``screen_<it>.json``), in order."""
    found = []
    for path in kept.glob("screen_*.json"):
        suffix = path.stem.removeprefix("screen_")
        if suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)


def pending_checkpoint(run_dir: Path, screened: list[int], every: int) -> tuple[int, Path] | None:
    """The run's newest checkpoint if it is at least ``every`` iterations past the last screened
    (any, when none was), else None."""
    found = run_checkpoints(run_dir)
    if not found:
        return None
    iteration, path = found[-1]
    if screened and (iteration in screened or iteration < screened[-1] + every):
        return None
    return iteration, path


def screen_one(run_dir: Path, iteration: int, checkpoint: Path, out: Path, screen_args: list[str]) -> Path:
    """Keep ``checkpoint``'s policy copy in ``out/<run>/`` and screen it there; returns the JSON."""
    kept = out / run_dir.name
    [copy] = slim_files([checkpoint], kept, policy_only=True)
    with tempfile.TemporaryDirectory(prefix="aow-follow-") as scratch:
        try:
            status = screen.main([str(copy), *screen_args, "--out", scratch])
        except SystemExit as e:  # the screen refused its input (parser.error): said on stderr
            status = e.code
        if status != 0:
            raise RuntimeError(f"sim2sim.screen of {copy} exited with {status}")
        for suffix in (".md", ".json"):
            shutil.move(Path(scratch) / f"screen{suffix}", kept / f"screen_{iteration}{suffix}")
    return kept / f"screen_{iteration}.json"


def summary_line(run_dir: Path, iteration: int, screen_json: Path) -> str:
    points = screen_history.read_screen(screen_json, run_dir.name)
    point = next((p for p in points if p.iteration == iteration), None)
    if point is None:
        return f"{run_dir.name} it. {iteration}: screened (no course drives on the default field)"
    block = f", block {point.block_passed} of {point.block_driven}" if point.block_driven else ""
    return f"{run_dir.name} it. {iteration}: course {point.course_passed} of {point.course_driven}{block}"


def redraw_history(out: Path, runs: list[Path]) -> None:
    sources = [(None, out / r.name) for r in runs if screened_iterations(out / r.name)]
    points = screen_history.gather(sources)
    if points:
        (out / "history.md").write_text(screen_history.table(points, screen_history.COURSE_SEED))
        screen_history.plot(points, out / "history.png", screen_history.COURSE_SEED)


def follow(
    runs: list[Path],
    out: Path,
    screen_args: list[str],
    every: int,
    deadline: float | None,
    poll_s: float = 60.0,
    once: bool = False,
    log: Callable[[str], None] = print,
) -> int:
    """The loop of the module docstring; returns the number of checkpoints screened."""
    count = 0
    while True:
        screened_now = 0
        for run_dir in runs:
            if deadline is not None and time.time() >= deadline:
                return count
            pending = pending_checkpoint(run_dir, screened_iterations(out / run_dir.name), every)
            if pending is None:
                continue
            iteration, checkpoint = pending
            log(f"{time.strftime('%H:%M:%S')} screening {checkpoint}")
            screen_json = screen_one(run_dir, iteration, checkpoint, out, screen_args)
            log(f"{time.strftime('%H:%M:%S')} {summary_line(run_dir, iteration, screen_json)}")
            redraw_history(out, runs)
            count += 1
            screened_now += 1
        if once:
            return count
        if not screened_now:
            if deadline is not None and time.time() + poll_s >= deadline:
                return count
            time.sleep(poll_s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim2sim.follow",
        usage="python -m sim2sim.follow RUN [RUN ...] --out OUT (--minutes M | --once) [--every N] [--poll S] "
        "[-- SCREEN OPTIONS]",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", type=Path, help="training run directories (their model_<it>.pt)")
    p.add_argument("--out", type=Path, required=True, help="where the kept checkpoints and their screens go")
    p.add_argument("--every", type=int, default=10, help="iterations between screened checkpoints (default 10)")
    p.add_argument("--minutes", type=float, default=None, help="stop starting screens after this long")
    p.add_argument("--poll", type=float, default=60.0, help="seconds between looks when nothing is new")
    p.add_argument("--once", action="store_true", help="screen each run's pending checkpoint once, then stop")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    own, screen_args = argv[:split], argv[split + 1 :]
    parser = build_parser()
    args = parser.parse_args(own)
    if args.every < 1:
        parser.error(f"--every must be at least 1, got {args.every}")
    if args.minutes is None and not args.once:
        parser.error("give --minutes (how long to follow) or --once")
    for run_dir in args.runs:
        if not run_dir.is_dir():
            parser.error(f"{run_dir}: no such run directory")
    if "--out" in screen_args or "--last" in screen_args:
        parser.error("--out and --last are the follower's to set, not sim2sim.screen's")
    try:  # the screen's options checked now, not at the first checkpoint an hour from now
        screen.build_parser().parse_args(["policy.onnx", *screen_args])
    except SystemExit:
        parser.error("the options after -- are not sim2sim.screen's (its message above)")
    deadline = None if args.minutes is None else time.time() + 60.0 * args.minutes
    try:
        count = follow(args.runs, args.out, screen_args, args.every, deadline, args.poll, args.once)
    except (CheckpointError, RuntimeError) as e:
        print(f"sim2sim.follow: error: {e}", file=sys.stderr)
        return 1
    print(f"screened {count} checkpoint(s); kept in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
