"""The toolkit's main job, end to end, offline (`make demo`, or `python -m demo --help`).

1. Train N-P3O on ``aow_flat`` for a bounded wall-clock budget (``DEMO_MINUTES``, default 10).
2. Export the last checkpoint to ONNX with its contract, verified against PyTorch.
3. Run the exported policy in sim-to-sim for 30 s through the deployment runtime with a scripted
   command sequence (forward, sideways, turning, stop), recording a rosbag2 and a video.
4. Run the shipped reference policy (policies/aow_flat_np3o) on the same command script, with a
   video, for comparison.
5. Drive the shipped height-scan policy (policies/aow_rough_np3o) over the terrain course (a 25 %
   slope, 15 cm stairs, 10 cm blocks) at 0.75 m/s through the GridMap -> height-scan path, with a video:
   what a policy trained for longer on the rough task does (``--no-course`` skips it).
6. Replay the bag into violation statistics, tables and plots.
7. Print a short summary with the paths of every artifact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aow_policy.fileio import atomic_write_text
from viz.video import VideoOptions, parse_size

DEFAULT_OUT = Path("demo_output")
POLICIES = Path(__file__).resolve().parents[1] / "policies"
REFERENCE_POLICY = POLICIES / "aow_flat_np3o" / "policy.onnx"
ROUGH_POLICY = POLICIES / "aow_rough_np3o" / "policy.onnx"
COURSE_SPEED = 0.75  # m/s, the middle of the course bar's 0.5 - 1.0
STAGES = 6


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m demo", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=float(os.environ.get("DEMO_MINUTES", "10")),
        help="training budget in wall-clock minutes (default: $DEMO_MINUTES or 10)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where all artifacts go (default %(default)s)")
    p.add_argument("--num-envs", type=int, default=int(os.environ.get("DEMO_ENVS", "256")), help="parallel envs")
    p.add_argument("--algo", default="np3o", help="training algorithm (default %(default)s)")
    p.add_argument("--task", default="aow_flat", help="training task (default %(default)s)")
    p.add_argument("--sim-seconds", type=float, default=30.0, help="sim-to-sim duration (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-video", action="store_true", help="no videos of the sim-to-sim runs")
    p.add_argument(
        "--no-course", action="store_true", help="skip the shipped height-scan policy's drive over the terrain course"
    )
    p.add_argument(
        "--video-fps", type=float, default=10.0, help="video frames per simulated second (default %(default)s)"
    )
    p.add_argument(
        "--video-size",
        type=parse_size,
        default=(480, 360),
        metavar="WxH",
        help="video frame size in pixels, even numbers (default 480x360; a frame takes ~0.2 s on a CPU)",
    )
    return p


def stage(n: int, title: str) -> None:
    print(f"\n=== [{n}/{STAGES}] {title} ===", flush=True)


def train(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    from training.config import TrainConfig
    from training.runner import Runner

    cfg = TrainConfig(
        task=args.task, algo=args.algo, num_envs=args.num_envs, iterations=100_000, seed=args.seed, save_interval=25
    )
    if args.algo == "np3o" and args.task.startswith("aow"):
        # The appendix's schedule for the robot's training, kappa_i = min(0.2, 0.1 * 1.0004^i):
        # a small kappa early keeps exploring (Table III's kappa = 1 is the comparison's setting).
        cfg.algo_params.kappa_init, cfg.algo_params.kappa_max = 0.1, 0.2
    cfg.validate()
    runner = Runner(cfg, run_dir=run_dir, progress=not args.no_progress, tensorboard=True)
    history = runner.learn(time_budget_s=60.0 * args.minutes)
    return {
        "iterations": runner.iteration,
        "mean_reward": recent_mean(history, "mean_reward"),
        "violations_per_episode": recent_mean(history, "violations_per_episode"),
        "checkpoint": str(runner.last_checkpoint),
    }


def recent_mean(history: list[dict[str, Any]], key: str, count: int = 10) -> float | None:
    """Mean of ``key`` over the last ``count`` iterations that report it (an iteration in which no
    episode ended has no episode statistics); None if none does."""
    values = [record[key] for record in reversed(history) if key in record][:count]
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, digits: int) -> str:
    return "n/a (no episode finished)" if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    """A violation rate per window: two decimals (a 30 s run has one and a half windows, so a count
    of 1 reads 0.67, not 0.6666666666666665); "-" where the replay had no such signal."""
    return "-" if value is None else f"{value:.2f}"


def course_summary(run: Any, length: float) -> str:
    """One line on a drive over the course (a :class:`sim2sim.course_eval.CourseRun`)."""
    speed = "-" if run.mean_speed is None else f"{run.mean_speed:.2f} m/s"
    return (
        f"{run.end} at {run.progress_m:.1f} of {length:g} m (furthest in {run.section_reached}), "
        f"mean speed {speed} for {run.speed:g} commanded, falls {len(run.falls)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.minutes > 0:
        print(f"demo: --minutes must be positive, got {args.minutes}", file=sys.stderr)
        return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / f"run_{time.strftime('%Y%m%d-%H%M%S')}"
    policy_path = run_dir / "policy.onnx"
    bag_dir = run_dir / "sim2sim_bag"
    report_dir = run_dir / "replay_report"
    video_options = None
    if not args.no_video:
        video_options = VideoOptions(fps=args.video_fps, width=args.video_size[0], height=args.video_size[1])
        try:
            video_options.validate()
        except ValueError as e:
            print(f"demo: {e}", file=sys.stderr)
            return 2
    started = time.perf_counter()

    stage(1, f"training {args.algo} on {args.task} for {args.minutes:g} min ({args.num_envs} envs)")
    trained = train(args, run_dir)

    stage(2, "exporting to ONNX and verifying against PyTorch")
    from export.pipeline import export_policy

    exported = export_policy(run_dir, policy_path)

    stage(3, f"sim-to-sim: {args.sim_seconds:g} s, forward / sideways / turning / stop, recorded to a bag")
    import sim2sim

    video = {"video": run_dir / "sim2sim.mp4", "video_options": video_options} if video_options else {}
    sim = sim2sim.run(
        exported.onnx_path, duration=args.sim_seconds, record=bag_dir, progress=not args.no_progress, **video
    )
    print(sim.format())
    atomic_write_text(run_dir / "sim2sim.json", json.dumps(sim.to_dict(), indent=2, default=str))

    stage(4, f"sim-to-sim of the shipped reference policy ({REFERENCE_POLICY.parent.name}) on the same commands")
    video = {"video": run_dir / "reference.mp4", "video_options": video_options} if video_options else {}
    reference = sim2sim.run(REFERENCE_POLICY, duration=args.sim_seconds, progress=not args.no_progress, **video)
    print(reference.format())
    atomic_write_text(run_dir / "reference_sim2sim.json", json.dumps(reference.to_dict(), indent=2, default=str))

    course_run = None
    if not args.no_course:
        title = f"the shipped height-scan policy ({ROUGH_POLICY.parent.name}) on the terrain course"
        stage(5, f"{title} at {COURSE_SPEED:g} m/s")
        from sim2sim.course_eval import drive_course

        video = {"video": run_dir / "rough_course.mp4", "video_options": video_options} if video_options else {}
        course_run, course = drive_course(ROUGH_POLICY, COURSE_SPEED, progress=not args.no_progress, **video)
        atomic_write_text(run_dir / "rough_course.json", json.dumps(course_run.summary(), indent=2, default=str))
        print(course_summary(course_run, course.length))

    stage(6, "replaying the bag into violation statistics")
    from hardware_logs.cli import run as replay

    argv_replay = [str(bag_dir), "--out", str(report_dir)] + (["--no-progress"] if args.no_progress else [])
    if replay(argv_replay) != 0:
        print("demo: the replay failed; see above", file=sys.stderr)
        return 1
    summary = json.loads((report_dir / "summary.json").read_text())

    print("\n=== summary ===")
    print(
        f"training: {trained['iterations']} iterations, mean reward {_fmt(trained['mean_reward'], 3)}, "
        f"violations per episode {_fmt(trained['violations_per_episode'], 2)} (means of the last 10 iterations "
        "with finished episodes)"
    )
    for seg in sim.segments:
        err = seg.mean_abs_error_settled or seg.mean_abs_error
        shown = "no samples in POLICY" if err is None else "vx {:.3f} m/s, vy {:.3f} m/s, yaw {:.3f} rad/s".format(*err)
        print(f"sim-to-sim tracking error, {seg.name} (cmd {seg.command}): {shown}")
    vel, tq = summary["velocity"], summary["torque"]
    print(
        f"sim-to-sim violations: velocity {vel['events']} events ({vel['samples_over']}/{vel['samples']} samples), "
        f"torque {tq['events']} events; per {summary['settings']['window_s']:g} s window: velocity "
        f"{_rate(vel['violations_per_window'])}, torque {_rate(tq['violations_per_window'])}; fell: {sim.fell}"
    )
    for seg, ref in zip(sim.segments, reference.segments, strict=True):
        err = ref.mean_abs_error_settled or ref.mean_abs_error
        shown = "no samples in POLICY" if err is None else "vx {:.3f} m/s, vy {:.3f} m/s, yaw {:.3f} rad/s".format(*err)
        print(f"reference policy's tracking error, {seg.name}: {shown}")
    print(f"reference policy fell: {reference.fell}")
    if course_run is not None:
        print(f"height-scan policy on the terrain course: {course_summary(course_run, course.length)}")
    print(f"checkpoint: {trained['checkpoint']}")
    print(f"policy:     {exported.onnx_path} (+ {exported.yaml_path.name})")
    print(f"bag:        {bag_dir}")
    print(f"report:     {report_dir}")
    if sim.video is not None and reference.video is not None:
        print(f"video:      {sim.video} (this run; {sim.video_frames} frames at {args.video_fps:g} fps)")
        print(f"reference:  {reference.video} (the shipped N-P3O policy, same commands)")
        if course_run is not None:
            print(f"course:     {run_dir / 'rough_course.mp4'} (the shipped height-scan policy)")
    print(f"demo took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
