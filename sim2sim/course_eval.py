"""The terrain course in ``python -m sim2sim.evaluate --course``: issue 16's bar for a rough-terrain policy.

The same drives and bar serve the block strip of ``--block`` (the paper's robot experiment A: a
20 cm block crossed at 1.0 m/s; :func:`sim2sim.course.block_config`): "the course" below is
whichever strip a run drives.

Each policy drives the course (:mod:`sim2sim.course`) twice through the deployment runtime (the
controller core the ROS node uses, fed the GridMap -> height-scan path): once with the elevation
map of the terrain and once with the map blanked (``HardwareConfig.blank_map``: flat at the
ground height under the base, the robot still on the real course). The operator is
:class:`sim2sim.driver.LineDriver`: the commanded forward speed and a pure-pursuit yaw rate that
holds the course's centre line. A run ends when the base crosses the finish line, when it stalls
(no 0.25 m of new progress in 10 s: stuck or fallen), or at the time limit.

Reported per run: progress along x from the start (m and fraction of the course), the section of
the furthest point and of the last, crossed or not, driving time and mean forward speed
(progress / time), falls (time, reason, x and section), violations per 20 s episode as in the
flat evaluation, how well the line was held, and the seconds each section took against its pace
at the commanded speed (:func:`section_times`): where a slow crossing lost its time.

The bar (:func:`course_bar`), with the map:

* ``crossed``: the base passed the finish line within the time limit;
* ``no_fall``: no fall in the whole run;
* ``at_speed``: mean forward speed over the crossing at least ``SPEED_FRACTION_BAR`` (0.8) of
  the commanded speed, which itself must lie in issue 16's 0.5 - 1.0 m/s;

and blanked ``measurably worse`` (the scan is used): at least one of more falls than with the
map, not crossing where the map run crossed, at least ``BLANK_PROGRESS_LOSS`` (0.5 m) less
progress, or, both crossing, a mean speed at most ``BLANK_SPEED_FACTOR`` (0.9) of the map run's.
A policy that never reads its scan gives two identical runs and fails this part: the course and
the operator are deterministic, so any difference comes from the map. So does a policy that reads
its scan and can also cross blind; over several drives :mod:`sim2sim.scan_effect` tells the two
apart (map runs against blanked runs that pass the map run's checks, with an exact test).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from aow_policy.robot import Robot, load_robot
from sim2sim.course import COURSE_SEED, Course, CourseConfig, block_config, generate_course
from sim2sim.driver import DriverConfig, LineDriver
from sim2sim.hardware import HardwareConfig

if TYPE_CHECKING:
    from viz.video import VideoOptions

SPEED_RANGE = (0.5, 1.0)  # m/s, issue 16's crossing speeds
DEFAULT_SPEED = 0.75
SPEED_FRACTION_BAR = 0.8  # mean speed over the crossing / commanded speed
BLANK_SPEED_FACTOR = 0.9  # blanked mean speed at most this fraction of the map run's is worse
BLANK_PROGRESS_LOSS = 0.5  # m less progress blanked is worse
TIME_LIMIT_SPEED_FRACTION = 0.5  # the default time limit lets a robot at half the speed cross
MAP_MODES = ("map", "blank")


@dataclass
class CourseRun:
    """One drive over the course (see the module docstring)."""

    blank_map: bool
    speed: float  # m/s commanded
    end: str  # crossed, stalled or time limit
    crossed: bool
    progress_m: float  # furthest x reached - start x
    progress_fraction: float  # of the start-to-finish length
    section_reached: str  # section of the furthest point
    final_x: float
    final_section: str
    time_s: float  # driving time: to the crossing, or to the run's end
    mean_speed: float | None  # progress_m / time_s
    falls: list[dict[str, Any]]  # time (s of driving), reason, x, section
    violations_per_episode: dict[str, float]  # quantity -> per 20 s episode
    violating_steps: dict[str, int]
    policy_steps: int
    max_lateral_offset: float  # m from the line, whole run
    lead_in_max_lateral_offset: float  # m, on the run-up to the first obstacle ahead of the start
    lead_in_max_heading_error: float  # rad, the same
    # Seconds from first reaching each section's start to first reaching its end (the part between
    # the start and the finish line; None where the base never got through it): see section_times.
    section_times: dict[str, float | None]
    final_state: str
    fault: str | None
    sim_time: float
    wall_time: float
    trace: dict[str, list[float]] = field(default_factory=dict)  # the driver's rows (time, x, y, yaw, yaw_rate)

    def summary(self) -> dict[str, Any]:
        """Everything but the trace (for JSON reports)."""
        return {k: v for k, v in vars(self).items() if k != "trace"}


def check_speed(speed: float) -> None:
    lo, hi = SPEED_RANGE
    if not (math.isfinite(speed) and lo <= speed <= hi):
        raise ValueError(f"the course speed must lie in {lo} - {hi} m/s (issue 16's bar), got {speed!r}")


def default_time_limit(course: Course, speed: float) -> float:
    """Seconds of driving in which a robot at TIME_LIMIT_SPEED_FRACTION of ``speed`` still crosses."""
    return course.length / (TIME_LIMIT_SPEED_FRACTION * speed)


def drive_course(
    policy: str | os.PathLike[str],
    speed: float = DEFAULT_SPEED,
    blank_map: bool = False,
    seed: int = COURSE_SEED,
    time_limit: float | None = None,
    *,
    course_config: CourseConfig | None = None,
    stand_up: float = 2.0,
    driver: DriverConfig | None = None,
    robot: Robot | None = None,
    progress: bool = False,
    leg_actuator: str | None = None,
    video: str | os.PathLike[str] | None = None,
    video_options: VideoOptions | None = None,
) -> tuple[CourseRun, Course]:
    """Drive ``policy`` over the strip of ``course_config`` (default: the terrain course; its layout
    names the terrain, "course" or "block") and ``seed``; ``time_limit``: seconds of driving
    (default: :func:`default_time_limit`); ``leg_actuator``: the leg drive model (None: as the policy
    trained); ``video``: a new MP4 file of the drive (``video_options`` as in :func:`sim2sim.run`).
    Returns the run and the strip it drove."""
    from sim2sim.runner import run  # the runner imports the world, which imports the course

    check_speed(speed)
    robot = robot if robot is not None else load_robot()
    course_config = course_config if course_config is not None else CourseConfig()
    course = generate_course(course_config, seed)
    time_limit = default_time_limit(course, speed) if time_limit is None else time_limit
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"the time limit must be a positive number of seconds, got {time_limit!r}")
    driver_cfg = DriverConfig(speed=speed) if driver is None else driver
    if driver_cfg.speed != speed:
        raise ValueError(f"driver speed {driver_cfg.speed} differs from the course speed {speed}")
    operator = LineDriver.for_course(course, robot, driver_cfg)
    policy_dt = robot.rates.policy_dt
    # Driving starts when the controller enters POLICY: the first control period plus the stand-up.
    duration = stand_up + policy_dt + time_limit
    result = run(
        policy,
        duration,
        [{"name": "course", "duration": time_limit, "vx": speed}],
        robot=robot,
        terrain=course_config.layout,  # the strips' terrains are named after their layouts
        seed=seed,
        course=course_config,
        stand_up=stand_up,
        hardware=HardwareConfig(blank_map=blank_map, leg_actuator=leg_actuator),
        operator=operator,
        progress=progress,
        video=video,
        video_options=video_options,
    )
    return course_run_of(result, operator, course, blank_map), course


def _section_spans(course: Course) -> dict[str, tuple[float, float]]:
    """Each section's x range clipped to the start and the finish line (sections behind the start
    or past the finish left out): the stretch :func:`section_times` and :func:`section_pace` time."""
    spans = {}
    for section in course.sections:
        lo, hi = max(section.x_start, course.start[0]), min(section.x_end, course.finish_x)
        if hi > lo:
            spans[section.name] = (lo, hi)
    return spans


def section_times(time: np.ndarray, x: np.ndarray, course: Course) -> dict[str, float | None]:
    """Seconds the base took through each section between the start and the finish line: from the
    first time its x reaches the section's start to the first time it reaches the section's end
    (backing up and coming again counts in). None for a section it never got through."""
    times: dict[str, float | None] = {}
    for name, (lo, hi) in _section_spans(course).items():
        entered, left = np.flatnonzero(x >= lo), np.flatnonzero(x >= hi)
        times[name] = float(time[left[0]] - time[entered[0]]) if len(left) else None
    return times


def section_pace(course: Course, speed: float) -> dict[str, float]:
    """Seconds each section of :func:`section_times` takes at the commanded ``speed``."""
    return {name: (hi - lo) / speed for name, (lo, hi) in _section_spans(course).items()}


def course_run_of(result: Any, driver: LineDriver, course: Course, blank_map: bool) -> CourseRun:
    """A course run's figures from the runner's result and the driver that drove it."""
    speed = driver.config.speed
    tr = driver.trace.arrays()
    start_x, line_y = course.start
    driving = len(tr["time"]) > 0
    best_x = float(tr["x"].max()) if driving else start_x
    final_x = float(tr["x"][-1]) if driving else start_x
    policy_start = result.policy_start
    if driver.crossed_at is not None:
        time_s = driver.crossed_at
    elif driving and policy_start is not None:
        time_s = float(tr["time"][-1] - policy_start)
    else:
        time_s = 0.0
    progress_m = max(0.0, best_x - start_x)
    falls = []
    for f in result.falls:
        x = driver.trace.x_at(f.time)
        x = x if x is not None else start_x
        since = f.time - policy_start if policy_start is not None else None
        falls.append({"time": since, "reason": f.reason, "x": x, "section": course.section_at(x)})
    on_lead_in = tr["x"] < course.first_obstacle_x
    offset = abs(tr["y"] - line_y)
    v = result.violations
    return CourseRun(
        blank_map=blank_map,
        speed=speed,
        end=driver.end or "time limit",
        crossed=driver.crossed_at is not None,
        progress_m=progress_m,
        progress_fraction=min(1.0, progress_m / course.length),
        section_reached=course.section_at(best_x),
        final_x=final_x,
        final_section=course.section_at(final_x),
        time_s=time_s,
        mean_speed=progress_m / time_s if time_s > 0 else None,
        falls=falls,
        violations_per_episode={q: float(x) for q, x in v["violations_per_episode"].items()},
        violating_steps={q: int(x) for q, x in v["violating_policy_steps"].items()},
        policy_steps=int(v["policy_steps"]),
        max_lateral_offset=float(offset.max()) if driving else 0.0,
        lead_in_max_lateral_offset=float(offset[on_lead_in].max()) if on_lead_in.any() else 0.0,
        lead_in_max_heading_error=float(abs(tr["yaw"][on_lead_in]).max()) if on_lead_in.any() else 0.0,
        section_times=section_times(tr["time"], tr["x"], course) if driving else {},
        final_state=result.final_state,
        fault=result.fault,
        sim_time=result.sim_time,
        wall_time=result.wall_time,
        trace={k: a.tolist() for k, a in tr.items()},
    )


def blank_worse_reasons(with_map: CourseRun, blanked: CourseRun) -> list[str]:
    """Why the blanked run is measurably worse than the map run (empty: it is not)."""
    reasons = []
    if len(blanked.falls) > len(with_map.falls):
        reasons.append(f"fell ({len(blanked.falls)} vs {len(with_map.falls)})")
    if with_map.crossed and not blanked.crossed:
        reasons.append("did not cross")
    loss = with_map.progress_m - blanked.progress_m
    if loss >= BLANK_PROGRESS_LOSS:
        reasons.append(f"{loss:.2f} m less progress")
    if with_map.crossed and blanked.crossed and with_map.mean_speed and blanked.mean_speed is not None:
        ratio = blanked.mean_speed / with_map.mean_speed
        if ratio <= BLANK_SPEED_FACTOR:
            reasons.append(f"mean speed {ratio:.2f} of the map run's")
    return reasons


MAP_RUN_CHECKS = ("crossed", "no_fall", "at_speed")  # the keys of map_run_checks


def map_run_checks(run: CourseRun | Mapping[str, Any]) -> dict[str, bool]:
    """The part of the course bar one run with the map decides: crossed, no fall, at speed. ``run``
    may also be a run as ``evaluation.json`` holds it (:mod:`sim2sim.scan_effect` applies the same
    checks to blanked runs)."""
    r = run if isinstance(run, Mapping) else vars(run)
    crossed, mean_speed = bool(r["crossed"]), r["mean_speed"]
    at_speed = crossed and mean_speed is not None and mean_speed >= SPEED_FRACTION_BAR * r["speed"]
    return {"crossed": crossed, "no_fall": not r["falls"], "at_speed": bool(at_speed)}


def course_bar(with_map: CourseRun, blanked: CourseRun) -> dict[str, Any]:
    """Issue 16's course bar (module docstring) for one policy's two runs."""
    reasons = blank_worse_reasons(with_map, blanked)
    checks: dict[str, Any] = {**map_run_checks(with_map), "blank_worse": bool(reasons), "blank_worse_because": reasons}
    checks["passes"] = all(checks[k] for k in ("crossed", "no_fall", "at_speed", "blank_worse"))
    return checks


def _falls_text(run: CourseRun) -> str:
    if not run.falls:
        return "0"
    first = run.falls[0]
    when = f" at {first['time']:.1f} s" if first["time"] is not None else ""
    return f"{len(run.falls)} (first: {first['section']}, x {first['x']:.2f} m{when})"


def strip_title(config: CourseConfig) -> str:
    """What the strip of ``config`` is, for headings: the course, or the block (of experiment A or not)."""
    if config.layout != "block":
        return "Terrain course"
    title = f"{config.step_height * 100:g} cm block"
    # Only the experiment-A strip itself is called so (a milder block in a test is not).
    return f"{title} (the paper's experiment A)" if config == block_config() else title


def _strip_text(course: Course) -> str:
    """Where the strip's start, obstacles and finish lie (the first words of :func:`markdown`)."""
    if course.config.layout == "block":
        up, down = course.section("block_up").x_start, course.section("block_down").x_start
        return (
            f"{strip_title(course.config)}: start x {course.start[0]:g} m, block from x {up:g} to {down:g} m "
            f"({round(down - up, 9):g} m), finish x {course.finish_x:g} m ({course.length:g} m from the start); "
            f"{course.resolution:g} m height samples."
        )
    sections = ", ".join(f"{s.name} {s.x_start:g} – {s.x_end:g}" for s in course.sections)
    return (
        f"Terrain course (seed {course.seed}, {course.resolution:g} m height samples): start x {course.start[0]:g} m, "
        f"finish x {course.finish_x:g} m ({course.length:g} m); sections (x, m): {sections}."
    )


def markdown(course: Course, runs: dict[str, dict[str, CourseRun]], checks: dict[str, dict[str, Any]]) -> str:
    """The strip's tables (course or block): one row per policy and map mode, then the bar per policy."""
    speed = next((r["map"].speed for r in runs.values()), DEFAULT_SPEED)
    lines = [
        f"{_strip_text(course)} Commanded {speed:g} m/s, the line held by pure pursuit; "
        "'blank' = the elevation map flat at the ground under the base.",
        "",
        "| policy | map | end | progress | section reached | time | mean speed | falls "
        "| joint-speed viol./episode | torque viol./episode | max offset from the line |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, modes in runs.items():
        for mode in MAP_MODES:
            r = modes.get(mode)
            if r is None:
                continue
            speed_text = "–" if r.mean_speed is None else f"{r.mean_speed:.2f} m/s"
            vpe = r.violations_per_episode
            lines.append(
                f"| {name} | {mode} | {r.end} | {r.progress_m:.2f} m ({r.progress_fraction:.0%}) | {r.section_reached} "
                f"| {r.time_s:.1f} s | {speed_text} | {_falls_text(r)} "
                f"| {vpe.get('velocity', 0.0):.2f} | {vpe.get('effort', 0.0):.2f} | {r.max_lateral_offset:.2f} m |"
            )
    pace = section_pace(course, speed)
    lines += [
        "",
        "Seconds through each section (× the section's time at the commanded speed; – where the base "
        "did not get through):",
        "",
        "| policy | map | " + " | ".join(f"{name} ({t:.1f} s)" for name, t in pace.items()) + " |",
        "| --- | --- | " + " | ".join("---" for _ in pace) + " |",
    ]
    for name, modes in runs.items():
        for mode in MAP_MODES:
            r = modes.get(mode)
            if r is None:
                continue
            cells = []
            for section, t_pace in pace.items():
                took = r.section_times.get(section)
                cells.append("–" if took is None else f"{took:.1f} ({took / t_pace:.1f}×)")
            lines.append(f"| {name} | {mode} | " + " | ".join(cells) + " |")
    if checks:
        lines += [
            "",
            f"| policy | crossed (map) | no fall (map) | at speed (≥ {SPEED_FRACTION_BAR:g} × {speed:g} m/s) "
            "| blank measurably worse | passes |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, c in checks.items():
            why = f" ({'; '.join(c['blank_worse_because'])})" if c["blank_worse_because"] else ""
            worse = f"{c['blank_worse']}{why}"
            lines.append(f"| {name} | {c['crossed']} | {c['no_fall']} | {c['at_speed']} | {worse} | {c['passes']} |")
    return "\n".join(lines) + "\n"
