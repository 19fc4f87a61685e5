"""Should N-P3O's kappa come down once the limit holds with margin, over a long run? (issue 21)

    nice -n 5 .venv/bin/python docs/benchmarks/kappa_decrease_hopper.py [ARM ...]

The toy CMDP's answer (``kappa_decrease.py``: no) came from 0.6 M-step runs whose cost sat at the
limit. Hopper at the defaults (``run_long_default.sh``: 3.07 M steps, cost limit 25 per 1000-step
episode) ends far inside its limit with kappa at its cap, the case a decrease is meant for. This
trains the same configuration (AoWSafetyHopperVelocity-v1, 32 envs x 64 steps, 1,500 iterations,
seed 0, the default networks) with the decrease of ``kappa_decrease.py``, now the opt-in
``algo_params.kappa_relax_margin``: after a rollout whose sampled constraint estimate is below (1 -
margin) eps, kappa's scale is divided by 1 + kappa_adapt (never below the schedule). (The runs of
session 16 were made with a subclass of the same arithmetic, before the option existed.) Arms:
``relax_margin`` (margin 0.2, the default) and ``relax_always`` (margin 0). The raise-only arm is
the default run of ``run_long_default.sh`` (runs/bench_hopper/np3o_default_3m). One process, one
thread; each arm's run directory goes to runs/bench_hopper/kappa_decrease_3m/<arm>, the curves and
summaries to OUT/results.json (docs/benchmarks/kappa_decrease_hopper/ by default).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.compare import read_metrics
from training.config import TrainConfig
from training.runner import Runner

COST_LIMIT = 25.0  # per 1000-step episode, Safety-Gymnasium's
ITERATIONS = 1500
FINAL_WINDOW = 150  # the last 10 %
STEPS_PER_ITERATION = 32 * 64
MARGINS = {"relax_margin": 0.2, "relax_always": 0.0}
RUNS = Path("runs/bench_hopper/kappa_decrease_3m")
RAISE_ONLY = Path("runs/bench_hopper/np3o_default_3m/runs/np3o_s0")


def config(margin: float | None) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "task": "gym:AoWSafetyHopperVelocity-v1",
            "algo": "np3o",
            "num_envs": 32,
            "num_steps_per_env": 64,
            "iterations": ITERATIONS,
            "seed": 0,
            "episode_cost_limit": COST_LIMIT,
            "algo_params": {"kappa_relax_margin": margin},
        }
    )


def curves_of(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    curves = {
        "return": [r.get("mean_reward", float("nan")) for r in rows],  # nan: no episode ended
        "cost_per_episode": [r.get("episode/cost/cost", float("nan")) for r in rows],
        "episode_length": [r.get("mean_episode_length", float("nan")) for r in rows],
        "kappa": [r.get("kappa_eff/cost", r["kappa"]) for r in rows],
    }
    return {key: [round(float(v), 4) for v in values] for key, values in curves.items()}


def summary(curves: dict[str, list[float]]) -> dict[str, float]:
    final = {k: float(np.nanmean(v[-FINAL_WINDOW:])) for k, v in curves.items()}
    second_half = np.asarray(curves["cost_per_episode"][ITERATIONS // 2 :])
    second_half = second_half[np.isfinite(second_half)]
    return {
        "final_return": final["return"],
        "final_cost_per_episode": final["cost_per_episode"],
        "final_episode_length": final["episode_length"],
        "final_kappa": final["kappa"],
        "second_half_cost_per_episode": float(np.mean(second_half)),
        "second_half_share_over_limit": float(np.mean(second_half > COST_LIMIT)),
    }


def train(arm: str) -> list[dict[str, Any]]:
    run_dir = RUNS / arm
    resume = any(run_dir.glob("model_*.pt"))
    runner = Runner(config(MARGINS[arm]), run_dir, resume=resume, progress=False, tensorboard=False)
    if runner.iteration < ITERATIONS:
        runner.learn()
    return read_metrics(run_dir)


def plot(results: dict[str, Any], path: Path) -> None:
    """Return, cost per episode (with the limit), kappa and episode length against steps, smoothed
    over 25 iterations, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("return", "return"), ("cost_per_episode", "cost per episode"), ("kappa", "κ (effective)"),
              ("episode_length", "episode length (steps)")]  # fmt: skip
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for arm, run in results["runs"].items():
        for ax, (key, _) in zip(axes, panels, strict=True):
            values = np.asarray(run["curves"][key], dtype=float)
            steps = (np.arange(values.size) + 1) * STEPS_PER_ITERATION / 1e6
            kernel = np.ones(25) / 25
            filled = np.where(np.isfinite(values), values, np.nanmean(values))
            ax.plot(steps[24:], np.convolve(filled, kernel, mode="valid"), label=arm)
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_title(title)
        ax.set_xlabel("env steps (M)")
        ax.grid(alpha=0.3)
    axes[1].axhline(COST_LIMIT, color="k", ls="--", lw=1, label="limit")
    axes[1].legend()
    fig.suptitle("N-P3O on AoWSafetyHopperVelocity-v1, limit 25 per episode, seed 0: κ raised only vs also lowered")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # no choices=: Python 3.11's argparse checks an empty nargs="*" list against them and refuses it
    p.add_argument("arms", nargs="*", help=f"arms to train, of {sorted(MARGINS)} (default: relax_margin)")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks/kappa_decrease_hopper"))
    p.add_argument("--plot-only", action="store_true", help="redraw OUT/curves.png from OUT/results.json")
    args = p.parse_args()
    unknown = sorted(set(args.arms) - set(MARGINS))
    if unknown:
        p.error(f"unknown arm(s) {unknown}: choose from {sorted(MARGINS)}")
    if args.plot_only:
        plot(json.loads((args.out / "results.json").read_text()), args.out / "curves.png")
        return
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    results.update(cost_limit_per_episode=COST_LIMIT, iterations=ITERATIONS, final_window=FINAL_WINDOW)
    if (RAISE_ONLY / "metrics.jsonl").is_file():
        curves = curves_of(read_metrics(RAISE_ONLY))
        results["runs"]["raise_only"] = {"summary": summary(curves), "curves": curves}
    for arm in args.arms or ["relax_margin"]:
        started = time.perf_counter()
        curves = curves_of(train(arm))
        run = {"summary": summary(curves), "seconds": time.perf_counter() - started, "curves": curves}
        results["runs"][arm] = run
        print(f"{arm}: {json.dumps(run['summary'])} ({run['seconds']:.0f} s)", flush=True)
        path.write_text(json.dumps(results) + "\n")
    for arm, run in results["runs"].items():
        print(arm, {k: round(v, 2) for k, v in run["summary"].items()})
    plot(results, args.out / "curves.png")


if __name__ == "__main__":
    main()
