"""``aow-sim2sim``: run an exported policy on the simulated robot through the deployment controller."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from aow_policy.fileio import atomic_write_text
from aow_policy.robot import load_robot
from sim2sim.commands import FORMAT_HELP, CommandScriptError
from sim2sim.course import LAYOUTS, Course, generate_course, strip_config
from sim2sim.course_eval import check_speed, course_run_of
from sim2sim.driver import DriverConfig, LineDriver
from sim2sim.hardware import HardwareConfig
from sim2sim.metrics import FallCriteria
from sim2sim.runner import DISTROS, Sim2SimConfig, run
from sim2sim.world import DEFAULT_SEEDS, TERRAINS
from training.sim.model import LEG_ACTUATOR_MODELS
from viz.gl import RenderBackendError
from viz.video import add_video_arguments, options_from_args

DESCRIPTION = """\
Sim-to-sim: the MuJoCo model of the wheeled ANYmal C plays the robot. It publishes real ROS 2
messages (sensor_msgs/JointState with effort every physics step, nav_msgs/Odometry, a robot-centred
grid_map_msgs/GridMap of the terrain, geometry_msgs/Twist commands from a script), the deployment
controller core of aow_policy consumes them exactly as the controller node does (ZERO_TORQUE ->
STAND_UP -> POLICY, watchdog, clipping) and its joint commands (/joint_commands) drive the
simulated joints. No ROS installation is needed. Prints the command tracking error per segment,
falls and joint-limit violations; --record writes everything to a rosbag2 with the robot's topics.

Bag topics: /joint_states and /joint_commands (sensor_msgs/JointState), /odometry (nav_msgs/Odometry,
twist in the base frame), /elevation_map (grid_map_msgs/GridMap, layer 'elevation', 3 m square around
the robot, column-major, moving circular buffer), /cmd_vel (geometry_msgs/Twist), /diagnostics
(diagnostic_msgs/DiagnosticArray, key 'state'). Stamps are simulation time (s from the start).
Terrains: flat; rough (the training generator's tiles); course (issue 16's evaluation strip: a 25 %
slope up and down, stairs up and down with 15 cm risers, 10 cm blocks from --seed; see
sim2sim.course); block (the paper's robot experiment A: a 20 cm high, 1.2 m long block after a 4 m
run-up). --drive SPEED drives the course or the block: forward at SPEED (0.5 - 1.0 m/s; the paper's
block experiment commands 1.0), a pure-pursuit yaw rate holding its centre line, until the finish,
a stall or --duration. --blank-map publishes a flat map (the ground height under the base) instead
of the terrain: the height scan sees flat ground.
Tracking error: mean |command - base velocity| (vx, vy in the base frame, yaw rate) over the control
periods spent in POLICY in each segment; 'settled' leaves out each segment's first --settle seconds.
A fall: base lower than --fall-height above the ground, tilted beyond --fall-tilt, or touching it.
Python: sim2sim.run(policy, duration, commands, record, **settings) -> Sim2SimResult."""


def build_parser() -> argparse.ArgumentParser:
    d, hw = Sim2SimConfig(), HardwareConfig()
    falls = FallCriteria()
    p = argparse.ArgumentParser(
        prog="aow-sim2sim",
        description=DESCRIPTION,
        epilog=FORMAT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--policy", required=True, type=Path, help="exported policy (.onnx from aow-export)")
    p.add_argument(
        "--duration",
        type=float,
        default=d.duration,
        help="simulated seconds, standing up included (default %(default)s)",
    )
    p.add_argument("--commands", type=Path, help="command script (.yaml/.yml, .json or .csv; format below)")
    p.add_argument("--terrain", choices=TERRAINS, default=d.terrain, help="ground (default %(default)s)")
    p.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help=f"terrain generation seed (default: {DEFAULT_SEEDS['rough']} for rough, {DEFAULT_SEEDS['course']} "
        "for the course, a seed no training uses by default; the block has no random part)",
    )
    p.add_argument(
        "--drive",
        type=float,
        metavar="SPEED",
        help="--terrain course or block: drive the strip at SPEED m/s holding its centre line (in place of "
        "--commands); the block is the paper's experiment A, 20 cm high and 1.2 m long, crossed at 1.0 m/s",
    )
    p.add_argument("--record", type=Path, metavar="BAG_DIR", help="write a rosbag2 to this new directory")
    p.add_argument(
        "--storage", choices=("mcap", "sqlite3"), default=d.storage, help="bag storage (default %(default)s)"
    )
    p.add_argument("--compress", action="store_true", help="zstd-compress mcap chunks (smaller bags)")
    p.add_argument("--bag-version", type=int, choices=(8, 9), default=d.bag_version, help="rosbag2 format version")
    p.add_argument(
        "--distro", choices=sorted(DISTROS), default=d.distro, help="ROS 2 message definitions (default %(default)s)"
    )
    p.add_argument("--robot", type=Path, help="robot contract YAML (default: the aow_policy package's)")
    p.add_argument(
        "--stand-up", type=float, default=d.stand_up, help="stand-up interpolation time, s (default %(default)s)"
    )
    p.add_argument(
        "--settle",
        type=float,
        default=d.settle,
        help="seconds at each segment's start left out of the 'settled' error (default %(default)s)",
    )
    g = p.add_argument_group("rates and the elevation map")
    g.add_argument(
        "--physics-hz", type=float, default=hw.physics_hz, help="physics rate = JointState rate (default %(default)s)"
    )
    g.add_argument("--odometry-hz", type=float, default=hw.odometry_hz, help="(default %(default)s)")
    g.add_argument("--map-hz", type=float, default=hw.map_hz, help="GridMap rate (default %(default)s)")
    g.add_argument("--cmd-vel-hz", type=float, default=d.cmd_vel_hz, help="Twist command rate (default %(default)s)")
    g.add_argument("--diagnostics-hz", type=float, default=d.diagnostics_hz, help="(default %(default)s)")
    g.add_argument("--map-size", type=float, default=hw.map_size, help="map side, m (default %(default)s)")
    g.add_argument(
        "--map-resolution", type=float, default=hw.map_resolution, help="map cell size, m (default %(default)s)"
    )
    g.add_argument(
        "--blank-map",
        action="store_true",
        help="publish a flat map at the ground height under the base instead of the terrain (the scan sees flat "
        "ground; the robot still walks the terrain)",
    )
    g.add_argument(
        "--leg-actuator",
        choices=LEG_ACTUATOR_MODELS,
        default=hw.leg_actuator,
        help="how the leg drives turn PD targets into torque: 'pd' (a torque limit at any speed) or 'dc_motor' "
        "(the drive's torque-speed line, no torque left in the direction of motion at 7.5 rad/s) (default: as "
        "the policy trained, its contract's training.leg_actuator; 'pd' for policies exported before it)",
    )
    g = p.add_argument_group("falls")
    g.add_argument(
        "--fall-height", type=float, default=falls.min_height, help="base height above ground, m (default %(default)s)"
    )
    g.add_argument("--fall-tilt", type=float, default=falls.max_tilt, help="base tilt, rad (default %(default)s)")
    add_video_arguments(
        p,
        "the run as it happens (tracking camera; command and measured velocity arrows; joints over a "
        "speed or torque limit coloured; a strip with time, controller state, command and violation counts)",
    )
    g = p.add_argument_group("live viewer")
    g.add_argument(
        "--viewer",
        action="store_true",
        help="serve the running simulation to a web browser at http://127.0.0.1:PORT (robot, terrain, height-scan "
        "points, command and measured velocity, joints over a limit coloured; start/stop and velocity command "
        "controls); the simulation then runs in real time",
    )
    g.add_argument("--viewer-port", type=int, default=8080, help="port of the viewer (default %(default)s)")
    g = p.add_argument_group("output")
    g.add_argument("--summary", type=Path, help="also write the result as JSON to this file")
    g.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args: argparse.Namespace) -> Sim2SimConfig:
    hardware = replace(
        HardwareConfig(),
        physics_hz=args.physics_hz,
        odometry_hz=args.odometry_hz,
        map_hz=args.map_hz,
        map_size=args.map_size,
        map_resolution=args.map_resolution,
        blank_map=args.blank_map,
        leg_actuator=args.leg_actuator,
    )
    return Sim2SimConfig(
        duration=args.duration,
        terrain=args.terrain,
        seed=args.seed,
        stand_up=args.stand_up,
        cmd_vel_hz=args.cmd_vel_hz,
        diagnostics_hz=args.diagnostics_hz,
        settle=args.settle,
        hardware=hardware,
        falls=FallCriteria(min_height=args.fall_height, max_tilt=args.fall_tilt),
        distro=args.distro,
        storage=args.storage,
        bag_version=args.bag_version,
        compress=args.compress,
        robot_path=str(args.robot) if args.robot else None,
    )


def course_driver(config: Sim2SimConfig, speed: float) -> tuple[list[dict], LineDriver, Course]:
    """--drive: the command segment, the line driver and the strip it drives (the config's terrain,
    course or block: the same strip :func:`sim2sim.world.build_world` builds for the run)."""
    check_speed(speed)
    seed = DEFAULT_SEEDS[config.terrain] if config.seed is None else config.seed
    course = generate_course(strip_config(config.terrain, config.course), seed)
    robot = load_robot(config.robot_path)
    driver = LineDriver.for_course(course, robot, DriverConfig(speed=speed))
    length = config.duration - config.stand_up - robot.rates.policy_dt
    if length <= 0:
        raise ValueError(
            f"duration {config.duration} s leaves no time to drive after standing up ({config.stand_up} s)"
        )
    return [{"name": "course", "duration": length, "vx": speed}], driver, course


def _write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.viewer and not 0 < args.viewer_port < 65536:
        parser.error(f"--viewer-port must be a TCP port (1-65535), got {args.viewer_port}")
    if args.record is not None and args.record.exists():
        print(f"aow-sim2sim: error: {args.record} exists already (nothing is overwritten)", file=sys.stderr)
        return 2
    if args.drive is not None and (args.terrain not in LAYOUTS or args.commands is not None):
        parser.error(
            "--drive needs --terrain course or --terrain block, and no --commands (the driver decides the commands)"
        )
    try:
        config = config_from_args(args)
        video_options = options_from_args(args) if args.video is not None else None
        commands, driver, course = args.commands, None, None
        if args.drive is not None:
            commands, driver, course = course_driver(config, args.drive)
        result = run(
            args.policy,
            commands=commands,
            record=args.record,
            config=config,
            progress=not args.no_progress,
            video=args.video,
            video_options=video_options,
            viewer_port=args.viewer_port if args.viewer else None,
            operator=driver,
        )
    except (CommandScriptError, FileNotFoundError, ValueError, RuntimeError, RenderBackendError) as e:
        print(f"aow-sim2sim: error: {e}", file=sys.stderr)
        return 2
    print(result.format())
    if driver is not None and course is not None:
        drive = course_run_of(result, driver, course, config.hardware.blank_map)
        print(
            f"{course.config.layout}: {drive.end}; progress {drive.progress_m:.2f} m of {course.length:g} m "
            f"({drive.progress_fraction:.0%}), furthest in {drive.section_reached}, now in {drive.final_section}; "
            f"mean speed {drive.mean_speed or 0.0:.2f} m/s over {drive.time_s:.1f} s"
        )
    if args.summary is not None:
        _write_json(args.summary, result.to_dict())
    if args.json:
        print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
