"""Single-observation policy latency: PolicyRunner (ONNX Runtime, one thread) vs PyTorch eager.

The paper-sized perceptive policy (56 proprioceptive values + 187-point height scan -> 16
actions; encoder 128-64, body 256-64) is written as a checkpoint with random weights, exported
with ``aow-export`` (verification included) and timed call by call. Both sides get a numpy
float32 vector and return a numpy action vector; PyTorch runs with one thread and
``inference_mode`` (more threads only add overhead at batch size 1). Rounds alternate between
the sides so that load from other processes on this shared CPU hits both alike; percentiles are
over all calls pooled, per-round p50/p99 are printed as well. A plain ``session.run`` on the
same model and options is timed too, as the reference for what the runner adds.

    python -m bench.inference [--calls N] [--rounds R] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from aow_policy.policy import PolicyRunner, session_options
from aow_policy.robot import load_robot
from export.checkpoint_source import load_policy_source
from export.pipeline import export_policy
from export.synthetic import write_synthetic_checkpoint


def time_calls(fn: Callable[[np.ndarray], np.ndarray], observations: np.ndarray, calls: int) -> np.ndarray:
    """Per-call latency in microseconds; observations cycle so no call sees a cached input."""
    clock = time.perf_counter_ns
    out = np.empty(calls, dtype=np.float64)
    n = len(observations)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection pause would be charged to whichever side happens to run
    try:
        for i in range(calls):
            obs = observations[i % n]
            t0 = clock()
            fn(obs)
            out[i] = clock() - t0
    finally:
        if gc_was_enabled:
            gc.enable()
    return out / 1000.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inference", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20_000, help="timed calls per side per round")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (ONNX, PyTorch, ONNX, ...)")
    p.add_argument("--warmup", type=int, default=2_000, help="untimed calls per side before timing")
    p.add_argument("--quick", action="store_true", help="10,000 calls per side in 2 rounds (well under a minute)")
    p.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.rounds, args.warmup = 5_000, 2, 1_000

    torch.set_num_threads(1)
    robot = load_robot()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_synthetic_checkpoint(Path(tmp) / "model_0.pt", robot)
        result = export_policy(checkpoint, Path(tmp) / "policy.onnx", robot, rollout_steps=0, log=lambda _: None)
        runner = PolicyRunner.load(result.onnx_path, robot)
        actor = load_policy_source(checkpoint).actor
        bare = ort.InferenceSession(str(result.onnx_path), session_options(), providers=["CPUExecutionProvider"])

    def torch_call(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return actor(torch.from_numpy(obs).unsqueeze(0))[0].numpy()

    # Reference: ONNX Runtime's plain session.run on the same file and options, to show what the
    # runner itself adds (buffer copy, IOBinding, finiteness check).
    def bare_call(obs: np.ndarray) -> np.ndarray:
        return bare.run(None, {"obs": obs[None]})[0][0]

    observations = np.random.default_rng(0).standard_normal((256, runner.obs_dim)).astype(np.float32)
    np.testing.assert_allclose(runner(observations[0]), torch_call(observations[0]), atol=1e-5)
    for fn in (runner, bare_call, torch_call):
        time_calls(fn, observations, args.warmup)

    onnx_rounds, bare_rounds, torch_rounds = [], [], []
    for _ in range(args.rounds):
        onnx_rounds.append(time_calls(runner, observations, args.calls))
        bare_rounds.append(time_calls(bare_call, observations, args.calls))
        torch_rounds.append(time_calls(torch_call, observations, args.calls))
    onnx_t, bare_t, torch_t = (np.concatenate(r) for r in (onnx_rounds, bare_rounds, torch_rounds))

    def pct(t: np.ndarray, q: float) -> float:
        return round(float(np.percentile(t, q)), 2)

    report = {
        "onnx_p50_us": pct(onnx_t, 50),
        "onnx_p99_us": pct(onnx_t, 99),
        "torch_p50_us": pct(torch_t, 50),
        "torch_p99_us": pct(torch_t, 99),
        "speedup": round(float(np.percentile(torch_t, 50) / np.percentile(onnx_t, 50)), 2),
        "bare_ort_p50_us": pct(bare_t, 50),
        "bare_ort_p99_us": pct(bare_t, 99),
        "onnx_p99_us_per_round": [pct(t, 99) for t in onnx_rounds],
        "onnx_p50_us_per_round": [pct(t, 50) for t in onnx_rounds],
        "torch_p50_us_per_round": [pct(t, 50) for t in torch_rounds],
        "calls_per_side": len(onnx_t),
        "obs_dim": runner.obs_dim,
        "num_actions": runner.num_actions,
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    print(
        f"policy {runner.obs_dim} -> {runner.num_actions}, {len(onnx_t)} calls per side in {args.rounds} rounds\n"
        f"  PolicyRunner (ONNX Runtime, 1 thread): p50 {report['onnx_p50_us']} us, p99 {report['onnx_p99_us']} us\n"
        f"  bare session.run (same options):       p50"
        f" {report['bare_ort_p50_us']} us, p99 {report['bare_ort_p99_us']} us\n"
        f"  PyTorch eager (1 thread):              p50 {report['torch_p50_us']} us, p99 {report['torch_p99_us']} us\n"
        f"  speedup (p50): {report['speedup']}x; ONNX p99 per round: {report['onnx_p99_us_per_round']}"
    )
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
