#!/usr/bin/env bash
# Issue 21, item 2: one run of at least 3 M steps at the defaults, to see whether the limit still
# holds at its end and what kappa does once it holds. N-P3O on AoWSafetyHopperVelocity-v1 with a
# cost limit of 25 per 1000-step episode (so kappa_adapt 0.05 by default), seed 0, 1,500 iterations
# of 32 envs x 64 steps = 3,072,000 steps; the 0.3 M-step runs of docs/benchmarks.md are its first
# tenth. Resumable: run it again and an interrupted run is resumed.
# One core to itself: about an hour; beside the robot training, longer.
set -euo pipefail
cd "$(dirname "$0")/../.."
NICE=${NICE:-5}
export PYTHONWARNINGS=ignore::DeprecationWarning
nice -n "$NICE" .venv/bin/aow-compare --task gym:AoWSafetyHopperVelocity-v1 --algos np3o --seeds 1 \
  --iterations 1500 --num-envs 32 --steps-per-env 64 --cost-limit 25 --jobs 1 --threads 1 \
  --out runs/bench_hopper/np3o_default_3m
