"""``aow-compare``: run several algorithms over several seeds and tabulate them like Table II.

    aow-compare --task anymal_flat_speed_limit --algos ppo,p3o,np3o,ppo_lag,nipo,crpo,focops \\
        --seeds 3 --iterations 1500 --out runs/compare

Each (algorithm, seed) trains in ``OUT/runs/<algo>_s<seed>`` with the same config apart from the
algorithm and seed; a run already finished there is reused and an interrupted one is resumed,
so a comparison can be continued by running the same command again. ``--max-minutes`` bounds one
such call (a session on a shared machine): the runs under way stop with a checkpoint when the time
is up, the ones not reached are not started, no table is written yet, and the same command
continues them later. SIGTERM or a first Ctrl-C ends a call the same way at once (with --jobs the
workers are told too). Results, once every run has reached its iterations:

- ``OUT/table.md``: final reward and violations per episode, mean (± standard deviation over
  seeds), one row per algorithm, as the paper's Table II. "Final" = the mean over the last
  ``--final-window`` iterations of each run (default: the last 10%).
- ``OUT/reward.png``, ``OUT/violations.png`` (and, where the runs record episode lengths,
  ``episode_length.png`` and ``violation_rate.png``: violations per 1000 policy steps, which does
  not reward falling early): learning curves against iterations, one line per algorithm (mean
  over seeds, shaded ± one standard deviation).
- ``OUT/results.json``: the same numbers per run and per algorithm.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from aow_policy.fileio import atomic_output, atomic_write_bytes
from training.algorithms import ALGORITHMS
from training.config import ConfigError, TrainConfig, apply_override
from training.run_files import RunFileError, read_jsonl
from training.train import COST_LIMIT_HELP, StopRequest

DISPLAY_NAMES = {
    "ppo": "PPO (unconstrained)",
    "p3o": "P3O",
    "np3o": "N-P3O",
    "ppo_lag": "PPO-Lagrangian",
    "nipo": "N-IPO",
    "crpo": "CRPO",
    "focops": "FOCOPS",
}
METRICS = {
    "reward": "mean_reward",
    "violations": "violations_per_episode",
    "episode_length": "mean_episode_length",
    "violation_rate": "violations_per_1000_steps",
}
# Violations per episode favour policies whose episodes end early (a robot that falls at once has
# no time to violate anything), so the table also gives them per 1000 policy steps: 20 s at 50 Hz,
# the length of a full episode in the paper.
RATE_STEPS = 1000
LABELS = {
    "reward": ("Reward", "episode reward"),
    "violations": ("Violations per episode", "violations per episode"),
    "episode_length": ("Episode length (steps)", "episode length (policy steps)"),
    "violation_rate": (f"Violations per {RATE_STEPS} steps", f"violations per {RATE_STEPS} policy steps"),
}


def run_dir_for(out: Path, algo: str, seed: int) -> Path:
    return out / "runs" / f"{algo}_s{seed}"


def train_one(
    cfg_dict: dict[str, Any],
    run_dir: str,
    threads: int | None,
    deadline: float | None = None,
    stop_requested: Callable[[], bool] | None = None,
) -> bool:
    """Train (or finish) one run; with ``deadline`` (a ``time.time()``), stop with a checkpoint after
    the first iteration that ends past it, and do not start at all once it has passed; the same
    once ``stop_requested()`` (SIGTERM, Ctrl-C). Returns whether the run reached its iterations."""
    import torch

    from training.runner import Runner

    if (deadline is not None and time.time() >= deadline) or (stop_requested is not None and stop_requested()):
        return _finished(cfg_dict, Path(run_dir))
    if threads:
        torch.set_num_threads(threads)
    cfg = TrainConfig.from_dict(cfg_dict)
    path = Path(run_dir)
    resume = any(path.glob("model_*.pt"))
    runner = Runner(cfg, path, resume=resume, progress=False)
    if runner.iteration < cfg.iterations:
        budget = None if deadline is None else max(0.0, deadline - time.time())
        runner.learn(time_budget_s=budget, stop_requested=stop_requested)
    return runner.iteration >= cfg.iterations


_worker_stopped = False  # in a --jobs worker: a stop arrived; no further run starts there


def _note_worker_stop(signum: int, frame: object) -> None:
    global _worker_stopped
    _worker_stopped = True


def _worker_init() -> None:
    """A --jobs worker between runs: a stop is noted, not fatal (the pool would break)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _note_worker_stop)


def _train_in_worker(cfg_dict: dict[str, Any], run_dir: str, threads: int | None, deadline: float | None) -> bool:
    """:func:`train_one` in a --jobs worker process, stopping with a checkpoint on SIGTERM (which
    the parent forwards) or Ctrl-C (which the terminal sends to every process of the group)."""
    global _worker_stopped
    if _worker_stopped:
        return _finished(cfg_dict, Path(run_dir))
    with StopRequest("aow-compare worker") as stop:
        done = train_one(cfg_dict, run_dir, threads, deadline, stop)
    _worker_stopped = _worker_stopped or stop()
    return done


def _stop_workers() -> None:
    """Forward a stop to the --jobs workers: each checkpoints the iteration in progress and ends."""
    import multiprocessing

    for worker in multiprocessing.active_children():
        worker.terminate()  # SIGTERM: the worker's StopRequest, not a kill


def _finished(cfg_dict: dict[str, Any], run_dir: Path) -> bool:
    """Whether ``run_dir`` holds the checkpoint of the config's last iteration."""
    return (run_dir / f"model_{cfg_dict['iterations']}.pt").is_file()


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl (did the run start?)")
    records = read_jsonl(path)  # skips the line a running trainer is writing (--so-far, curves)
    for r in records:
        length, violations = r.get("mean_episode_length"), r.get("violations_per_episode")
        if length and violations is not None and "violations_per_1000_steps" not in r:
            r["violations_per_1000_steps"] = violations / length * RATE_STEPS
    return records


def final_value(records: list[dict[str, float]], key: str, window: int) -> float:
    values = [r[key] for r in records[-window:] if key in r and math.isfinite(r[key])]
    return float(np.mean(values)) if values else float("nan")


def _mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def run_entry(run_dir: Path, window: int | None = None) -> dict[str, Any]:
    """One run's final values (the mean over ``window`` iterations, default its last 10 %) and
    its number of iterations: a row of the table, finished or not."""
    records = read_metrics(run_dir)
    w = window or max(1, len(records) // 10)
    entry: dict[str, Any] = {name: final_value(records, key, w) for name, key in METRICS.items()}
    entry["iterations"] = len(records)
    return entry


def summarize(out: Path, algos: list[str], seeds: list[int], window: int | None = None) -> dict[str, Any]:
    """Per-run final values and per-algorithm mean and standard deviation over seeds."""
    runs: dict[str, dict[str, Any]] = {}
    table: dict[str, dict[str, list[float]]] = {}
    for algo in algos:
        table[algo] = {}
        finals: dict[str, list[float]] = {name: [] for name in METRICS}
        for seed in seeds:
            entry = run_entry(run_dir_for(out, algo, seed), window)
            runs[f"{algo}_s{seed}"] = entry
            for name in METRICS:
                finals[name].append(entry[name])
        for name, values in finals.items():
            table[algo][name] = list(_mean_std(values))
    return {"runs": runs, "algorithms": table, "seeds": seeds}


def summarize_so_far(
    out: Path, algos: list[str], seeds: list[int], iterations: int, window: int | None = None
) -> dict[str, Any]:
    """:func:`summarize` for a comparison under way: the table over the finished runs only (each
    algorithm with the seeds it has finished), and every run begun with where it stands."""
    runs: dict[str, dict[str, Any]] = {}
    table: dict[str, dict[str, Any]] = {}
    for algo in algos:
        finals: dict[str, list[float]] = {name: [] for name in METRICS}
        done = []
        for seed in seeds:
            run_dir = run_dir_for(out, algo, seed)
            if not (run_dir / "metrics.jsonl").is_file():
                continue
            entry = run_entry(run_dir, window)
            entry["finished"] = (run_dir / f"model_{iterations}.pt").is_file()
            runs[f"{algo}_s{seed}"] = entry
            if entry["finished"]:
                done.append(seed)
                for name in METRICS:
                    finals[name].append(entry[name])
        table[algo] = {name: list(_mean_std(values)) for name, values in finals.items()}
        table[algo]["seeds_finished"] = done
    return {"runs": runs, "algorithms": table, "seeds": seeds, "iterations": iterations}


def markdown_so_far(summary: dict[str, Any], algos: list[str]) -> str:
    """The finished runs' table (with the seeds each mean is over), then the runs in progress at
    the iteration they reached: final values of a run still learning are a snapshot, not a result."""
    columns = list(METRICS)
    n = len(summary["seeds"])
    lines = [
        "| Algorithm | seeds finished | " + " | ".join(LABELS[m][0] for m in columns) + " |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for algo in algos:
        row = summary["algorithms"][algo]
        done = row["seeds_finished"]
        # "seed 0 (1 of 2)": a bare "0 (of 2)" read as no seed finished.
        seeds = f"seed{'s' if len(done) > 1 else ''} {', '.join(str(s) for s in done)}" if done else "none"
        # One finished seed has no spread to show: its value alone, not "± 0.00".
        one = len(done) == 1
        cells = " | ".join(f"{row[m][0]:.2f}" if one and math.isfinite(row[m][0]) else _cell(*row[m]) for m in columns)
        lines.append(f"| {DISPLAY_NAMES.get(algo, algo)} | {seeds} ({len(done)} of {n}) | {cells} |")
    lines += [
        "",
        "Mean (± standard deviation) over each algorithm's finished seeds of the final iterations"
        " (one seed: its value).",
        "",
    ]
    in_progress = {name: entry for name, entry in summary["runs"].items() if not entry["finished"]}
    if not in_progress:
        lines.append("No run in progress: the runs not in the table have not begun.")
        return "\n".join(lines) + "\n"
    lines += [
        f"Runs in progress (of {summary['iterations']} iterations), the last 10 % of what each has run:",
        "",
        "| run | iterations | " + " | ".join(LABELS[m][0] for m in columns) + " |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for name, entry in in_progress.items():
        cells = " | ".join("n/a" if not math.isfinite(entry[m]) else f"{entry[m]:.2f}" for m in columns)
        lines.append(f"| {name} | {entry['iterations']} | {cells} |")
    return "\n".join(lines) + "\n"


def _cell(mean: float, std: float) -> str:
    return "n/a" if not math.isfinite(mean) else f"{mean:.2f} (± {std:.2f})"


def markdown_table(summary: dict[str, Any], algos: list[str]) -> str:
    n = len(summary["seeds"])
    rows = summary["algorithms"]
    # Columns a run did not record (a Gymnasium task without episode lengths) are left out.
    columns = [m for m in METRICS if any(math.isfinite(rows[a][m][0]) for a in algos) or m in ("reward", "violations")]
    lines = [
        "| Algorithm | " + " | ".join(LABELS[m][0] for m in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for algo in algos:
        cells = " | ".join(_cell(*rows[algo][m]) for m in columns)
        lines.append(f"| {DISPLAY_NAMES.get(algo, algo)} | {cells} |")
    lines.append("")
    lines.append(f"Mean (± standard deviation) over {n} seed(s) of each run's final iterations.")
    return "\n".join(lines) + "\n"


def plot_curves(out: Path, algos: list[str], seeds: list[int]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    records = {(algo, seed): read_metrics(run_dir_for(out, algo, seed)) for algo in algos for seed in seeds}
    for name, key in METRICS.items():
        if name not in ("reward", "violations") and not any(key in r for rs in records.values() for r in rs):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for algo in algos:
            curves = [[r.get(key, float("nan")) for r in records[(algo, seed)]] for seed in seeds]
            length = min(len(c) for c in curves)
            data = np.asarray([c[:length] for c in curves], dtype=float)
            with np.errstate(all="ignore"):
                mean = np.nanmean(data, axis=0)
                std = np.nanstd(data, axis=0)
            x = np.arange(length)
            ax.plot(x, mean, label=DISPLAY_NAMES.get(algo, algo))
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        ax.set_xlabel("iteration")
        ax.set_ylabel(LABELS[name][1])
        ax.set_title(f"{LABELS[name][0]} ({len(seeds)} seed(s))")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / f"{name}.png"
        try:
            with atomic_output(path, suffix=".png") as tmp:
                fig.savefig(tmp, dpi=120)
        finally:
            plt.close(fig)
        paths.append(path)
    return paths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aow-compare",
        description="Train algorithms x seeds on one task; write a Table II-style markdown table and learning curves.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--task", required=True, help="task name, as for aow-train")
    p.add_argument("--algos", default=",".join(ALGORITHMS), help="comma-separated algorithms (default: all seven)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds, 0..N-1 (default 3)")
    p.add_argument("--iterations", type=int, required=True, help="learning iterations per run")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--num-envs", type=int, help="environments per run (default: the config's)")
    p.add_argument("--steps-per-env", type=int, help="rollout length per environment")
    p.add_argument("--device", help="cpu or cuda")
    p.add_argument(
        "--cost-limit",
        type=float,
        metavar="COST_PER_EPISODE",
        # algo_params.* is set per algorithm here (--set refuses it)
        help=f"{COST_LIMIT_HELP}. Here: --algo-set np3o:kappa_adapt=0 (and p3o:kappa_adapt=0)",
    )
    p.add_argument("--config", type=Path, help="base YAML config (a TrainConfig)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument(
        "--env-override", action="append", default=[], metavar="KEY=VALUE", help="task override (repeatable)"
    )
    p.add_argument(
        "--algo-set",
        action="append",
        default=[],
        metavar="ALGO:KEY=VALUE",
        help="parameter of one algorithm, e.g. ppo_lag:lambda_lr=0.05 (repeatable)",
    )
    p.add_argument("--final-window", type=int, help="iterations averaged for the final values (default: last 10%%)")
    p.add_argument("--jobs", type=int, default=1, help="runs trained in parallel processes (default 1)")
    p.add_argument("--threads", type=int, help="torch threads per run (default: torch's choice)")
    p.add_argument(
        "--max-minutes",
        type=float,
        help="stop after this many minutes: runs under way end with a checkpoint, runs not reached are not "
        "started, and the same command continues them (table.md is written once every run is done; until "
        "then table_so_far.md: the finished runs' table and where the others stand); SIGTERM or a first "
        "Ctrl-C stops the same way at once",
    )
    p.add_argument(
        "--so-far",
        action="store_true",
        help="train nothing: write table_so_far.md and results_so_far.json from the runs as they are, and print it",
    )
    return p


def run_configs(args: argparse.Namespace, algos: list[str], seeds: list[int]) -> dict[tuple[str, int], dict[str, Any]]:
    """Validated config of every run (before anything is trained)."""
    from training.config import load_config_yaml
    from training.runner import check_task

    if any(a.startswith("algo_params.") for a in args.set):
        raise ConfigError(
            "--set algo_params.*: algorithm parameters differ per algorithm; use --algo-set ALGO:KEY=VALUE"
        )
    per_algo: dict[str, list[str]] = {}
    for a in args.algo_set:
        algo, sep, assignment = a.partition(":")
        if not sep or algo not in ALGORITHMS:
            raise ConfigError(f"--algo-set {a!r}: expected ALGO:KEY=VALUE with ALGO one of {sorted(ALGORITHMS)}")
        per_algo.setdefault(algo, []).append(f"algo_params.{assignment}")
    base = load_config_yaml(args.config).to_dict() if args.config else TrainConfig().to_dict()
    base.update(task=args.task, iterations=args.iterations)
    for flag, field in (
        ("num_envs", "num_envs"),
        ("steps_per_env", "num_steps_per_env"),
        ("device", "device"),
        ("cost_limit", "episode_cost_limit"),
    ):
        if getattr(args, flag) is not None:
            base[field] = getattr(args, flag)
    for a in args.env_override:
        apply_override(base.setdefault("env_overrides", {}), a)
    configs = {}
    for algo in algos:
        data = {k: v for k, v in base.items() if k != "algo_params"}
        data.update(algo=algo)
        for a in [*args.set, *per_algo.get(algo, [])]:
            apply_override(data, a)
        for seed in seeds:
            cfg = TrainConfig.from_dict({**data, "seed": seed})
            cfg.validate()
            configs[(algo, seed)] = cfg.to_dict()
    check_task(args.task, base.get("env_overrides") or {})
    return configs


def _write_so_far(args: argparse.Namespace, algos: list[str], seeds: list[int]) -> str:
    so_far = summarize_so_far(args.out, algos, seeds, args.iterations, args.final_window)
    table = markdown_so_far(so_far, algos)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / "table_so_far.md", table.encode())
    atomic_write_bytes(args.out / "results_so_far.json", (json.dumps(so_far, indent=2) + "\n").encode())
    return table


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in algos if a not in ALGORITHMS]
    if unknown or not algos:
        print(f"aow-compare: error: --algos: unknown {unknown} (known: {sorted(ALGORITHMS)})", file=sys.stderr)
        return 2
    if args.seeds < 1 or args.jobs < 1:
        print("aow-compare: error: --seeds and --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.max_minutes is not None and not args.max_minutes > 0:
        print(f"aow-compare: error: --max-minutes must be positive, got {args.max_minutes}", file=sys.stderr)
        return 2
    deadline = None if args.max_minutes is None else time.time() + 60.0 * args.max_minutes
    seeds = list(range(args.seeds))
    try:
        configs = run_configs(args, algos, seeds)
    except ConfigError as e:
        print(f"aow-compare: error: {e}", file=sys.stderr)
        return 2
    if args.so_far:
        try:
            print(_write_so_far(args, algos, seeds), end="")
        except RunFileError as e:
            print(f"aow-compare: error: {e}", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm

    from training.runner import TrainingError

    # Seed-major order: a comparison stopped early still has every algorithm on the first seeds.
    order = sorted(configs, key=lambda key: (key[1], algos.index(key[0])))
    jobs = [(configs[key], str(run_dir_for(args.out, *key))) for key in order]
    configs_by_dir = {run_dir: cfg for cfg, run_dir in jobs}
    finished: dict[str, bool] = {}
    # SIGTERM or a first Ctrl-C: every run in progress ends with a checkpoint, none starts after.
    stop = StopRequest("aow-compare", on_stop=_stop_workers if args.jobs > 1 else None)
    try:
        with stop, tqdm(total=len(jobs), desc="aow-compare", unit="run") as bar:
            if args.jobs == 1:
                for cfg, run_dir in jobs:
                    bar.set_postfix_str(Path(run_dir).name)
                    finished[run_dir] = train_one(cfg, run_dir, args.threads, deadline, stop)
                    bar.update(1)
            else:
                with ProcessPoolExecutor(max_workers=args.jobs, initializer=_worker_init) as pool:
                    futures = {
                        run_dir: pool.submit(_train_in_worker, cfg, run_dir, args.threads, deadline)
                        for cfg, run_dir in jobs
                    }
                    for run_dir, future in futures.items():
                        if stop() and future.cancel():
                            finished[run_dir] = _finished(configs_by_dir[run_dir], Path(run_dir))
                            continue
                        finished[run_dir] = future.result()
                        bar.set_postfix_str(Path(run_dir).name)
                        bar.update(1)
    except TrainingError as e:
        print(f"aow-compare: error: {e}", file=sys.stderr)
        return 1
    unfinished = [run_dir for run_dir, done in finished.items() if not done]
    if unfinished:
        why = f"{stop.signal_name}: stopped" if stop() else f"time budget of {args.max_minutes:g} min reached"
        print(f"aow-compare: {why}; {len(unfinished)} of {len(jobs)} runs")
        for run_dir in unfinished:
            metrics = Path(run_dir) / "metrics.jsonl"
            reached = len(read_metrics(Path(run_dir))) if metrics.is_file() else 0
            print(f"  {Path(run_dir).name}: {reached} of {args.iterations} iterations")
        _write_so_far(args, algos, seeds)
        print(f"aow-compare: wrote {args.out / 'table_so_far.md'} (the finished runs; the others where they stand)")
        print("aow-compare: the same command continues them; table.md is written once all are done")
        return 0
    summary = summarize(args.out, algos, seeds, args.final_window)
    table = markdown_table(summary, algos)
    atomic_write_bytes(args.out / "table.md", table.encode())
    atomic_write_bytes(args.out / "results.json", (json.dumps(summary, indent=2) + "\n").encode())
    for stale in ("table_so_far.md", "results_so_far.json"):  # the snapshot of an earlier stretch
        (args.out / stale).unlink(missing_ok=True)
    print(table)
    pngs = ", ".join(path.name for path in plot_curves(args.out, algos, seeds))
    print(f"aow-compare: wrote {args.out / 'table.md'}, {pngs}, results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
