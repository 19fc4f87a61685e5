#!/usr/bin/env bash
# The command that made docs/benchmarks/hopper/: N-P3O with kappa_adapt = 0.05, then all seven
# algorithms at their defaults, 3 seeds each, on AoWSafetyHopperVelocity-v1 with a cost limit of
# 25 per 1000-step episode; 150 iterations of 32 envs x 64 steps = 307,200 steps per run.
# Resumable: run it again and finished runs are reused, interrupted ones resumed. ITERATIONS (default
# 150) sets the budget, OUT (default runs/bench_hopper) where the runs go.
# On the 2-core build machine (shared with other jobs), one core: about 70 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/bench_hopper}
COMMON=(--task gym:AoWSafetyHopperVelocity-v1 --seeds 3 --iterations "${ITERATIONS:-150}" --num-envs 32 --steps-per-env 64
        --cost-limit 25 --jobs 1 --threads 1)
export PYTHONWARNINGS=ignore::DeprecationWarning
nice -n 19 .venv/bin/aow-compare "${COMMON[@]}" --algos np3o --algo-set np3o:kappa_adapt=0.05 --out "$OUT/np3o_adapt"
# The paper's settings for every algorithm: N-P3O's and P3O's kappa on the paper's schedule alone
# (kappa_adapt is on by default with a positive limit since these runs were made).
nice -n 19 .venv/bin/aow-compare "${COMMON[@]}" --algos ppo,p3o,np3o,ppo_lag,nipo,crpo,focops \
    --algo-set np3o:kappa_adapt=0 --algo-set p3o:kappa_adapt=0 --out "$OUT/all"
