#!/usr/bin/env bash
# One lent-GPU window for issue 23 (the robot policies): the runs below side by side on one GPU
# with MuJoCo Warp, each stopped by SIGTERM after DEADLINE_S seconds (aow-train then checkpoints
# the iteration in progress and exits 0). Into OUT, per run: <run>.tar (config, metrics, segments,
# log, GPU use) and its last KEEP checkpoints as portable copies (training.slim_checkpoint: no saved
# simulation, about 3 MB for a rough run; a whole one at 16,384 envs is about 100 MB, over the
# 16 MiB a file that comes back from a lent machine). Untar, copy the checkpoints into the run
# directory and continue anywhere with --resume (the terrain levels carry over).
#
#   policies/gpu/issue23_window.sh OUT [DEADLINE_S]      # on the GPU machine, after the Warp install
#   policies/gpu/issue23_window.sh --spec NAME           # the flags run NAME would start with (a check)
#
# Check a window here before the GPU time is spent, with the Warp backend on the CPU (what the GPU
# runs, minus CUDA; session 23's window stopped at start-up on a resume this would have caught):
#   PLACEMENT="--device cpu --backend mujoco_warp" ROUGH_ENVS=16 FLAT_ENVS=16 RUNS=... \
#     PYTHON=.venv/bin/python policies/gpu/issue23_window.sh /tmp/window_check 600
#
# A run whose directory exists under RUNS_FROM (default policies/runs, the resume checkpoints
# committed at the end of each session) is resumed from its latest checkpoint with this machine's
# placement; any other run starts fresh. RUNS picks the runs (default: all of them below).
# Window 1 (2026-11-26, H200) ran legs_legged_gym_ppo, flat_omni_np3o, flat_omni_ppo and
# rough_omni_np3o fresh: 4 processes, about 190k env-steps/s together after 2.5 minutes of Warp
# compilation (docs/locomotion.md).
set -uo pipefail
out=${1:?usage: issue23_window.sh OUT [DEADLINE_S]}
deadline=${2:-450}
repo=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$repo:$repo/ros2_ws/src/aow_policy${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
work=${WORK_DIR:-/root/issue23_runs}
runs_from=${RUNS_FROM:-$repo/policies/runs}
flat_envs=${FLAT_ENVS:-4096}
rough_envs=${ROUGH_ENVS:-16384}  # one rough run alone on the GPU (measured: ~118k env-steps/s on an H200)
read -r -a placement <<< "${PLACEMENT:---device cuda --backend mujoco_warp}"  # PLACEMENT: for a dry run on a CPU
# Since session 23: the N-P3O rough line (its it. 1234 is shipped since session 24; the line goes
# on). The PPO line: rough_track_ppo (its it. 1600 shipped in session 22), and since session 27
# rough_track1600_ppo (its it. 1618 shipped), RUNS=rough_track1600_ppo.
read -r -a wanted <<< "${RUNS:-rough_sharp_np3o}"
kappa=(--set algo_params.kappa_init=0.1 --set algo_params.kappa_max=0.2)
moving="--env-override rewards.air_time_gate=moving"
constraint_rewards="--env-override rewards.constraint_rewards=true"
symmetric="--set network.symmetric_actor=true"
# Since session 10 (2026-11-27): sudden command reversals. The controller's joint-speed trip
# (--env-override terminations.joint_speed_trip=2.0) is a second stage from a walking checkpoint:
# a fresh policy trips within a few steps (policies/configs/aow_flat_np3o.yaml).
reversals="--env-override commands.reversal_share=0.2"
trip="--env-override terminations.joint_speed_trip=2.0"
common=(--save-minutes 2 --no-progress --no-tensorboard)

# name, envs, then the flags of a fresh run (task, algorithm, what it learns).
spec() {
  case $1 in
    legs_legged_gym_ppo) echo "$flat_envs --task anymal_flat_legged_gym --algo ppo" ;;
    flat_omni_np3o) echo "$flat_envs --task aow_flat_omni --algo np3o ${kappa[*]}" ;;
    flat_omni_ppo) echo "$flat_envs --task aow_flat_omni --algo ppo --env-override rewards.constraint_rewards=true" ;;
    rough_omni_np3o) echo "$rough_envs --task aow_rough_omni --algo np3o ${kappa[*]}" ;;
    flat_style_np3o) echo "$flat_envs --task aow_flat_style --algo np3o ${kappa[*]}" ;;
    # Since 2026-11-27 the style runs pay air time on every command but standing (gate moving):
    # what made the wheeled robot step and is meant to make it turn (docs/locomotion.md).
    flat_style_moving_np3o) echo "$flat_envs --task aow_flat_style --algo np3o ${kappa[*]} $moving" ;;
    flat_style_ppo) echo "$flat_envs --task aow_flat_style --algo ppo $constraint_rewards $moving" ;;
    # Since the symmetric actor (2026-11-27): the reference recipes in policies/configs.
    # (flat_style_symmetric_np3o is resumed with its own config; fresh, it takes today's recipe.)
    flat_style_trip_np3o | flat_style_symmetric_np3o | aow_flat_np3o)
      echo "$flat_envs --config policies/configs/aow_flat_np3o.yaml" ;;
    flat_style_trip_ppo | aow_flat_ppo) echo "$flat_envs --config policies/configs/aow_flat_ppo.yaml" ;;
    # Session 11: PPO's recipe without the trip from the trip run's weights (stage 1 again: the
    # trip came before it stepped), and the rough line started from the shipped flat N-P3O
    # (training.scan_transfer: the same policy at first, the scan's say learned).
    flat_style_stage1_ppo)
      echo "$flat_envs --config policies/configs/aow_flat_ppo.yaml --init-from policies/runs/flat_style_trip_ppo/model_289.pt" ;;
    rough_from_flat_np3o)
      echo "$rough_envs --task aow_rough_style --algo np3o ${kappa[*]} $moving $symmetric $reversals $trip --init-from policies/aow_flat_np3o/model_250.pt" ;;
    # Session 12: PPO with the hip-range penalty, then a low entropy bonus (it stepped sideways);
    # the rough line judged by progress along the command (its level had stalled).
    flat_style_hiprange_ppo)
      echo "$flat_envs --config policies/configs/aow_flat_ppo.yaml --env-override rewards.weights.hip_range=-1.0 --init-from policies/runs/flat_style_stage1_ppo/model_449.pt" ;;
    flat_style_lowent_ppo)
      echo "$flat_envs --config policies/configs/aow_flat_ppo.yaml --env-override rewards.weights.hip_range=-1.0 --set ppo.entropy_coef=0.001 --init-from policies/runs/flat_style_hiprange_ppo/model_152.pt" ;;
    flat_style_lowent_trip_ppo)
      echo "$flat_envs --config policies/configs/aow_flat_ppo.yaml --env-override rewards.weights.hip_range=-1.0 --set ppo.entropy_coef=0.001 $trip --init-from policies/runs/flat_style_lowent_ppo/model_235.pt" ;;
    rough_progress_np3o)
      echo "$rough_envs --task aow_rough_style --algo np3o ${kappa[*]} $moving $symmetric $reversals $trip --env-override terrain.curriculum_distance=along_command --init-from policies/runs/rough_from_flat_np3o/model_123.pt" ;;
    # Session 13: the PPO rough line from the shipped PPO policy (its recipe's two extra terms,
    # the trip and the progress curriculum). Since session 13 policies/configs/aow_flat_ppo.yaml
    # has the hip-range penalty and the 0.001 entropy bonus in it: the PPO specs above that name
    # the recipe ran without them (the recipe as of commit 821962a); their committed run
    # directories resume with their own configs.
    rough_progress_ppo)
      echo "$rough_envs --task aow_rough_style --algo ppo $constraint_rewards $moving $symmetric $reversals $trip --env-override rewards.weights.hip_range=-1.0 --set ppo.entropy_coef=0.001 --set ppo.entropy_coef_final=0.001 --env-override terrain.curriculum_distance=along_command --init-from policies/runs/flat_style_lowent_trip_ppo/model_82.pt" ;;
    # Forks (aow-train --fork) resume from their committed directories and have no fresh start:
    # rough_lowent_np3o (rough_progress_np3o's it. 249, entropy 0.001), and since session 14 the
    # drive-line forks rough_dc_np3o (rough_lowent_np3o's it. 395) and rough_dc_ppo
    # (rough_progress_ppo's it. 49), --env-override sim.leg_actuator=dc_motor; since session 15
    # the sharper-stairs forks rough_sharp_np3o (rough_dc_np3o's it. 512) and rough_sharp_ppo
    # (rough_dc_ppo's it. 263), --env-override terrain.horizontal_scale=0.05; since session 18
    # rough_sharp_spd_ppo (rough_sharp_ppo's it. 950, rewards.constraint_weights.speed_limits=-1.0:
    # policies/configs/aow_rough_ppo.yaml); since session 19 rough_stairs_ppo (its it. 1305, stairs up
    # on 0.3 of the columns; stopped at it. 1412; trained stepping down, resumed since session 20
    # it climbs: training.sim.terrain.OUTWARD_RISE); since session 20 rough_climb_ppo
    # (rough_sharp_spd_ppo's it. 1409, stairs up, now climbing, on 0.3 of the columns); since
    # session 21 rough_track_ppo (rough_sharp_spd_ppo's it. 1416; its rewards.tracking_sharpness=4.0 is
    # the task's own value, so it trains the plain line's task); since session 24 rough_kappa_np3o
    # (rough_sharp_np3o's it. 1234, the shipped one, with algo_params.kappa_max=0.164: κ held at its
    # value there); since session 25 rough_fine_np3o (the same it. 1234 on training stairs sampled
    # every 0.025 m, terrain.horizontal_scale=0.025: risers nearer the course's) and rough_kl_np3o
    # (the same it. 1234 with ppo.desired_kl=0.005: half the step per update); since session 27
    # rough_track1600_ppo and rough_track1600b_ppo (rough_track_ppo's it. 1600, the shipped policy
    # then, with the terrain levels of its it. 1840: training.fork_root; b reseeded); since session 28
    # rough_avg_np3o (rough_sharp_np3o's it. 1234 reseeded by training.fork_root --reseed 2, κ held
    # at 0.164, a checkpoint every 2 iterations for training.average_checkpoints).
    rough_lowent_np3o | rough_dc_np3o | rough_dc_ppo | rough_sharp_np3o | rough_sharp_ppo | rough_sharp_spd_ppo | \
      rough_stairs_ppo | rough_climb_ppo | rough_track_ppo | rough_kappa_np3o | rough_fine_np3o | rough_kl_np3o | \
      rough_track1600_ppo | rough_track1600b_ppo | rough_avg_np3o)
      echo "$rough_envs" ;;
    rough_style_np3o) echo "$rough_envs --task aow_rough_style --algo np3o ${kappa[*]} $moving $symmetric $reversals" ;;
    rough_style_ppo)
      echo "$rough_envs --task aow_rough_style --algo ppo $constraint_rewards $moving $symmetric $reversals" ;;
    *) return 1 ;;
  esac
}

if [ "$out" = "--spec" ]; then  # the check: a run this window cannot start or resume fails here, not on the GPU
  spec "$deadline" || { echo "unknown run $deadline" >&2; exit 2; }
  exit 0
fi
mkdir -p "$work" "$out"
(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 \
  > "$out/gpu_usage.csv" 2>&1) &
smi=$!

pids=()
for name in "${wanted[@]}"; do
  read -r -a flags <<< "$(spec "$name")" || { echo "unknown run $name" >&2; exit 2; }
  envs=${flags[0]}
  if ls "$runs_from/$name"/model_*.pt >/dev/null 2>&1; then
    cp -r "$runs_from/$name" "$work/$name"
    args=(--resume "$work/$name" --num-envs "$envs" "${placement[@]}" "${common[@]}")
  else
    if [ "${#flags[@]}" -lt 2 ]; then
      echo "$name is a fork with no fresh start: its directory (model_*.pt) must be under $runs_from" >&2
      exit 2
    fi
    args=(--run-dir "$work/$name" --num-envs "$envs" "${placement[@]}" --seed 0 --iterations 3000 "${common[@]}"
          "${flags[@]:1}")
  fi
  (cd "$repo" && timeout -s TERM -k 90 "$deadline" "${PYTHON:-python3}" -m training.train "${args[@]}" \
    > "$work/$name.log" 2>&1; echo "exit $?" >> "$work/$name.log") &
  pids+=($!)
done
wait "${pids[@]}"
pkill -P "$smi" 2>/dev/null; kill "$smi" 2>/dev/null
# At most 8 files come back: per run one tar and KEEP checkpoints.
keep=${KEEP:-$(( (8 - ${#wanted[@]}) / ${#wanted[@]} ))}
[ "$keep" -ge 1 ] || keep=1
for name in "${wanted[@]}"; do
  dir=$work/$name
  tail -3 "$work/$name.log"
  cp "$work/$name.log" "$dir/train.log"
  [ -f "$out/gpu_usage.csv" ] && cp "$out/gpu_usage.csv" "$dir/gpu_usage.csv"
  files=(config.yaml metrics.jsonl segments.jsonl train.log gpu_usage.csv)
  tar -cf "$out/$name.tar" -C "$work" $(for f in "${files[@]}"; do [ -e "$dir/$f" ] && echo "$name/$f"; done)
  ls "$dir"/model_*.pt >/dev/null 2>&1 && (cd "$repo" && "${PYTHON:-python3}" -m training.slim_checkpoint "$dir" \
    --last "$keep" --out "$out/$name")
done
rm -f "$out/gpu_usage.csv"
ls -laR "$out"
