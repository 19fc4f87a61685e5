"""The terrain course of issue 16: its heights, the blanked map, the line driver and the course evaluation.

Heights are read from the compiled model (the surface the robot touches and the map is cut from),
so "0.15 m" holds to the height field's float32 precision, not to the generator's float64 array.
Runs use the shipped flat N-P3O policy (no height scan: it must not notice the blanking), a
random-weight policy with a height scan (what its controller core scans), a constant-action
roller (wheels at 5 rad/s: 0.5 m/s whatever it is told) for the evaluation's arithmetic, and
command-following rollers that cross a milder course, one of them faster where its scan shows
relief (so its blanked run is slower), for the bar end to end.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rosbags.typesys import Stores, get_typestore
from test_sim2sim import ROBOT
from test_sim2sim_evaluate import roller_policy, shorten_sequences

from aow_policy.controller import ControllerCore, ControllerState
from aow_policy.heightmap import height_scan
from aow_policy.messages import MessageFactory, grid_map_layer
from aow_policy.policy_contract import METADATA_KEY, contract_to_json
from aow_policy.testing import locomotion_layout, policy_contract_for, write_onnx_policy
from sim2sim import evaluate
from sim2sim import runner as sim_runner
from sim2sim.cli import main as sim2sim_main
from sim2sim.course import COURSE_SEED, CourseConfig, generate_course
from sim2sim.course_eval import CourseRun, blank_worse_reasons, course_bar, drive_course, section_pace, section_times
from sim2sim.driver import LineDriver, pursuit_yaw_rate
from sim2sim.hardware import RobotCentredMap
from sim2sim.world import build_world
from training.sim.anymal_c import WHEEL

FLAT_NP3O = Path(__file__).resolve().parents[1] / "policies" / "aow_flat_np3o" / "policy.onnx"
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))


@pytest.fixture(scope="module")
def course_world():
    world = build_world(ROBOT, "course", physics_dt=1.0 / 400.0)
    assert world.course is not None and world.course.seed == COURSE_SEED  # the course's own default seed
    return world


def float_tolerance(world) -> float:
    """One float32 step of the height field's normalised samples, in metres."""
    span = float(world.model.hfield_size[0][2])
    return span * 2.0**-23


# ---- the course's heights ----------------------------------------------------------------------


def test_slopes_rise_and_fall_at_a_quarter_and_the_plateau_is_their_rise(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    for name, sign in (("slope_up", 1.0), ("slope_down", -1.0)):
        s = course.section(name)
        for y in (-1.0, 0.0, 0.7):
            x1, x2 = s.x_start + 0.25 * s.length, s.x_start + 0.75 * s.length
            rise = float(h(x2, y) - h(x1, y))
            assert rise / (x2 - x1) == pytest.approx(sign * 0.25, abs=tol), (name, y)
    plateau = course.section("plateau")
    assert float(h(0.5 * (plateau.x_start + plateau.x_end), 0.0)) == pytest.approx(0.5, abs=tol)
    assert float(h(course.section("flat_1").x_start + 0.5, 0.0)) == pytest.approx(0.0, abs=tol)


def test_stairs_have_15_cm_risers_with_edges_one_sample_wide(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    res, tread = course.resolution, course.config.step_width
    for name, sign, base in (("stairs_up", 1.0, 0.0), ("stairs_down", -1.0, 0.6)):
        s = course.section(name)
        centres = s.x_start + tread * (np.arange(4) + 0.5)
        treads = np.array([float(h(x, 0.3)) for x in centres])
        np.testing.assert_allclose(treads, base + sign * 0.15 * np.arange(1, 5), atol=tol)
        for k in range(4):  # each riser: the low level one sample before it, the high one on it
            riser = s.x_start + k * tread
            before, on = float(h(riser - res, 0.0)), float(h(riser, 0.0))
            assert on - before == pytest.approx(sign * 0.15, abs=2 * tol), (name, k)
    landing = course.section("landing")
    assert float(h(landing.x_start + 0.7, -0.5)) == pytest.approx(0.6, abs=tol)


def test_blocks_are_ten_cm_up_or_down_from_the_ground_around_them(course_world):
    course, h, tol = course_world.course, course_world.heights, float_tolerance(course_world)
    s = course.section("blocks")
    res = course.resolution
    xs = np.arange(s.x_start, s.x_end + res / 2, res)
    ys = np.arange(-2.0, 2.0 + res / 2, res)
    field = h(xs[:, None], ys[None, :])  # at the samples: exactly the stored heights
    nearest = np.array([-0.1, 0.0, 0.1])[np.argmin(abs(field[..., None] - np.array([-0.1, 0.0, 0.1])), axis=-1)]
    assert np.max(abs(field - nearest)) <= tol
    assert {-0.1, 0.1} <= set(np.unique(nearest).tolist())
    around = [course.section("flat_2").x_end - 0.5, course.section("run_out").x_start + 0.5]
    assert np.max(abs(h(np.array(around), 0.0))) <= tol  # the surrounding ground is at 0
    on_line = np.round(field[:, np.argmin(abs(ys))] / 0.1)
    assert np.count_nonzero(np.diff(on_line)) >= 3  # the line crosses block edges


def test_course_is_reproducible_per_seed_and_differs_between_seeds():
    a, b, other = generate_course(seed=COURSE_SEED), generate_course(seed=COURSE_SEED), generate_course(seed=7)
    np.testing.assert_array_equal(a.heights, b.heights)
    blocks = a.section("blocks")
    i0 = round((blocks.x_start - a.x0) / a.resolution)
    i1 = round((blocks.x_end - a.x0) / a.resolution)
    assert not np.array_equal(a.heights[i0 : i1 + 1], other.heights[i0 : i1 + 1])
    np.testing.assert_array_equal(a.heights[:i0], other.heights[:i0])  # the seed moves the blocks only
    np.testing.assert_array_equal(a.heights[i1 + 1 :], other.heights[i1 + 1 :])


def test_sections_tile_the_strip_and_name_every_point():
    course = generate_course()
    s = course.sections
    assert [x.name for x in s][:3] == ["lead_in", "slope_up", "plateau"] and s[-1].name == "run_out"
    assert all(a.x_end == b.x_start for a, b in itertools.pairwise(s))
    assert s[0].x_start == pytest.approx(course.x0) and s[-1].x_end == pytest.approx(-course.x0)
    assert course.section_at(s[5].x_start) == s[5].name and course.section_at(s[5].x_start - 1e-6) == s[4].name
    assert course.start == (s[0].x_start + 1.0, 0.0) and course.finish_x == s[-1].x_start + 1.0
    assert course.length == pytest.approx(23.4) and course.first_obstacle_x == s[1].x_start
    assert json.loads(json.dumps(course.describe()))["sections"][5] == {
        "name": "stairs_up",
        "kind": "stairs_up",
        "x_start": s[5].x_start,
        "x_end": s[5].x_end,
    }
    with pytest.raises(ValueError, match="flat section"):
        generate_course(CourseConfig(spawn=6.0))  # on the slope
    with pytest.raises(ValueError, match="multiple of the resolution"):
        generate_course(CourseConfig(step_width=0.31))


# ---- the blanked map -------------------------------------------------------------------------


def test_blank_map_is_flat_and_valid_while_the_terrain_map_shows_the_stairs(course_world):
    course, h = course_world.course, course_world.heights
    x, y = course.section("stairs_up").x_start + 0.45, 0.1  # on the second tread, 0.30 m up
    messages = {
        blank: RobotCentredMap(h, 3.0, 0.05, blank=blank).message(F, x, y, stamp=1.0, frame_id="odom")
        for blank in (False, True)
    }
    terrain, flat = (grid_map_layer(messages[b]).to_unwrapped() for b in (False, True))
    assert terrain.shape == flat.shape == (60, 60)
    assert np.all(np.isfinite(flat)) and np.all(flat == flat[0, 0])
    assert flat[0, 0] == pytest.approx(0.30, abs=1e-6)  # the ground under the base
    assert terrain.max() - terrain.min() == pytest.approx(0.6, abs=1e-6)  # the flat below to the landing
    scan_flat = height_scan(messages[True], (x, y, 0.9), 0.2, ROBOT, min_valid_fraction=1.0)
    scan_terrain = height_scan(messages[False], (x, y, 0.9), 0.2, ROBOT, min_valid_fraction=1.0)
    assert np.all(scan_flat == np.float32(0.30)) and np.ptp(scan_terrain) > 0.4


# ---- the line driver -------------------------------------------------------------------------


def test_pursuit_steers_towards_the_line_and_is_clipped():
    v, look = 0.75, 1.0
    assert pursuit_yaw_rate(0.0, 0.0, v, look, 1.5) == 0.0
    assert pursuit_yaw_rate(0.2, 0.0, v, look, 1.5) < 0.0  # left of the line: turn right
    assert pursuit_yaw_rate(0.0, -0.1, v, look, 1.5) > 0.0  # heading right: turn left
    # linearised: -(2 v / L^2) e - (2 v / L) psi
    assert pursuit_yaw_rate(0.01, 0.005, v, look, 1.5) == pytest.approx(-1.5 * 0.01 - 1.5 * 0.005, rel=1e-3)
    assert pursuit_yaw_rate(0.0, 1.0, v, look, 0.4) == -0.4  # clipped to the contract's range
    assert pursuit_yaw_rate(0.0, math.pi - 0.1, v, look, 1.5) == -1.5  # facing back: the fastest turn
    assert pursuit_yaw_rate(0.0, -math.pi + 0.1, v, look, 1.5) == 1.5
    assert pursuit_yaw_rate(0.0, 2 * math.pi + 0.1, v, look, 1.5) == pytest.approx(
        pursuit_yaw_rate(0.0, 0.1, v, look, 1.5)
    )


@pytest.fixture(scope="module")
def flat_policy_drives():
    """The shipped flat N-P3O over the lead-in and onto the slope (7 s of driving), with the map and blanked."""
    return {blank: drive_course(FLAT_NP3O, 0.75, blank_map=blank, time_limit=7.0)[0] for blank in (False, True)}


def test_blanking_changes_nothing_for_a_policy_without_a_height_scan(flat_policy_drives):
    with_map, blanked = flat_policy_drives[False], flat_policy_drives[True]
    assert with_map.trace == blanked.trace  # every pose and command, bit for bit
    assert len(with_map.trace["x"]) > 300  # 7 s at 50 Hz
    assert with_map.violations_per_episode == blanked.violations_per_episode
    assert (with_map.progress_m, with_map.falls, with_map.end) == (blanked.progress_m, blanked.falls, blanked.end)
    assert with_map.section_reached == "slope_up" and with_map.end == "time limit"
    assert not course_bar(with_map, blanked)["blank_worse"]


def test_the_driver_holds_the_line_on_the_lead_in(flat_policy_drives):
    run = flat_policy_drives[False]
    assert run.lead_in_max_lateral_offset < 0.1 and run.lead_in_max_heading_error < 0.05
    assert run.progress_m > 4.0  # it left the lead-in: the checks covered all of it
    assert run.mean_speed == pytest.approx(0.75, abs=0.15)


def test_the_driver_brings_the_robot_onto_a_line_beside_it():
    """The line 0.3 m to the right of the spawn: steered onto it within the 4 m lead-in."""
    course = generate_course()
    driver = LineDriver(course.start[0], course.finish_x, -0.3, yaw_limit=1.5)
    sim_runner.run(FLAT_NP3O, 8.0, [{"name": "c", "duration": 6.0, "vx": 0.75}], terrain="course", operator=driver)
    tr = driver.trace.arrays()
    progress = tr["x"] - course.start[0]
    assert abs(tr["y"][0] + 0.3) > 0.29  # it started off the line
    last_metre = (progress > 3.0) & (progress < 4.0)
    assert last_metre.sum() > 50
    assert np.max(abs(tr["y"][last_metre] + 0.3)) < 0.1 and np.max(abs(tr["yaw"][last_metre])) < 0.08
    assert min(tr["yaw_rate"]) < -0.3  # it turned right to get there


# ---- what a height-scan policy's controller core scans ----------------------------------------


def test_a_height_scan_policy_sees_the_stairs_only_with_the_map(tmp_path, monkeypatch):
    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT, height_scan=True))
    policy = write_onnx_policy(tmp_path / "scan.onnx", contract)
    step = ControllerCore.step
    scans: list[np.ndarray] = []

    def recording_step(core: ControllerCore, now: float):
        in_policy = core.state is ControllerState.POLICY  # this step scans and runs the policy
        command = step(core, now)
        if in_policy:
            scans.append(core.inputs.heights.copy())
        return command

    monkeypatch.setattr(ControllerCore, "step", recording_step)
    # Spawned on flat_1 0.7 m before the first riser: the scan's front rows (+0.8 m) reach the stairs.
    seen = {}
    for blank in (False, True):
        scans.clear()
        result = drive_course(
            policy, 0.75, blank_map=blank, time_limit=1.0, stand_up=0.5, course_config=CourseConfig(spawn=11.8)
        )[0]
        assert result.final_state == "POLICY" and len(scans) >= 45
        seen[blank] = np.array(scans)
    spread = np.ptp(seen[False], axis=1)
    assert spread.max() == pytest.approx(0.15, abs=1e-6) and np.mean(spread > 0.14) > 0.5
    assert np.all(np.ptp(seen[True], axis=1) == 0.0)  # every scan point at one height
    assert np.all(abs(seen[True]) < 1e-6)  # the ground under the base on flat_1


# ---- the evaluation ---------------------------------------------------------------------------


def course_run(crossed: bool, progress: float, time_s: float, falls: int = 0, speed: float = 0.75) -> CourseRun:
    return CourseRun(
        blank_map=False,
        speed=speed,
        end="crossed" if crossed else "stalled",
        crossed=crossed,
        progress_m=progress,
        progress_fraction=progress / 23.4,
        section_reached="run_out" if crossed else "stairs_up",
        final_x=0.0,
        final_section="run_out",
        time_s=time_s,
        mean_speed=progress / time_s,
        falls=[{"time": 1.0, "reason": "x", "x": 0.0, "section": "stairs_up"}] * falls,
        violations_per_episode={"velocity": 0.0, "effort": 0.0, "any": 0.0},
        violating_steps={"velocity": 0, "effort": 0, "any": 0},
        policy_steps=100,
        max_lateral_offset=0.0,
        lead_in_max_lateral_offset=0.0,
        lead_in_max_heading_error=0.0,
        section_times={},
        final_state="POLICY",
        fault=None,
        sim_time=1.0,
        wall_time=1.0,
    )


def test_course_bar_needs_a_crossing_at_speed_and_a_worse_blank_run():
    good = course_run(True, 23.4, 35.0)  # 0.67 m/s >= 0.8 x 0.75
    assert course_bar(good, course_run(False, 12.0, 30.0, falls=1))["passes"]
    same = course_bar(good, course_run(True, 23.4, 35.0))
    assert not same["blank_worse"] and not same["passes"]  # the scan made no difference
    slow = course_bar(course_run(True, 23.4, 40.0), course_run(False, 10.0, 30.0))  # 0.585 m/s < 0.6
    assert slow["crossed"] and not slow["at_speed"] and not slow["passes"]
    fell = course_bar(course_run(True, 23.4, 30.0, falls=1), course_run(False, 10.0, 30.0, falls=2))
    assert not fell["no_fall"] and not fell["passes"]
    assert blank_worse_reasons(good, course_run(True, 23.4, 39.0)) == ["mean speed 0.90 of the map run's"]
    assert blank_worse_reasons(good, course_run(True, 23.4, 38.0)) == []  # 0.92: within the noise allowed
    assert blank_worse_reasons(course_run(False, 10.0, 20.0), course_run(False, 9.4, 20.0)) == ["0.60 m less progress"]
    assert blank_worse_reasons(good, course_run(False, 23.3, 39.0)) == ["did not cross"]


def test_section_times_say_where_a_slow_crossing_lost_its_time():
    """A base at 0.5 m/s that waits 10 s at the first riser: the stairs take their 2.4 s at pace plus
    the wait, every other section its pace; a section never got through has no time."""
    course = generate_course()
    stairs = course.section("stairs_up")
    dt, v = 0.02, 0.5
    xs, ts, x, t = [], [], course.start[0], 0.0
    waited = 0.0
    while x < course.finish_x + 0.1:
        xs.append(x)
        ts.append(t)
        t += dt
        if x >= stairs.x_start and waited < 10.0:
            waited += dt  # stands at the riser
        else:
            x += v * dt
    times = section_times(np.array(ts), np.array(xs), course)
    pace = section_pace(course, v)
    assert list(times) == list(pace) and pace["lead_in"] == pytest.approx(4.0 / v)
    assert times["stairs_up"] == pytest.approx(pace["stairs_up"] + 10.0, abs=0.05)
    for name in ("lead_in", "slope_up", "blocks", "run_out"):
        assert times[name] == pytest.approx(pace[name], abs=0.05), name
    assert pace["run_out"] == pytest.approx(1.0 / v)  # to the finish line, 1 m into the run-out
    stopped = np.array(xs) < stairs.x_end - 0.3  # the same drive, ended on the stairs
    partial = section_times(np.array(ts)[stopped], np.array(xs)[stopped], course)
    assert partial["flat_1"] == pytest.approx(pace["flat_1"], abs=0.05)
    assert partial["stairs_up"] is None and partial["run_out"] is None


def test_evaluate_course_end_to_end(tmp_path, monkeypatch, capsys):
    """A roller (wheels at 5 rad/s, 0.5 m/s) for 3 s of driving: progress about 1.5 m, both map modes
    the same (it reads no scan), so the bar fails on 'blank measurably worse'; both files written."""
    shorten_sequences(monkeypatch, forward_s=1.0, stop_s=0.5)
    roller = roller_policy(tmp_path / "roll.onnx")
    out = tmp_path / "eval"
    argv = ["--course", "--policy", f"roll={roller}", "--out", str(out), "--time-limit", "3", "--no-progress"]
    assert evaluate.main(argv) == 0
    data = json.loads((out / "evaluation.json").read_text())
    assert data["policies"][0]["name"] == "roll"  # the flat part is still there
    c = data["course"]
    assert c["description"]["seed"] == COURSE_SEED and c["speed"] == 0.75 and c["time_limit_s"] == 3.0
    runs = c["policies"]["roll"]
    expected = 5.0 * WHEEL.radius * 3.0
    for mode in ("map", "blank"):
        r = runs[mode]
        assert r["end"] == "time limit" and not r["crossed"] and r["falls"] == []
        assert r["progress_m"] == pytest.approx(expected, abs=0.25) and r["section_reached"] == "lead_in"
        assert r["time_s"] == pytest.approx(3.0, abs=0.05)
        assert r["mean_speed"] == pytest.approx(0.5, abs=0.1)
        assert r["progress_fraction"] == pytest.approx(r["progress_m"] / 23.4)
    assert runs["map"]["progress_m"] == runs["blank"]["progress_m"]
    assert c["bar"]["roll"] == {
        "crossed": False,
        "no_fall": True,
        "at_speed": False,
        "blank_worse": False,
        "blank_worse_because": [],
        "passes": False,
    }
    md = (out / "evaluation.md").read_text()
    assert "## Terrain course" in md and "| roll | map | time limit |" in md and "| roll | blank |" in md
    assert runs["map"]["section_times"] == {name: None for name in runs["map"]["section_times"]}  # in the lead-in
    assert "| roll | map | – | – |" in md and "lead_in (5.3 s)" in md  # 4 m of lead-in at 0.75 m/s
    assert "| roll |" in md.split("## Terrain course")[0]  # the flat table before it


def test_evaluate_course_arguments_and_help(tmp_path, capsys):
    policy = str(FLAT_NP3O)
    assert evaluate.main(["--course", "--speed", "1.5", "--policy", f"a={policy}", "--out", str(tmp_path)]) == 2
    assert "0.5 - 1.0" in capsys.readouterr().err
    argv = ["--course-only", "--baseline", "a", "--policy", f"a={policy}", "--out", str(tmp_path)]
    assert evaluate.main(argv) == 2
    assert "--course-only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    text = capsys.readouterr().out
    for phrase in ("--course", "--course-only", "--speed", "--seed", "--time-limit", "blanked", "15 cm", "25 %"):
        assert phrase in text, phrase


def test_aow_sim2sim_drives_the_course_only_on_the_course(capsys):
    with pytest.raises(SystemExit):
        sim2sim_main(["--policy", str(FLAT_NP3O), "--drive", "0.75"])  # flat ground: no course to drive
    assert "--terrain course" in capsys.readouterr().err
    assert sim2sim_main(["--policy", str(FLAT_NP3O), "--terrain", "course", "--drive", "0.75", "--duration", "4",
                         "--blank-map", "--no-progress"]) == 0  # fmt: skip
    assert "course: time limit; progress" in capsys.readouterr().out


# ---- the bar end to end, with policies that cross ---------------------------------------------

# A milder course than issue 16's (5 % slope, 3 cm risers, +-3 cm blocks, shorter stretches): a robot
# rolling on its wheels with its legs held crosses it; the evaluation and its bar are the same.
MILD_COURSE = CourseConfig(
    lead_in=2.0, slope=0.05, slope_run=1.0, plateau=1.0, flat=1.0, step_height=0.03, steps=2, landing=1.0,
    blocks_length=2.0, blocks_band=2.0, block_height=0.03, num_blocks=6, run_out=2.0,
)  # fmt: skip
RELIEF_CAP = 0.25  # scan observation units (5 per metre): 5 cm of relief or more counts as much as 5 cm


def relief_roller_policy(path: Path, relief_boost: float) -> Path:
    """An analytic ONNX policy: legs at the default pose, wheels at the commanded forward speed
    (wheel action 1.0 is 5 rad/s, 0.5 m/s on the 0.1 m wheels, so action = 2 vx), plus
    ``relief_boost`` x the spread of its height scan (max - min, capped at RELIEF_CAP): on a flat map
    the spread is 0, so with the map blanked it drives exactly as with ``relief_boost`` 0."""
    layout = locomotion_layout(ROBOT, height_scan=True)
    wheels = np.array([0.0 if j.kind == "leg" else 1.0 for j in ROBOT.joints], np.float32)
    command, scan = layout.term("velocity_commands").slice, layout.term("height_scan").slice
    weights = np.zeros((layout.dim, len(wheels)), np.float32)
    weights[command.start] = 2.0 * wheels / layout.term("velocity_commands").scale
    constants = {
        "w": weights,
        "b": np.zeros(len(wheels), np.float32),
        "scan_start": np.array([scan.start], np.int64),
        "scan_end": np.array([scan.stop], np.int64),
        "axis": np.array([1], np.int64),
        "cap": np.array([[RELIEF_CAP]], np.float32),
        "boost": (relief_boost * wheels)[None, :],
    }
    nodes = [
        helper.make_node("Gemm", ["obs", "w", "b"], ["drive"]),
        helper.make_node("Slice", ["obs", "scan_start", "scan_end", "axis"], ["scan"]),
        helper.make_node("ReduceMax", ["scan"], ["highest"], axes=[1], keepdims=1),
        helper.make_node("ReduceMin", ["scan"], ["lowest"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["highest", "lowest"], ["spread"]),
        helper.make_node("Min", ["spread", "cap"], ["relief"]),
        helper.make_node("MatMul", ["relief", "boost"], ["extra"]),
        helper.make_node("Add", ["drive", "extra"], ["actions"]),
    ]
    graph = helper.make_graph(
        nodes,
        "relief_roller",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", layout.dim])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", len(wheels)])],
        [numpy_helper.from_array(np.asarray(v, dtype=v.dtype), k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    helper.set_model_props(model, {METADATA_KEY: contract_to_json(policy_contract_for(ROBOT, layout))})
    onnx.save(model, path)
    return path


def test_evaluate_course_passes_a_policy_that_crosses_and_uses_its_map(tmp_path, monkeypatch):
    """python -m sim2sim.evaluate --course-only over the mild course at 0.5 m/s. 'relief' crosses
    with the map, faster over the obstacles, and blanked (no relief seen) at the commanded speed:
    the bar passes. 'blind' (the same roller, no use of its scan) crosses at speed both times, the
    two runs identical: it fails on 'blank measurably worse' alone."""
    monkeypatch.setattr(evaluate, "COURSE", MILD_COURSE)
    monkeypatch.setattr(evaluate, "STAND_UP_S", 0.5)
    relief = relief_roller_policy(tmp_path / "relief.onnx", relief_boost=4.0)
    blind = relief_roller_policy(tmp_path / "blind.onnx", relief_boost=0.0)
    out = tmp_path / "eval"
    argv = ["--course-only", "--policy", f"relief={relief}", "--policy", f"blind={blind}", "--speed", "0.5",
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert evaluate.main(argv) == 0
    c = json.loads((out / "evaluation.json").read_text())["course"]
    length = generate_course(MILD_COURSE).length
    assert c["description"]["length_m"] == pytest.approx(length) and c["speed"] == 0.5
    runs = c["policies"]
    for name, mode in itertools.product(("relief", "blind"), ("map", "blank")):
        r = runs[name][mode]
        assert r["crossed"] and r["end"] == "crossed" and r["falls"] == [], (name, mode)
        assert r["progress_m"] == pytest.approx(length, abs=0.1) and r["section_reached"] == "run_out"
    for r in (runs["blind"]["map"], runs["blind"]["blank"], runs["relief"]["blank"]):
        assert r["mean_speed"] == pytest.approx(0.5, abs=0.05)  # the commanded speed, nothing seen
    assert runs["relief"]["map"]["mean_speed"] > runs["relief"]["blank"]["mean_speed"]  # sped up where it saw relief
    assert runs["blind"]["map"]["time_s"] == runs["blind"]["blank"]["time_s"]  # blanking changed nothing
    ratio = runs["relief"]["blank"]["mean_speed"] / runs["relief"]["map"]["mean_speed"]
    assert c["bar"]["relief"] == {
        "crossed": True,
        "no_fall": True,
        "at_speed": True,
        "blank_worse": True,
        "blank_worse_because": [f"mean speed {ratio:.2f} of the map run's"],
        "passes": True,
    }
    assert c["bar"]["blind"] == {
        "crossed": True,
        "no_fall": True,
        "at_speed": True,
        "blank_worse": False,
        "blank_worse_because": [],
        "passes": False,
    }
    md = (out / "evaluation.md").read_text()
    assert "| relief | True | True | True | True (mean speed" in md
    assert "| blind | True | True | True | False | False |" in md


def _relief_at_half_and_full_speed(tmp_path, monkeypatch, *extra: str) -> tuple[Path, dict]:
    """sim2sim.evaluate --course-only of the relief roller over the mild course at 0.5 and 1.0 m/s,
    with a time limit (1.1 x the strip's length at 1.0 m/s) that lets it cross at 1.0 m/s and stops
    it at 0.5 m/s; ``extra`` arguments added. Returns the output directory and evaluation.json."""
    monkeypatch.setattr(evaluate, "COURSE", MILD_COURSE)
    monkeypatch.setattr(evaluate, "STAND_UP_S", 0.5)
    relief = relief_roller_policy(tmp_path / "relief.onnx", relief_boost=4.0)
    length = generate_course(MILD_COURSE).length
    out = tmp_path / "eval"
    argv = ["--course-only", "--policy", f"relief={relief}", "--speed", "0.5", "1.0", *extra,
            "--time-limit", f"{1.1 * length:.2f}", "--out", str(out), "--no-progress"]  # fmt: skip
    assert evaluate.main(argv) == 0
    return out, json.loads((out / "evaluation.json").read_text())


def test_evaluate_course_at_several_speeds_tables_the_bar_per_speed(tmp_path, monkeypatch):
    """--speed 0.5 1.0 drives the mild course once per speed ("course_0.5", "course_1") and tables the
    bar per speed. The time limit (1.1 x the strip's length at 1.0 m/s) lets the roller cross at
    1.0 m/s and stops it at 0.5 m/s, so the bar passes at one speed and fails at the other."""
    out, data = _relief_at_half_and_full_speed(tmp_path, monkeypatch)
    assert "course" not in data and data["course_0.5"]["speed"] == 0.5 and data["course_1"]["speed"] == 1.0
    assert data["course_1"]["policies"]["relief"]["map"]["crossed"]
    assert data["course_0.5"]["policies"]["relief"]["map"]["end"] == "time limit"
    assert data["course_bar_by_speed"] == {
        "relief": {
            "passes_at": [1.0],
            "fails_at": [0.5],
            "passes_all": False,
            "failed_checks": {"0.5": ["crossed", "at_speed"]},  # JSON keys are strings; blanked it went less far
            "map_run_passes_at": [1.0],
        }
    }
    md = (out / "evaluation.md").read_text()
    assert "## Terrain course at 0.5 m/s" in md and "## Terrain course at 1 m/s" in md
    assert "| policy | 0.5 m/s | 1 m/s | all speeds | map run at speed, no fall |" in md
    assert "| relief | fails: not crossed, slow | passes | False | 1 of 2 |" in md
    # The map's effect over the two drives: the roller drives alike blanked (crossing at 1.0 m/s,
    # timed out at 0.5), so with 1 of 2 passes each the one-sided exact p is 5/6: not worse.
    effect = data["course_scan_effect"]["relief"]
    assert effect["all"] == {"drives": 2, "map": 1, "blank": 1, "p": pytest.approx(5 / 6)}
    assert not effect["measurably_worse"]
    assert "## The map's effect over the course drives" in md
    assert "| relief | **all speeds** | 2 | 1 | 1 | **0.83: not measurably worse** |" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--course", "--speed", "0.5", "1.2"], "1.2"),  # each speed checked
        (["--course", "--speed", "0.5", "0.5"], "twice"),  # and given once
        (["--block-only", "--seed", "7", "8"], "several --seed values"),  # several fields need the course
        (["--course", "--seed", "7", "7"], "--seed: a seed given twice"),
        (["--block-only", "--spawn", "1.2"], "--spawn sets where the terrain course starts"),
        (["--course", "--spawn", "1", "1"], "--spawn: a start given twice"),
        (["--course", "--spawn", "11"], "--spawn: 11 m lies on the course strip's flat_1, not its lead-in"),
        (["--course", "--spawn", "9"], "--spawn: course spawn 9.0 m lies on slope_down"),
    ],
)
def test_evaluate_course_speeds_and_seeds_are_checked(tmp_path, capsys, args, message):
    assert evaluate.main([*args, "--policy", f"a={FLAT_NP3O}", "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_evaluate_course_on_several_block_fields_tables_the_drives_over_them(tmp_path, monkeypatch):
    """--seed 7 8 with --speed 0.5 1.0: each speed on each field ("course_0.5_seed7", ...), the bar
    per speed per field, and a table over the fields. As in the test above, the roller crosses at
    1.0 m/s and times out at 0.5 m/s, with the map and blanked, on both fields."""
    out, data = _relief_at_half_and_full_speed(tmp_path, monkeypatch, "--seed", "7", "8")
    assert {k for k in data if k.startswith("course_")} == {
        "course_0.5_seed7", "course_1_seed7", "course_0.5_seed8", "course_1_seed8",
        "course_bar_by_speed_seed7", "course_bar_by_speed_seed8", "course_over_fields", "course_scan_effect",
    }  # fmt: skip
    assert data["course_1_seed8"]["description"]["seed"] == 8
    assert data["course_over_fields"]["relief"] == {
        "per_speed": {
            "0.5": {"drives": 2, "bar": 0, "map_run": 0, "blank_clean": 0},
            "1": {"drives": 2, "bar": 2, "map_run": 2, "blank_clean": 2},
        },
        "all": {"drives": 4, "bar": 2, "map_run": 2, "blank_clean": 2},
    }
    md = (out / "evaluation.md").read_text()
    assert "## Terrain course at 1 m/s, block field seed 8" in md
    assert "## The course bar over speeds (block field seed 7)" in md
    assert "## Over the block fields (seeds 7, 8)" in md
    assert "| relief | 1 m/s | 2 of 2 | 2 of 2 | 2 of 2 |" in md
    assert "| relief | all speeds | 2 of 4 | 2 of 4 | 2 of 4 |" in md


def test_evaluate_course_from_several_starts_tables_the_drives_over_them(tmp_path, monkeypatch):
    """--spawn 1.0 1.2 with --speed 0.5 1.0: each speed from each start along the lead-in
    ("course_0.5_start1.2", ...), the bar per speed per start, and the table over the starts."""
    out, data = _relief_at_half_and_full_speed(tmp_path, monkeypatch, "--spawn", "1.0", "1.2")
    assert {k for k in data if k.startswith("course_")} == {
        "course_0.5_start1", "course_1_start1", "course_0.5_start1.2", "course_1_start1.2",
        "course_bar_by_speed_start1", "course_bar_by_speed_start1.2", "course_over_fields", "course_scan_effect",
    }  # fmt: skip
    x0 = generate_course(MILD_COURSE).start[0]
    assert data["course_1_start1.2"]["description"]["start_xy"][0] == pytest.approx(x0 + 0.2)
    assert data["course_over_fields"]["relief"]["all"] == {"drives": 4, "bar": 2, "map_run": 2, "blank_clean": 2}
    md = (out / "evaluation.md").read_text()
    assert "## Terrain course at 1 m/s, start 1.2 m" in md
    assert "## The course bar over speeds (start 1 m)" in md
    assert "## Over the starts (1, 1.2 m)" in md
    assert "| relief | 0.5 m/s | 0 of 2 | 0 of 2 | 0 of 2 |" in md
