#!/usr/bin/env bash
# The command that made docs/benchmarks/walker2d/ and docs/benchmarks/ant/: as run_hopper.sh (N-P3O
# with kappa_adapt = 0.05, then all seven algorithms at their defaults; cost limit 25 per 1000-step
# episode; 150 iterations of 32 envs x 64 steps = 307,200 steps per run), seed by seed so that a
# run cut short has every algorithm on the same seeds.
# Usage: docs/benchmarks/run_walker2d_ant.sh Walker2d|Ant   (one core; run both side by side)
# Resumable: run it again and finished runs are reused, interrupted ones resumed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROBOT=${1:?usage: $0 Walker2d|Ant}
OUT=${OUT:-runs/bench_$(echo "$ROBOT" | tr '[:upper:]' '[:lower:]')}
COMMON=(--task "gym:AoWSafety${ROBOT}Velocity-v1" --iterations 150 --num-envs 32 --steps-per-env 64
        --cost-limit 25 --jobs 1 --threads 1)
export PYTHONWARNINGS=ignore::DeprecationWarning
for seeds in 1 2 3; do
  nice -n 19 .venv/bin/aow-compare "${COMMON[@]}" --seeds "$seeds" --algos np3o --algo-set np3o:kappa_adapt=0.05 \
    --out "$OUT/np3o_adapt"
  # the paper's kappa schedule for N-P3O and P3O (kappa_adapt is on by default with a positive limit)
  nice -n 19 .venv/bin/aow-compare "${COMMON[@]}" --seeds "$seeds" --algos ppo,p3o,np3o,ppo_lag,nipo,crpo,focops \
    --algo-set np3o:kappa_adapt=0 --algo-set p3o:kappa_adapt=0 --out "$OUT/all"
done
