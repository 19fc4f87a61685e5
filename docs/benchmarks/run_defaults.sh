#!/usr/bin/env bash
# Issue 21, item 2: N-P3O and P3O at their defaults (kappa adapted with a positive limit), on
# Ant with the smaller initial action noise the Ant section names (network.init_noise_std=0.3),
# then P3O on Hopper and Walker2d (N-P3O's default there is the np3o_adapt rows already made).
# Cost limit 25 per 1000-step episode; 150 iterations of 32 envs x 64 steps = 307,200 steps per
# run, seed by seed so that a stretch cut short has both algorithms on the same seeds.
# Resumable: run it again and finished runs are reused, interrupted ones resumed.
# One core: about 6 minutes per run, 15 runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
NICE=${NICE:-19}
COMMON=(--iterations 150 --num-envs 32 --steps-per-env 64 --cost-limit 25 --jobs 1 --threads 1)
export PYTHONWARNINGS=ignore::DeprecationWarning
for seeds in 1 2 3; do
  nice -n "$NICE" .venv/bin/aow-compare "${COMMON[@]}" --task gym:AoWSafetyAntVelocity-v1 --seeds "$seeds" \
    --algos np3o,p3o --set network.init_noise_std=0.3 --out runs/bench_ant/defaults_noise03
done
# The unconstrained reference at the same noise: is the limit binding at all?
nice -n "$NICE" .venv/bin/aow-compare "${COMMON[@]}" --task gym:AoWSafetyAntVelocity-v1 --seeds 3 --algos ppo \
  --set network.init_noise_std=0.3 --out runs/bench_ant/ppo_noise03
for robot in Hopper Walker2d; do
  for seeds in 1 2 3; do
    nice -n "$NICE" .venv/bin/aow-compare "${COMMON[@]}" --task "gym:AoWSafety${robot}Velocity-v1" \
      --seeds "$seeds" --algos p3o --out "runs/bench_$(echo "$robot" | tr '[:upper:]' '[:lower:]')/p3o_default"
  done
done
