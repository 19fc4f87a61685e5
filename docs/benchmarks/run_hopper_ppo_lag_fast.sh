#!/usr/bin/env bash
# PPO-Lagrangian with a faster multiplier (lambda_lr 0.035 instead of the paper's 0.001; the number
# is OmniSafe's, whose lambda follows the per-episode cost, so only the order of magnitude carries
# over), one seed, same setting as run_hopper.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/bench_hopper}
export PYTHONWARNINGS=ignore::DeprecationWarning
nice -n 19 .venv/bin/aow-compare --task gym:AoWSafetyHopperVelocity-v1 --seeds 1 --iterations 150 --num-envs 32 \
    --steps-per-env 64 --cost-limit 25 --jobs 1 --threads 1 --algos ppo_lag \
    --algo-set ppo_lag:lambda_lr=0.035 --out "$OUT/ppo_lag_fast"
