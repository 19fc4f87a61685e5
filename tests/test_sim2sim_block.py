"""The 20 cm block of the paper's robot experiment A: its heights, the terrain, --drive and sim2sim.evaluate --block.

The block strip is the course's machinery with the "block" layout (sim2sim.course.block_config):
a 5 m lead-in (spawn at 1 m), the 0.3 m block_up tread and the 0.9 m block_top at 0.20 m, the
0.3 m block_down tread back at 0 and a 4 m run-out (finish 1 m into it): 10.5 m long, centred on
the origin, so x runs from -5.25 to 5.25. Heights are read from the compiled model, as in
test_sim2sim_course. The scripted relief roller of that file does not cross a 20 cm step (its legs
held, its 0.1 m wheels meet the riser and the base hits the ground on the lead-in), so the
evaluation end to end drives it over a 5 cm block of the same layout.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_sim2sim import ROBOT
from test_sim2sim_course import FLAT_NP3O, float_tolerance, relief_roller_policy

from sim2sim import course_eval, evaluate
from sim2sim.cli import main as sim2sim_main
from sim2sim.course import COURSE_SEED, CourseConfig, block_config, generate_course, strip_config
from sim2sim.world import DEFAULT_SEEDS, TERRAINS, build_world

# name, x_start, x_end (world m), by hand from the lengths above
BLOCK_SECTIONS = [
    ("lead_in", -5.25, -0.25),
    ("block_up", -0.25, 0.05),
    ("block_top", 0.05, 0.95),
    ("block_down", 0.95, 1.25),
    ("run_out", 1.25, 5.25),
]
# A 5 cm block on a 1 m run-up and a 2 m run-out (finish 1 m in): 1 + 0.3 + 0.9 + 0.3 + 1 = 3.5 m
MILD_BLOCK = replace(block_config(0.05), lead_in=2.0, run_out=2.0)


@pytest.fixture(scope="module")
def block_world():
    return build_world(ROBOT, "block", physics_dt=1.0 / 400.0)


# ---- the strip ---------------------------------------------------------------------------------


def test_block_terrain_is_experiment_a_strip_with_its_sections(block_world):
    course = block_world.course
    assert "block" in TERRAINS and DEFAULT_SEEDS["block"] == COURSE_SEED
    assert course is not None and course.config == block_config() and course.config.layout == "block"
    assert [(s.name, s.x_start, s.x_end) for s in course.sections] == BLOCK_SECTIONS
    assert [s.kind for s in course.sections] == ["flat", "stairs_up", "flat", "stairs_down", "flat"]
    assert course.start == (-4.25, 0.0) and block_world.spawn_xy == (-4.25, 0.0)  # a 4 m run-up
    assert course.finish_x == 2.25 and course.length == pytest.approx(6.5)
    assert course.first_obstacle_x == -0.25
    described = json.loads(json.dumps(course.describe()))
    assert described["layout"] == "block" and described["step_height_m"] == 0.2 and described["steps"] == 1


def test_block_is_20_cm_high_over_its_1_2_m_and_each_edge_one_sample_wide(block_world):
    course, h, tol = block_world.course, block_world.heights, float_tolerance(block_world)
    res = course.resolution
    xs = np.round(np.arange(-5.25, 5.25 + res / 2, res), 9)  # every sample along x
    on_top = (xs >= -0.25 - 1e-9) & (xs < 0.95 - 1e-9)  # block_up and block_top, the far edge's sample excluded
    assert np.count_nonzero(on_top) == 60  # 1.2 m of samples at 0.02 m
    for y in (-2.5, 0.0, 1.3):
        np.testing.assert_allclose(h(xs, y), np.where(on_top, 0.2, 0.0), atol=tol)
    # The ramps: the cell before the rising edge and the cell before the falling one, linear between.
    assert float(h(-0.26, 0.0)) == pytest.approx(0.1, abs=tol) and float(h(0.94, 0.0)) == pytest.approx(0.1, abs=tol)
    assert float(h(-0.27, 0.0)) == pytest.approx(0.0, abs=tol) and float(h(-0.25, 0.0)) == pytest.approx(0.2, abs=tol)
    assert float(h(0.93, 0.0)) == pytest.approx(0.2, abs=tol) and float(h(0.95, 0.0)) == pytest.approx(0.0, abs=tol)
    assert course.section_at(0.94) == "block_top" and course.section_at(0.95) == "block_down"


def test_block_config_and_layout_validation():
    cfg = block_config()
    assert (cfg.layout, cfg.steps, cfg.step_height, cfg.step_width, cfg.landing) == ("block", 1, 0.2, 0.3, 0.9)
    assert (cfg.lead_in, cfg.spawn, cfg.run_out, cfg.finish) == (5.0, 1.0, 4.0, 1.0)  # the course's
    assert block_config(0.1).step_height == 0.1 and CourseConfig().layout == "course"
    mild = generate_course(MILD_BLOCK)
    assert mild.length == pytest.approx(3.5) and float(mild.heights.max()) == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"layout must be one of \('course', 'block'\), got 'stairs'"):
        generate_course(CourseConfig(layout="stairs"))
    with pytest.raises(ValueError, match="steps must be 1, got 2"):
        generate_course(replace(cfg, steps=2))
    with pytest.raises(ValueError, match="steps must be 1, got 4"):
        CourseConfig(layout="block").validate()  # the course's 4 steps


def test_each_strip_terrain_takes_its_own_layout_only():
    assert strip_config("block") == block_config() and strip_config("course") == CourseConfig()
    assert strip_config("block", MILD_BLOCK) is MILD_BLOCK
    with pytest.raises(ValueError, match="terrain 'block' needs a strip of layout 'block', got layout 'course'"):
        build_world(ROBOT, "block", course=CourseConfig())
    with pytest.raises(ValueError, match="terrain 'course' needs a strip of layout 'course', got layout 'block'"):
        build_world(ROBOT, "course", course=block_config())
    with pytest.raises(ValueError, match="no strip"):
        strip_config("rough")


def test_strip_titles_name_experiment_a_only_for_its_block():
    assert course_eval.strip_title(block_config()) == "20 cm block (the paper's experiment A)"
    assert course_eval.strip_title(MILD_BLOCK) == "5 cm block"
    assert course_eval.strip_title(CourseConfig()) == "Terrain course"


# ---- aow-sim2sim --terrain block --drive ---------------------------------------------------------


def test_aow_sim2sim_drives_the_block(capsys):
    """The shipped flat policy, 2 s of driving at 1.0 m/s: on the run-up, the summary names the block's length."""
    assert sim2sim_main(["--policy", str(FLAT_NP3O), "--terrain", "block", "--drive", "1.0", "--duration", "4",
                         "--no-progress", "--json"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("block: "))
    assert line.startswith("block: time limit; progress ") and " m of 6.5 m " in line
    assert "furthest in lead_in" in line
    progress = float(line.split("progress ")[1].split(" m")[0])
    assert 0.8 < progress < 2.2  # up to 2 m in 2 s at 1.0 m/s, the first of it speeding up
    assert json.loads(out.splitlines()[-1])["terrain"] == "block"
    with pytest.raises(SystemExit):
        sim2sim_main(["--policy", str(FLAT_NP3O), "--terrain", "rough", "--drive", "1.0"])
    assert "--terrain course or --terrain block" in capsys.readouterr().err


# ---- sim2sim.evaluate --block ----------------------------------------------------------------------


def test_evaluate_block_only_end_to_end(tmp_path, monkeypatch):
    """--block-only over a 5 cm block at the block's fixed 1.0 m/s: the relief roller crosses with
    the map and blanked, faster where its map shows the block, so blanked is measurably worse and the
    bar passes; no flat part, no course."""
    monkeypatch.setattr(evaluate, "BLOCK", MILD_BLOCK)
    monkeypatch.setattr(evaluate, "STAND_UP_S", 0.5)
    relief = relief_roller_policy(tmp_path / "relief.onnx", relief_boost=4.0)
    out = tmp_path / "eval"
    argv = ["--block-only", "--policy", f"relief={relief}", "--out", str(out), "--no-progress"]
    assert evaluate.main(argv) == 0
    data = json.loads((out / "evaluation.json").read_text())
    assert set(data) == {"block", "leg_actuators", "identities"}  # neither the flat sequences nor the course
    b = data["block"]
    assert b["description"]["layout"] == "block" and b["description"]["length_m"] == pytest.approx(3.5)
    assert b["speed"] == 1.0 and b["time_limit_s"] == pytest.approx(7.0)  # 3.5 m at half the speed
    runs = b["policies"]["relief"]
    for mode in ("map", "blank"):
        r = runs[mode]
        assert r["crossed"] and r["end"] == "crossed" and r["falls"] == [] and r["section_reached"] == "run_out"
        assert r["progress_m"] == pytest.approx(3.5, abs=0.1) and r["speed"] == 1.0
    assert runs["blank"]["mean_speed"] == pytest.approx(1.0, abs=0.1)  # nothing seen: the command
    assert runs["map"]["mean_speed"] > 1.1  # it saw the block and sped up
    ratio = runs["blank"]["mean_speed"] / runs["map"]["mean_speed"]
    assert b["bar"]["relief"] == {
        "crossed": True,
        "no_fall": True,
        "at_speed": True,
        "blank_worse": True,
        "blank_worse_because": [f"mean speed {ratio:.2f} of the map run's"],
        "passes": True,
    }
    md = (out / "evaluation.md").read_text()
    # a 5.5 m strip from x -2.75: start 1 m in, the block 2 m in, the run-out 3.5 m in, its finish 1 m further
    assert md.startswith("Policies:\n\n- relief: ") and md.count("\n- ") == 1  # one policy named, then the strip
    assert "\n\n## 5 cm block\n\n5 cm block: start x -1.75 m, block from x -0.75 to 0.45 m (1.2 m), " in md
    assert "finish x 1.75 m (3.5 m from the start)" in md and "Commanded 1 m/s" in md
    assert "| relief | map | crossed |" in md and "| relief | True | True | True | True (mean speed" in md


def test_evaluate_puts_the_experiment_a_block_after_the_course(tmp_path, monkeypatch):
    """--course-only --block with the strips' drives stubbed: the course at --speed, then the 20 cm
    block at 1.0 m/s, --time-limit to both, each part under its heading and JSON key."""
    calls = []

    def fake_strip(policies, config, speed, *, seed, time_limit, progress, leg_actuators):
        assert leg_actuators == {"a": "pd"}  # the shipped flat policy's contract predates the field
        calls.append((config, speed, seed, time_limit))
        return f"{config.layout} table\n", {"layout": config.layout}

    monkeypatch.setattr(evaluate, "evaluate_strip", fake_strip)
    out = tmp_path / "eval"
    argv = ["--course-only", "--block", "--policy", f"a={FLAT_NP3O}", "--speed", "0.6", "--seed", "7",
            "--time-limit", "9", "--out", str(out), "--no-progress"]  # fmt: skip
    assert evaluate.main(argv) == 0
    assert calls == [(evaluate.COURSE, 0.6, 7, 9.0), (block_config(), 1.0, COURSE_SEED, 9.0)]
    md = (out / "evaluation.md").read_text()
    strips = "## Terrain course\n\ncourse table\n\n## 20 cm block (the paper's experiment A)\n\nblock table\n"
    assert md.startswith("Policies:\n\n- a: ") and md.endswith(f")\n\n{strips}")
    data = json.loads((out / "evaluation.json").read_text())
    assert data.pop("identities")["a"]["training"]["iteration"] == 250  # the shipped flat policy's
    assert data == {
        "course": {"layout": "course"},
        "block": {"layout": "block"},
        "leg_actuators": {"a": "pd"},
    }


def test_evaluate_block_arguments_and_help(tmp_path, capsys):
    policy = f"a={FLAT_NP3O}"
    assert evaluate.main(["--block-only", "--baseline", "a", "--policy", policy, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--baseline compares the flat sequences, which --block-only leaves out" in err
    assert evaluate.main(["--block-only", "--course", "--policy", policy, "--out", str(tmp_path)]) == 2
    assert "--block-only drives the block alone" in capsys.readouterr().err
    for strips in (["--block-only"], ["--block"]):  # a --speed nothing would use is refused, not dropped
        assert evaluate.main([*strips, "--speed", "0.5", "--policy", policy, "--out", str(tmp_path)]) == 2
        assert "--speed sets the terrain course's speed (--course)" in capsys.readouterr().err
    assert evaluate.main(["--block", "--time-limit", "0", "--policy", policy, "--out", str(tmp_path)]) == 2
    assert "--time-limit must be positive" in capsys.readouterr().err
    assert not (tmp_path / "evaluation.md").exists()
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    text = capsys.readouterr().out
    for phrase in ("--block", "--block-only", "experiment A", "20 cm", "1.0 m/s", "1.2 m", "JSON key ``block``"):
        assert phrase in text, phrase
