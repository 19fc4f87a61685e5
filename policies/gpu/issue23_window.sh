#!/usr/bin/env bash
# One lent-GPU window for issue 23 (the robot policies): four runs side by side on one GPU with
# MuJoCo Warp, each stopped by SIGTERM after DEADLINE_S seconds (aow-train then checkpoints the
# iteration in progress and exits 0), each run directory packed into OUT/<run>.tar.gz (the last
# checkpoint, config, metrics, segments, log) to be continued anywhere with --resume.
#
#   policies/gpu/issue23_window.sh OUT [DEADLINE_S]      # on the GPU machine, after the Warp install
#
# The runs: the legs-only ANYmal C with legged_gym's flat MDP (issue 23, 1a), the flat reference
# task with N-P3O (the appendix's kappa 0.1 -> 0.2) and with PPO + Table I's constraint rewards,
# and the rough-terrain reference task with N-P3O.
set -uo pipefail
out=${1:?usage: issue23_window.sh OUT [DEADLINE_S]}
deadline=${2:-450}
repo=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$repo:$repo/ros2_ws/src/aow_policy${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
work=${WORK_DIR:-/root/issue23_runs}
mkdir -p "$work" "$out"
flat_envs=${FLAT_ENVS:-4096}
rough_envs=${ROUGH_ENVS:-8192}
read -r -a placement <<< "${PLACEMENT:---device cuda --backend mujoco_warp}"  # PLACEMENT: for a dry run on a CPU
kappa=(--set algo_params.kappa_init=0.1 --set algo_params.kappa_max=0.2)
common=("${placement[@]}" --seed 0 --iterations 3000 --save-minutes 2 --no-progress --no-tensorboard)
(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 \
  > "$out/gpu_usage.csv" 2>&1) &
smi=$!
pids=()
start() {
  local name=$1; shift
  (cd "$repo" && timeout -s TERM -k 90 "$deadline" "${PYTHON:-python3}" -m training.train --run-dir "$work/$name" \
    "${common[@]}" "$@" > "$work/$name.log" 2>&1; echo "exit $?" >> "$work/$name.log") &
  pids+=($!)
}
start legs_legged_gym_ppo --task anymal_flat_legged_gym --algo ppo --num-envs "$flat_envs"
start flat_omni_np3o --task aow_flat_omni --algo np3o --num-envs "$flat_envs" "${kappa[@]}"
start flat_omni_ppo --task aow_flat_omni --algo ppo --num-envs "$flat_envs" --env-override rewards.constraint_rewards=true
start rough_omni_np3o --task aow_rough_omni --algo np3o --num-envs "$rough_envs" "${kappa[@]}"
wait "${pids[@]}"
pkill -P "$smi" 2>/dev/null; kill "$smi" 2>/dev/null
for dir in "$work"/*/; do
  name=$(basename "$dir")
  last=$(ls -t "$dir"/model_*.pt 2>/dev/null | head -1)
  tail -3 "$work/$name.log"
  files=(config.yaml metrics.jsonl segments.jsonl)
  [ -n "$last" ] && files+=("$(basename "$last")")
  cp "$work/$name.log" "$dir/train.log"
  files+=(train.log)
  tar -czf "$out/$name.tar.gz" -C "$work" $(for f in "${files[@]}"; do [ -e "$dir/$f" ] && echo "$name/$f"; done)
done
tar -czf "$out/warp_cache.tar.gz" -C /root/.cache warp 2>/dev/null
ls -la "$out"
