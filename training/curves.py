"""``python -m training.curves RUN_DIR [RUN_DIR ...] --out curves.png``: training curves of runs.

One figure, four panels against iterations (or, with ``--x steps``, environment steps: runs that
changed their number of environments on resume, per ``segments.jsonl``, stay comparable), one line
per run: episode reward; the task-reward
terms (velocity and yaw-rate tracking, per episode); violations per episode of every constraint
(summed; per constraint with ``--per-constraint``, limited to some with ``--constraints``);
episode length. Runs on rough terrain (a terrain curriculum) get a third row: the mean terrain
level, and the level of each sub-terrain kind (stairs lag behind the mean); runs that log what
ended their episodes, one more panel: the share of ending episodes by each failure (a trip, a
contact, a fall). One colour per run;
with several runs, one line style per constraint or kind. Read from each run's ``metrics.jsonl``
(written by the runner), so it works on finished, running and copied runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from aow_policy.fileio import atomic_output
from training.compare import read_metrics
from training.run_files import RunFileError, env_steps

PANELS = (
    ("mean_reward", "episode reward"),
    ("tracking", "tracking reward per episode"),
    ("violations", "violations per episode"),
    ("mean_episode_length", "episode length (policy steps)"),
)
# The third row, drawn only where a run has a terrain curriculum.
TERRAIN_PANELS = (
    ("episode/terrain_level", "terrain level (mean over robots)"),
    ("terrain_kinds", "terrain level per sub-terrain kind"),
)
KIND_PREFIX = "episode/terrain_level/"
# Drawn where the runs log what ended their episodes: the failures (time-outs left out).
ENDS_PANEL = (("ends", "share of ending episodes, by cause"),)
ENDS_PREFIX = "episode/ends/"
STYLES = ("-", "--", ":", "-.", (0, (1, 1)), (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average ignoring NaN (the first points average what exists)."""
    if window <= 1 or values.size == 0:
        return values
    ok = np.isfinite(values)
    sums = np.cumsum(np.where(ok, values, 0.0))
    counts = np.cumsum(ok)
    sums[window:] = sums[window:] - sums[:-window]
    counts[window:] = counts[window:] - counts[:-window]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def series(records: list[dict[str, float]], key: str) -> np.ndarray:
    return np.array([r.get(key, np.nan) for r in records], dtype=float)


def _plot_family(ax, x, records, prefix: str, window: int, color, name: str, skip: tuple[str, ...] = ()) -> None:
    """One line per metric under ``prefix`` (a terrain kind, an episode-ending cause), one style each."""
    keys = sorted({k for r in records for k in r if k.startswith(prefix)} - {prefix + s for s in skip})
    for i, k in enumerate(keys):
        style = STYLES[i % len(STYLES)]
        ax.plot(x, smooth(series(records, k), window), linestyle=style, color=color, label=f"{name} {k[len(prefix) :]}")


def plot_runs(
    runs: dict[str, list[dict[str, float]]],
    out: Path,
    window: int = 10,
    per_constraint: bool = False,
    constraints: list[str] | None = None,
    x_values: dict[str, np.ndarray] | None = None,
) -> Path:
    """``x_values``: each run's x coordinates (environment steps) in place of its iterations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    terrain = any("episode/terrain_level" in r for records in runs.values() for r in records)
    ends = any(k.startswith(ENDS_PREFIX) for records in runs.values() for r in records for k in r)
    panels = PANELS + (TERRAIN_PANELS if terrain else ()) + (ENDS_PANEL if ends else ())
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.5 * rows), sharex=True, squeeze=False)
    if len(panels) % 2:
        axes[-1, -1].set_visible(False)
        axes[-2, -1].xaxis.set_tick_params(labelbottom=True)  # the column's last panel: its own ticks
    styles = STYLES
    for (key, label), ax in zip(panels, axes.ravel(), strict=False):
        for run_index, (name, records) in enumerate(runs.items()):
            x = series(records, "iteration") if x_values is None else x_values[name] / 1e6
            color = f"C{run_index % 10}" if len(runs) > 1 else None
            if key == "tracking":
                for term, style in (("episode/rew/lin_vel", "-"), ("episode/rew/yaw_rate", "--")):
                    term_label = f"{name} {term.rsplit('/', 1)[1]}"
                    ax.plot(x, smooth(series(records, term), window), style, color=color, label=term_label)
            elif key == "violations":
                names = sorted({k for r in records for k in r if k.startswith("episode/violations/")})
                if constraints is not None:
                    names = [k for k in names if k.rsplit("/", 1)[1] in constraints]
                if per_constraint:
                    for i, k in enumerate(names):
                        style = styles[i % len(styles)] if color else "-"
                        ax.plot(
                            x,
                            smooth(series(records, k), window),
                            style,
                            color=color,
                            label=f"{name} {k.rsplit('/', 1)[1]}",
                        )
                else:
                    total = np.nansum([series(records, k) for k in names], axis=0) if names else x * np.nan
                    ax.plot(x, smooth(total, window), color=color, label=name)
            elif key == "terrain_kinds":
                _plot_family(ax, x, records, KIND_PREFIX, window, color, name)
            elif key == "ends":
                _plot_family(ax, x, records, ENDS_PREFIX, window, color, name, skip=("time_out",))
            elif key in (k for k, _ in TERRAIN_PANELS) and not any(key in r for r in records):
                continue  # a flat run beside rough ones: nothing to draw here
            else:
                ax.plot(x, smooth(series(records, key), window), color=color, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # runs from before the per-kind levels have none
            ax.legend(fontsize=7)
    for ax in (axes[-1, 0], axes[-1, 1] if len(panels) % 2 == 0 else axes[-2, 1]):
        ax.set_xlabel("iteration" if x_values is None else "environment steps (millions)")
    fig.suptitle(f"training curves ({window}-iteration moving average)")
    fig.tight_layout()
    try:
        with atomic_output(out, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.curves", description=__doc__.split("\n\n")[1].replace("\n", " ")
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (NAME=DIR to label one)")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--window", type=int, default=10, help="moving-average window in iterations (default 10)")
    p.add_argument("--per-constraint", action="store_true", help="one violation line per constraint")
    p.add_argument(
        "--x",
        choices=("iterations", "steps"),
        default="iterations",
        help="x axis: iterations (default) or environment steps (from segments.jsonl: runs resumed with "
        "another number of environments stay comparable)",
    )
    p.add_argument(
        "--constraints", help="comma-separated constraints to draw (default all), e.g. joint_speed,joint_torque"
    )
    args = p.parse_args(argv)
    constraints = [c.strip() for c in args.constraints.split(",") if c.strip()] if args.constraints else None
    runs, dirs = {}, {}
    for item in args.runs:
        name, sep, path = str(item).partition("=")
        run_dir = Path(path) if sep else item
        try:
            runs[name if sep else run_dir.name] = read_metrics(run_dir)
            dirs[name if sep else run_dir.name] = run_dir
        except (FileNotFoundError, RunFileError) as e:
            print(f"training.curves: error: {e}", file=sys.stderr)
            return 2
    known = {k.rsplit("/", 1)[1] for records in runs.values() for r in records for k in r if "violations/" in k}
    unknown = sorted(set(constraints or ()) - known)
    if unknown:
        print(f"training.curves: error: unknown constraint(s) {unknown} (known: {sorted(known)})", file=sys.stderr)
        return 2
    x_values = None
    if args.x == "steps":
        x_values = {name: env_steps(dirs[name], series(records, "iteration")) for name, records in runs.items()}
    print(f"wrote {plot_runs(runs, args.out, args.window, args.per_constraint, constraints, x_values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
