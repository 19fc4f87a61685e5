#!/usr/bin/env bash
# Trains the reference policies of policies/: N-P3O on aow_flat and, for comparison, PPO with
# Table I's constraint rewards, same budget, same seed, side by side on one machine.
#
#   policies/train_reference.sh OUT_DIR [MINUTES] [NUM_ENVS] [DEVICE]
#
# Each run gets half of the CPU cores for its MuJoCo thread pool. DEVICE (default: cuda when a
# GPU is visible, else cpu) is where the networks and the MDP tensors live; the physics always
# runs on CPU threads. The final checkpoint, config and metrics of each run are copied to OUT_DIR.
set -euo pipefail
out=${1:?usage: train_reference.sh OUT_DIR [MINUTES] [NUM_ENVS] [DEVICE]}
minutes=${2:-7}
envs=${3:-2048}
py=${PYTHON:-python3}
device=${4:-$($py -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}
threads=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 - 1 : 1 ))
work=${WORK_DIR:-/tmp/aow_reference_runs}
mkdir -p "$out" "$work"

if [ "$device" = cuda ]; then
  # A one-iteration smoke test: fall back to CPU learning if the CUDA path fails here.
  if ! timeout 180 $py -m training.train --task aow_flat --algo np3o --num-envs 256 --iterations 1 \
      --device cuda --run-dir "$work/smoke" --no-progress --no-tensorboard; then
    echo "CUDA smoke test failed: learning on cpu" >&2
    device=cpu
  fi
fi
echo "device=$device threads_per_run=$threads envs=$envs minutes=$minutes"

common=(--task aow_flat --num-envs "$envs" --iterations 100000 --seed 0 --max-minutes "$minutes"
        --device "$device" --save-interval 25 --no-progress --env-override "sim.num_threads=$threads")
$py -m training.train "${common[@]}" --algo np3o --run-dir "$work/aow_flat_np3o" &
p1=$!
$py -m training.train "${common[@]}" --algo ppo --env-override rewards.constraint_rewards=true \
    --run-dir "$work/aow_flat_ppo" &
p2=$!
wait $p1 $p2

for run in aow_flat_np3o aow_flat_ppo; do
  mkdir -p "$out/$run"
  last=$(ls -v "$work/$run"/model_*.pt | tail -1)
  cp "$last" "$out/$run/$(basename "$last")"
  cp "$work/$run/config.yaml" "$work/$run/metrics.jsonl" "$out/$run/"
done
