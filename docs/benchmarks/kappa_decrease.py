"""Should N-P3O's adaptive kappa also come down once the constraint holds with margin?

    nice -n 5 .venv/bin/python docs/benchmarks/kappa_decrease.py docs/benchmarks/kappa_decrease

Trains N-P3O on the toy CMDP ``toy_speed_limit`` (a point mass rewarded for 1.5 m/s; indicator
cost: 1 per step above 1 m/s) with a limit of 16 steps over the speed limit per 64-step episode
(``--cost-limit 16``: a quarter of the steps, eps = 25), so the reward pays to break the limit
and the constrained optimum sits on it. Arms, all with kappa_adapt = 0.05 unless named:

- ``paper``: kappa_adapt = 0, the paper's schedule alone;
- ``raise_only``: the toolkit's default (raise kappa after every violating rollout, never lower);
- ``relax_margin``: as ``raise_only``, and after every rollout whose sampled constraint estimate is
  below (1 - 0.2) eps, divide kappa's scale by 1 + kappa_adapt (never below the schedule's kappa);
- ``relax_always``: the same with margin 0 (lowered after every satisfied rollout), what a
  Lagrange multiplier does.

The decrease is the toolkit's opt-in ``algo_params.kappa_relax_margin`` (the runs in results.json
were made with the same arithmetic as a subclass of this script's, before the option existed; not
the default: docs/benchmarks.md gives the numbers, here and on Hopper over 3 M steps). One process, one thread;
per-run curves and the summary go to OUT/results.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.config import TrainConfig
from training.runner import Runner

COST_LIMIT = 16.0  # steps above 1 m/s per 64-step episode
ITERATIONS = 300
FINAL_WINDOW = 30  # the last 10 %
ARMS: dict[str, dict[str, Any]] = {
    "paper": {"kappa_adapt": 0.0, "relax_margin": None, "seeds": [0]},
    "raise_only": {"kappa_adapt": 0.05, "relax_margin": None, "seeds": [0, 1, 2]},
    "relax_margin": {"kappa_adapt": 0.05, "relax_margin": 0.2, "seeds": [0, 1, 2]},
    "relax_always": {"kappa_adapt": 0.05, "relax_margin": 0.0, "seeds": [0, 1]},
}


def config(arm: dict[str, Any], seed: int) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "task": "toy_speed_limit",
            "algo": "np3o",
            "num_envs": 32,
            "num_steps_per_env": 64,
            "iterations": ITERATIONS,
            "seed": seed,
            "episode_cost_limit": COST_LIMIT,
            "env_overrides": {"speed_cost": "indicator"},
            "network": {"actor_hidden": [64, 64], "critic_hidden": [64, 64], "cost_critic_hidden": [64]},
            "algo_params": {"kappa_adapt": arm["kappa_adapt"], "kappa_relax_margin": arm["relax_margin"]},
        }
    )


def train(arm: dict[str, Any], seed: int) -> dict[str, list[float]]:
    runner = Runner(config(arm, seed), progress=False, tensorboard=False)
    runner.learn()
    rows = runner.history
    curves = {
        "return": [r["mean_reward"] for r in rows],
        "cost_per_episode": [r["episode/cost/speed_limit"] for r in rows],
        "kappa": [r.get("kappa_eff/limits", r["kappa"]) for r in rows],
        "cost_return_sampled": [r["cost_return_sampled/limits"] for r in rows],
    }
    return {key: [round(v, 4) for v in values] for key, values in curves.items()}


def summary(curves: dict[str, list[float]]) -> dict[str, float]:
    final = {k: float(np.mean(v[-FINAL_WINDOW:])) for k, v in curves.items()}
    second_half = np.asarray(curves["cost_per_episode"][ITERATIONS // 2 :])
    return {
        "final_return": final["return"],
        "final_cost_per_episode": final["cost_per_episode"],
        "final_kappa": final["kappa"],
        "max_kappa": float(np.max(curves["kappa"])),
        "second_half_share_over_limit": float(np.mean(second_half > COST_LIMIT)),
        "second_half_cost_per_episode": float(np.mean(second_half)),
    }


def main(out: Path) -> None:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"cost_limit_per_episode": COST_LIMIT, "iterations": ITERATIONS, "runs": {}}
    # seed-major: an interrupted measurement still has every arm on the first seeds
    order = sorted(((seed, name) for name, arm in ARMS.items() for seed in arm["seeds"]), key=lambda k: k[0])
    for seed, name in order:
        started = time.perf_counter()
        curves = train(ARMS[name], seed)
        run = {"summary": summary(curves), "seconds": time.perf_counter() - started, "curves": curves}
        results["runs"][f"{name}_s{seed}"] = run
        print(f"{name} seed {seed}: {json.dumps(run['summary'])} ({run['seconds']:.0f} s)", flush=True)
        (out / "results.json").write_text(json.dumps(results) + "\n")
    for name, arm in ARMS.items():
        rows = [results["runs"][f"{name}_s{s}"]["summary"] for s in arm["seeds"]]
        means = {k: f"{np.mean([r[k] for r in rows]):.2f} ± {np.std([r[k] for r in rows]):.2f}" for k in rows[0]}
        print(name, means)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/benchmarks/kappa_decrease"))
