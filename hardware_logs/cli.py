"""aow-replay: joint velocity and torque violation statistics from rosbag2 recordings.

    aow-replay BAG [BAG ...] [--config ROBOT_YAML] [--topic /joint_states] [--out REPORT_DIR] [--jobs N]
    aow-replay BAG --video out.mp4 [--video-fps 15] [--video-size 640x480]

Writes REPORT_DIR/summary.json (schema: hardware_logs/schema/summary.schema.json), events.csv and
PNG plots, and prints a table. Bags are only read. Exit status: 0 when at least one bag was
analysed (the summary says whether the result is partial), 1 when none could be, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from aow_policy.robot import ContractError, load_robot
from hardware_logs.analyse import BagResult, analyse_bag, merge_bag_results
from hardware_logs.report import build_summary, format_table, write_events, write_summary
from hardware_logs.stats import Settings
from viz.video import add_video_arguments, check_target, options_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aow-replay",
        description=(
            "Violation statistics of recorded JointState messages against the robot contract's joint-speed and "
            "joint-torque constraints: per bag and combined, per joint, per controller phase; the paper's "
            "violations per 20 s window. Reads rosbag2 directories, .mcap and .db3 files (no ROS needed)."
        ),
    )
    p.add_argument("bags", nargs="+", type=Path, metavar="BAG", help="bag directory (with metadata.yaml) or .mcap/.db3")
    p.add_argument("--config", type=Path, default=None, help="robot contract YAML (default: aow_policy's aow_c.yaml)")
    p.add_argument("--topic", default="/joint_states", help="sensor_msgs/msg/JointState topic (default %(default)s)")
    p.add_argument(
        "--diagnostics-topic",
        default="/diagnostics",
        help="controller DiagnosticArray topic used to split phases; '' to ignore (default %(default)s)",
    )
    p.add_argument("--out", type=Path, default=Path("replay_report"), help="report directory (default %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="bags analysed in parallel processes (default 1)")
    p.add_argument("--distro", choices=("humble", "iron", "jazzy"), help="message types for bags without definitions")
    p.add_argument("--window-s", type=float, default=20.0, help="window of the per-window metric (default 20 s)")
    p.add_argument("--max-gap-s", type=float, default=1.0, help="longer gaps between messages break events")
    p.add_argument("--worst", type=int, default=10, help="worst events listed in summary.json (default 10)")
    p.add_argument("--no-fast-path", action="store_true", help="deserialize every message (reference path)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    add_video_arguments(
        p,
        "the bag (one bag only) on the robot model: joints from the JointState topic, base from /odometry "
        "(fixed when absent), terrain from /elevation_map, command from /cmd_vel, state from /diagnostics, "
        "joints coloured during the violation events of this report",
    )
    return p


def _analyse(args: tuple) -> BagResult:
    return analyse_bag(*args[:3], **args[3])


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.window_s <= 0 or args.max_gap_s <= 0:
        parser.error("--window-s and --max-gap-s must be positive")
    video_options = None
    if args.video is not None:
        if len(args.bags) != 1:
            parser.error(f"--video renders one bag, got {len(args.bags)}")
        try:
            video_options = options_from_args(args)
            check_target(args.video)
        except ValueError as e:
            parser.error(str(e))
    try:
        robot = load_robot(args.config)
    except ContractError as e:
        print(f"aow-replay: {e}", file=sys.stderr)
        return 2
    settings = Settings(
        policy_dt=robot.rates.policy_dt, window_s=args.window_s, max_gap_s=args.max_gap_s, worst_events=args.worst
    )
    diagnostics = args.diagnostics_topic or None
    fast = not args.no_fast_path
    jobs = min(args.jobs, len(args.bags))
    options = {
        "topic": args.topic,
        "diagnostics_topic": diagnostics,
        "distro": args.distro,
        "fast": fast,
        "progress": False if (args.no_progress or jobs > 1) else None,
    }
    work = [(bag, robot, settings, options) for bag in args.bags]
    if jobs > 1:
        from tqdm import tqdm

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(
                tqdm(pool.map(_analyse, work), total=len(work), unit="bag", disable=args.no_progress or None)
            )
    else:
        results = [_analyse(w) for w in work]

    velocity, torque = merge_bag_results(results)
    summary = build_summary(results, velocity, torque, settings, robot, args.topic, diagnostics, fast)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_summary(out / "summary.json", summary)
    write_events(out / "events.csv", results)
    if not args.no_plots:
        _plots(out, results, velocity, torque)
    if not args.quiet:
        print(format_table(summary))
        print(f"report: {out}/summary.json, events.csv" + ("" if args.no_plots else ", *.png"))
    if video_options is not None:
        return _video(args, robot, results[0], video_options)
    return 0 if any(r.ok for r in results) else 1


def _video(args: argparse.Namespace, robot: object, result: BagResult, options: object) -> int:
    from hardware_logs.reader import BagError
    from viz.gl import FIX, RenderBackendError

    try:
        from hardware_logs.video import ReplayTopics, render_bag
    except Exception as e:  # MuJoCo fails on import when MUJOCO_GL names a backend whose library is missing
        print(f"aow-replay: error: no video: MuJoCo's renderer cannot load ({type(e).__name__}: {e}); {FIX}")
        return 1

    topics = ReplayTopics(joint_states=args.topic, diagnostics=args.diagnostics_topic)
    try:
        video = render_bag(args.bags[0], args.video, robot, result, options, topics, args.distro)  # type: ignore[arg-type]
    except (BagError, RenderBackendError, ValueError) as e:
        print(f"aow-replay: error: no video: {e}", file=sys.stderr)
        return 1
    where = "fixed base (no /odometry)" if video.fixed_base else "base from /odometry"
    print(f"video: {video.path} ({video.frames} frames, {video.seconds:.1f} s; {where}; {video.terrain})")
    return 0


def _plots(out: Path, results: Sequence[BagResult], velocity: object, torque: object) -> None:
    from hardware_logs.plots import plot_histograms, plot_traces

    for i, r in enumerate(results):
        if not r.ok:
            continue
        stem = f"bag{i}_{Path(r.path).name.replace('.', '_')}"
        for q, env in ((r.velocity, r.velocity_envelope), (r.torque, r.torque_envelope)):
            if q is None or env is None or not q.available:
                continue
            plot_traces(out / f"{stem}_{q.name}.png", env, q, f"{Path(r.path).name}: joint {q.name}")
    for q in (velocity, torque):
        if q is not None and q.available:  # type: ignore[attr-defined]
            plot_histograms(out / f"hist_{q.name}.png", q, f"|{q.name}| over all bags")  # type: ignore[attr-defined]


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
