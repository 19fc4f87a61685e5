"""The course record of training lines over their iterations, from the screens already driven.

Every ``sim2sim.screen`` writes a ``screen.json`` (kept as ``policies/runs/<run>/screen_*.json``);
each names its policies' training iteration. This gathers them into one picture: for each line
(the run directory a screen was kept in, or a NAME given), the share of course drives passed
with the map (crossed, no fall, at 0.8 x the command) against the iteration, on one block field
at the course's own sample spacing, and the 20 cm block beside it. It shows what no training
curve does: how far a line's course record swings between neighbouring checkpoints.

    python -m sim2sim.screen_history policies/runs/rough_sharp_np3o policies/runs/rough_kappa_np3o \\
        --out policies/runs/screen_history_np3o.png

Screens written before their policies' identities were recorded (session 21) are left out: they
name no iteration. Points drawn from fewer drives than the most any point has (a screen from one start, not six)
are hollow. A checkpoint screened in several files counts once, by the file with the most drives
on the field; the table printed (or written with ``--md``) lists each point with its files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim2sim.course import COURSE_SEED, CourseConfig

# The course's own spacing; screens from before it was recorded in each drive drew at it.
COURSE_RESOLUTION_M = CourseConfig().resolution


class ScreenFileError(ValueError):
    """A file is not a screen's JSON; the message names it and why."""


@dataclass
class Point:
    """One checkpoint's record on the chosen field: course and block drives passed of driven."""

    line: str
    iteration: int
    series: str  # the policy's name without its iterations (series_name)
    course_passed: int
    course_driven: int
    block_passed: int
    block_driven: int
    files: list[str] = field(default_factory=list)

    @property
    def course_share(self) -> float:
        return self.course_passed / self.course_driven


def _iteration(identity: Any, name: str, path: Path) -> int:
    training = identity.get("training") if isinstance(identity, dict) else None
    iteration = training.get("iteration") if isinstance(training, dict) else None
    if not isinstance(iteration, int) or isinstance(iteration, bool):
        raise ScreenFileError(f"{path}: policy {name!r} has no training iteration in its identity")
    return iteration


def series_name(policy: str) -> str:
    """The policy's name without its trailing iterations ("kappa_1338" and "spd_1409_1409": "kappa",
    "spd"): what tells a line's checkpoints from others kept beside them (a fork, an average)."""
    return re.sub(r"(_\d+)+$", "", policy)


def read_screen(path: Path, line: str, seed: int = COURSE_SEED) -> list[Point]:
    """The points of one screen file: each policy's course drives on field ``seed`` at the course's
    spacing and its block drives (any field: the block has no blocks)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ScreenFileError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("drives"), list) or "policies" not in data:
        raise ScreenFileError(f"{path}: not a sim2sim.screen result (no 'drives' and 'policies')")
    points = []
    # Screens from before session 21 name no iteration ('identities'): left out, not guessed from names.
    for name, identity in (data.get("identities") or {}).items():
        drives = [d for d in data["drives"] if d.get("policy") == name]
        course = [
            d
            for d in drives
            if d.get("layout") == "course"
            and d.get("seed") == seed
            and abs(d.get("resolution_m", COURSE_RESOLUTION_M) - COURSE_RESOLUTION_M) < 1e-9
        ]
        block = [d for d in drives if d.get("layout") == "block"]
        if not course:
            continue
        points.append(
            Point(
                line=line,
                series=series_name(name),
                iteration=_iteration(identity, name, path),
                course_passed=sum(bool(d.get("passes")) for d in course),
                course_driven=len(course),
                block_passed=sum(bool(d.get("passes")) for d in block),
                block_driven=len(block),
                files=[str(path)],
            )
        )
    return points


def _screen_files(source: Path) -> list[Path]:
    if source.is_dir():
        found = sorted(source.glob("screen*.json"))
        if not found:
            raise ScreenFileError(f"{source}: no screen*.json in this directory")
        return found
    if source.is_file():
        return [source]
    raise ScreenFileError(f"{source}: no such screen file or directory")


def gather(sources: list[tuple[str | None, Path]], seed: int = COURSE_SEED) -> list[Point]:
    """Points of every source ((line name or None, file or directory)), one per line and
    iteration (the one from the most drives), sorted by line and iteration. Of a source's policies
    those of its commonest name (:func:`series_name`) are the line; others kept beside them (a
    fork, an average) become lines of their own, "<line>:<name>"."""
    best: dict[tuple[str, int], Point] = {}
    for name, source in sources:
        directory = source.name if source.is_dir() else source.parent.name
        line = name or directory
        read = [(path, point) for path in _screen_files(source) for point in read_screen(path, line, seed)]
        names = [point.series for _, point in read]
        main = max(set(names), key=lambda n: (names.count(n), n), default=None)
        for path, point in read:
            # a checkpoint screened under its run directory's own name ("rough_kappa_np3o_1441",
            # as sim2sim.follow names them) belongs to that run's line too
            if point.series not in (main, directory):
                point.line = f"{line}:{point.series}"
            key = (point.line, point.iteration)
            kept = best.get(key)
            if kept is None or point.course_driven > kept.course_driven:
                point.files = (kept.files if kept else []) + point.files
                best[key] = point
            else:
                kept.files.append(str(path))
    return sorted(best.values(), key=lambda p: (p.line, p.iteration))


def table(points: list[Point], seed: int) -> str:
    lines = [
        f"# Course record by iteration (field {seed}, with the map)",
        "",
        "| line | iteration | course drives passed | block passed | screens |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in points:
        block = f"{p.block_passed} of {p.block_driven}" if p.block_driven else "–"
        files = ", ".join(Path(f).name for f in p.files)
        lines.append(f"| {p.line} | {p.iteration} | {p.course_passed} of {p.course_driven} | {block} | {files} |")
    return "\n".join(lines) + "\n"


def plot(points: list[Point], out: Path, seed: int) -> Path:
    """Course share (and block share) against iteration, one colour per line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    most = max(p.course_driven for p in points)
    fig, (ax_course, ax_block) = plt.subplots(
        2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    for i, line in enumerate(dict.fromkeys(p.line for p in points)):
        color = f"C{i % 10}"
        mine = [p for p in points if p.line == line]
        its = [p.iteration for p in mine]
        ax_course.plot(its, [100 * p.course_share for p in mine], "-", color=color, alpha=0.5, label=line)
        for p in mine:
            full = p.course_driven == most
            ax_course.plot(
                p.iteration, 100 * p.course_share, "o", color=color, markerfacecolor=color if full else "white"
            )
        blocks = [p for p in mine if p.block_driven]
        if blocks:
            ax_block.plot(
                [p.iteration for p in blocks],
                [100 * p.block_passed / p.block_driven for p in blocks],
                "s-",
                color=color,
                alpha=0.7,
            )
    ax_course.set_ylabel("course drives passed (%)")
    ax_course.set_ylim(-3, 103)
    ax_course.grid(alpha=0.3)
    ax_course.legend(loc="lower left", fontsize=8)
    ax_course.set_title(
        f"Terrain course with the map, field {seed}: crossed without a fall at >= 0.8 x the command "
        f"(filled: {most} drives; hollow: fewer)",
        fontsize=9,
    )
    ax_block.set_ylabel("20 cm block (%)")
    ax_block.set_ylim(-5, 105)
    ax_block.set_xlabel("training iteration")
    ax_block.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _source(text: str) -> tuple[str | None, Path]:
    name, sep, path = text.partition("=")
    return (name, Path(path)) if sep and name and "/" not in name else (None, Path(text))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim2sim.screen_history",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="[NAME=]PATH",
        help="screen JSON files or run directories (their screen*.json); NAME: the line (default: the directory)",
    )
    p.add_argument("--seed", type=int, default=COURSE_SEED, help=f"the block field (default {COURSE_SEED})")
    p.add_argument("--out", type=Path, required=True, help="the plot to write (.png)")
    p.add_argument("--md", type=Path, default=None, help="also write the table here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        points = gather([_source(s) for s in args.sources], args.seed)
    except ScreenFileError as e:
        print(f"screen_history: error: {e}", file=sys.stderr)
        return 1
    if not points:
        print(f"screen_history: error: no course drives on field {args.seed} in these screens", file=sys.stderr)
        return 1
    text = table(points, args.seed)
    print(text, end="")
    if args.md is not None:
        args.md.write_text(text)
    print(f"wrote {plot(points, args.out, args.seed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
