"""Environment throughput against bare physics stepping, in the same run.

``python -m bench.env_throughput --task aow_flat --num-envs 256 --json``

Measures env steps per second of the full environment (``env.step``: targets, physics, state
gathering, commands, terminations, rewards, costs, observations, resets) and physics steps per
second of the same simulator backend stepping the same envs with its thread pool and nothing
else (``step_physics_only``: no gathering, no MDP). Each bare block replays the env block just
timed: same start states, same joint targets, so both do the same physics work (fallen robots
cost more than standing ones). Short blocks of both alternate, so load from other processes
hits both alike; the reported ``ratio`` is the median of the per-pair ratios (goal
>= 0.8: the MDP and data gathering cost at most a quarter of the physics). Rates are policy steps
of one environment (each = ``decimation`` physics steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from tqdm import tqdm

from training.envs import TASKS, make_env


def measure(task: str, num_envs: int, steps: int, repeats: int, warmup: int, threads: int | None, seed: int) -> dict:
    overrides = {"sim": {"num_threads": threads}} if threads else {}
    build_start = time.perf_counter()
    env = make_env(task, num_envs, seed=seed, **overrides)
    build_s = time.perf_counter() - build_start
    try:
        gen = torch.Generator().manual_seed(seed)
        # Policy-like actions, drawn before timing: the benchmark times the environment, not randn.
        actions = [0.3 * torch.randn(num_envs, env.num_actions, generator=gen) for _ in range(steps)]
        env.reset()
        for k in range(warmup):
            env.step(actions[k % steps])
        sim = env.sim
        env_rates, phys_rates = [], []
        for _ in tqdm(range(repeats), desc=f"{task} x{num_envs}", file=sys.stderr, leave=False):
            start_states, start_time = sim.save_states(), sim._expected_time.copy()
            targets = []
            start = time.perf_counter()
            for a in actions:
                env.step(a)
                targets.append(sim._ctrl[:, sim._act_ids].copy())  # ~0.01 ms, inside the env's time
            env_rates.append(steps * num_envs / (time.perf_counter() - start))
            # Replay the same physics from the same states with the same targets, bare.
            end_states, end_time = sim.save_states(), sim._expected_time.copy()
            sim.load_states(start_states, start_time)
            start = time.perf_counter()
            for t in targets:
                sim.step_physics_only(t)
            phys_rates.append(steps * num_envs / (time.perf_counter() - start))
            sim.load_states(end_states, end_time)
        ratios = [e / p for e, p in zip(env_rates, phys_rates, strict=True)]
        return {
            "task": task,
            "backend": "mujoco",
            "num_envs": num_envs,
            "threads": env.sim.num_threads,
            "steps_per_block": steps,
            "repeats": repeats,
            "env_steps_per_s": round(statistics.median(env_rates), 1),
            "physics_steps_per_s": round(statistics.median(phys_rates), 1),
            "ratio": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "build_s": round(build_s, 2),
            "torch_threads": torch.get_num_threads(),
        }
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--task", default="aow_flat", choices=sorted(TASKS))
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=None, help="policy steps per timed block (default 10, quick 5)")
    p.add_argument("--repeats", type=int, default=None, help="env/physics block pairs (default 20, quick 6)")
    p.add_argument("--threads", type=int, default=None, help="MuJoCo thread pool size (default: all usable CPUs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small run, under a minute")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line of stdout")
    args = p.parse_args(argv)
    if args.num_envs < 1:
        p.error("--num-envs must be at least 1")
    steps = args.steps or (5 if args.quick else 10)
    repeats = args.repeats or (6 if args.quick else 20)
    result = measure(args.task, args.num_envs, steps, repeats, warmup=5, threads=args.threads, seed=args.seed)
    result["quick"] = args.quick
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['task']} ({result['num_envs']} envs, {result['threads']} threads): "
            f"env {result['env_steps_per_s']:.0f} steps/s, bare physics {result['physics_steps_per_s']:.0f} steps/s, "
            f"ratio {result['ratio']:.2f} (min {result['ratio_min']:.2f}, max {result['ratio_max']:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
