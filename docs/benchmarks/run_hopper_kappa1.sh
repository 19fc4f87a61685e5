#!/usr/bin/env bash
# N-P3O with kappa held at 1 (kappa_init = kappa_max = 1, no growth), one seed, same setting as
# run_hopper.sh: the issue's second N-P3O variant, next to the defaults and kappa_adapt.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/bench_hopper}
export PYTHONWARNINGS=ignore::DeprecationWarning
nice -n 19 .venv/bin/aow-compare --task gym:AoWSafetyHopperVelocity-v1 --seeds 1 --iterations 150 --num-envs 32 \
    --steps-per-env 64 --cost-limit 25 --jobs 1 --threads 1 --algos np3o \
    --algo-set np3o:kappa_init=1 --algo-set np3o:kappa_growth=1 --algo-set np3o:kappa_adapt=0 --out "$OUT/np3o_kappa1"
