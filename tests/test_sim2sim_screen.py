"""python -m sim2sim.screen: many policies over the course with the map only, in worker processes.

The drives use the mild course and the command-following rollers of test_sim2sim_course (a roller
crosses the mild course at the commanded speed); the cells' wording is checked on hand-made results.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from test_sim2sim_course import MILD_COURSE, relief_roller_policy

from sim2sim import screen
from sim2sim.course import generate_course
from sim2sim.policy_args import named_path_items, parse_named_paths


def test_screen_tables_each_policy_per_speed_and_seed_from_worker_processes(tmp_path, monkeypatch, capsys):
    """Two rollers at 0.5 and 1.0 m/s on two seeds, with a time limit (1.1 x the strip's length at
    1.0 m/s) that lets them cross at 1.0 m/s only: 2 of 4 drives pass per policy. Two worker
    processes: the milder course reaches them inside each drive, not through this process's module."""
    monkeypatch.setattr(screen, "COURSE", MILD_COURSE)
    monkeypatch.setattr(screen, "STAND_UP_S", 0.5)
    relief = relief_roller_policy(tmp_path / "relief.onnx", relief_boost=4.0)
    blind = relief_roller_policy(tmp_path / "blind.onnx", relief_boost=0.0)
    length = generate_course(MILD_COURSE).length
    out = tmp_path / "screen"
    argv = [str(relief), f"b={blind}", "--speed", "0.5", "1.0", "--seed", "1616", "7", "--jobs", "2",
            "--time-limit", f"{1.1 * length:.2f}", "--out", str(out), "--no-progress"]  # fmt: skip
    assert screen.main(argv) == 0
    data = json.loads((out / "screen.json").read_text())
    assert data["policies"] == {"relief": str(relief), "b": str(blind)}
    assert data["identities"]["b"]["sha256"] == hashlib.sha256(blind.read_bytes()).hexdigest()
    assert len(data["drives"]) == 8
    for d in data["drives"]:
        assert d["falls"] == [] and d["fault"] is None
        # each record names its start and its column (one start: the strip's own, unnamed in the column)
        assert d["spawn"] == MILD_COURSE.spawn and d["column"] == f"{d['speed']:g} m/s, seed {d['seed']}"
        assert d["resolution_m"] == MILD_COURSE.resolution
        if d["speed"] == 1.0:
            assert d["passes"] and d["crossed"] and d["at_speed"] and d["section_reached"] == "run_out"
        else:
            assert not d["passes"] and not d["crossed"] and d["end"] == "time limit"
            if d["policy"] == "b":  # at the commanded 0.5 m/s: about half the strip in the time limit
                assert d["progress_m"] == pytest.approx(0.5 * 1.1 * length, rel=0.1)
    for name in ("relief", "b"):
        assert data["summary"][name]["passed"] == 2 and data["summary"][name]["of"] == 4
        assert data["summary"][name]["fails_at"] == ["0.5 m/s, seed 1616", "0.5 m/s, seed 7"]
    md = (out / "screen.md").read_text()
    assert "- b: `" in md and "- relief: `" in md  # named with their hashes
    assert "| policy | 0.5 m/s, seed 1616 | 1 m/s, seed 1616 | 0.5 m/s, seed 7 | 1 m/s, seed 7 | passed |" in md
    row = next(line for line in md.splitlines() if line.startswith("| b |"))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[0].startswith("time limit: ") and re.fullmatch(r"pass 0\.9\d", cells[1]) and cells[4] == "2 of 4"
    by_speed = md.split("Passed per speed, over the fields:")[1]  # two fields: a table per speed
    assert "| policy | 0.5 m/s | 1 m/s |" in by_speed and "| b | 0 of 2 | 2 of 2 |" in by_speed
    # the roller that speeds up where its scan shows relief is faster over the mild course's obstacles
    fast = {(d["policy"], d["seed"]): d["mean_speed"] for d in data["drives"] if d["speed"] == 1.0}
    assert fast[("relief", 7)] > fast[("b", 7)]
    crossed = next(d for d in data["drives"] if d["policy"] == "b" and d["crossed"])
    slowest = crossed["slowest_section"]  # named with its seconds and its time at the commanded speed
    assert slowest["seconds"] == crossed["section_times"][slowest["name"]]
    assert slowest["seconds"] >= slowest["pace_s"] * 0.9 > 0
    assert md in capsys.readouterr().out


def test_cells_name_the_first_reason_a_drive_fails():
    base = {"passes": False, "crossed": True, "mean_speed": 0.55, "falls": [], "fault": None, "end": "crossed",
            "section_reached": "run_out", "final_section": "run_out"}  # fmt: skip
    assert screen.cell({**base, "passes": True, "mean_speed": 0.684}) == "pass 0.68"
    assert screen.cell(base) == "slow 0.55"
    stairs = {"name": "stairs_up", "seconds": 8.4, "pace_s": 2.0}
    assert screen.cell({**base, "slowest_section": stairs}) == "slow 0.55, stairs_up 4.2×"
    falls = [{"section": "stairs_up"}, {"section": "landing"}]
    assert screen.cell({**base, "falls": falls}) == "fell: stairs_up (+1)"
    stalled = {**base, "crossed": False, "end": "stalled", "section_reached": "stairs_down"}
    assert screen.cell(stalled) == "stalled: stairs_down"
    assert screen.cell({**stalled, "fault": "DAMPING", "final_section": "landing"}) == "fault: landing"


def test_block_is_driven_once_whatever_the_seeds(tmp_path):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(b"")
    drives = screen.drives_for({"p": policy}, [0.5, 1.0], [1, 2], block=True)
    columns = ["0.5 m/s, seed 1", "1 m/s, seed 1", "0.5 m/s, seed 2", "1 m/s, seed 2", "block"]
    assert [d.column for d in drives] == columns
    assert drives[-1].speed == screen.BLOCK_SPEED and drives[-1].strip.layout == "block"


def test_several_starts_drive_every_speed_and_the_block_from_each(tmp_path):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(b"")
    drives = screen.drives_for({"p": policy}, [0.5, 1.0], [1], block=True, spawns=[1.0, 1.2])
    assert [d.column for d in drives] == [
        "0.5 m/s, seed 1, start 1 m", "0.5 m/s, seed 1, start 1.2 m", "1 m/s, seed 1, start 1 m",
        "1 m/s, seed 1, start 1.2 m", "block, start 1 m", "block, start 1.2 m"]  # fmt: skip
    assert [d.strip.spawn for d in drives] == [1.0, 1.2, 1.0, 1.2, 1.0, 1.2]
    assert [d.strip.layout for d in drives] == ["course"] * 4 + ["block"] * 2
    one = screen.drives_for({"p": policy}, [0.5], [1], spawns=[1.2])  # one start: named as without
    assert [(d.column, d.strip.spawn) for d in one] == [("0.5 m/s, seed 1", 1.2)]


def test_a_resolution_redraws_every_strip_at_that_spacing_and_the_report_says_so(tmp_path):
    """--resolution 0.05 asks whether failures are the course's 82 degree risers (one 0.02 m cell
    wide) rather than training's 72 degree ones: every strip, the block's too, gets that spacing,
    and the report names it; without it the strips keep their own and the report says nothing."""
    policy = tmp_path / "p.onnx"
    drives = screen.drives_for({"p": policy}, [0.5], [1], block=True, spawns=[1.0, 1.1], resolution=0.05)
    assert [d.strip.resolution for d in drives] == [0.05] * 4
    assert [d.strip.spawn for d in drives] == [1.0, 1.1, 1.0, 1.1]
    results = [{"passes": True, "mean_speed": 0.5, "crossed": True, "falls": [], "fault": None, "end": "crossed",
                "section_reached": "run_out", "final_section": "run_out"}] * 4  # fmt: skip
    md, _ = screen.report(drives, results, {})
    assert "Height samples every 0.05 m (the strips' own: 0.02 m)" in md
    own = screen.drives_for({"p": policy}, [0.5], [1], block=True)
    assert {d.strip.resolution for d in own} == {screen.COURSE.resolution} == {0.02}
    assert "Height samples" not in screen.report(own, results[:2], {})[0]


def test_the_by_speed_table_gives_each_speeds_crossing_rate_over_the_starts(tmp_path):
    policy = tmp_path / "p.onnx"
    drives = screen.drives_for({"p": policy}, [0.5, 1.0], [1], block=True, spawns=[1.0, 1.1, 1.2])
    passes = [True, False, True, False, False, False, True, True, False]  # 0.5 x3, 1.0 x3, block x3
    results = [{"passes": ok, "mean_speed": 0.5, "crossed": ok, "falls": [], "fault": None, "end": "stalled",
                "section_reached": "stairs_up", "final_section": "stairs_up"} for ok in passes]  # fmt: skip
    md, payload = screen.report(drives, results, {})
    by_speed = md.split("Passed per speed, over the starts:")[1]
    assert "| policy | 0.5 m/s | 1 m/s | block |" in by_speed
    assert "| p | 2 of 3 | 0 of 3 | 2 of 3 |" in by_speed
    assert payload["summary"]["p"]["passed"] == 4 and payload["summary"]["p"]["of"] == 9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.onnx"], "no file or directory missing.onnx"),
        (["{p}", "--speed", "1.5"], "0.5 - 1.0"),
        (["{p}", "{p}"], "two policies would be named 'p'"),
        (["{p}", "--seed", "3", "3"], "given twice"),
        (["{p}", "--jobs", "0"], "--jobs"),
        (["{p}", "--time-limit", "-1"], "--time-limit"),
        (["{p}"], "not a loadable ONNX model"),  # an empty file: refused before any worker starts
        (["{p}", "--last", "0"], "--last"),
        (["{p}", "--spawn", "1.0", "1.0"], "given twice"),
        (["{p}", "--spawn", "11"], "--spawn: 11 m lies on the course strip's flat_1, not its lead-in"),
        (["{p}", "--spawn", "6"], "course spawn 6.0 m lies on slope_up"),
        (["missing_dir/"], "no file or directory"),
        (["{p}", "--resolution", "0"], "--resolution: course resolution must be positive"),
        (["{p}", "--resolution", "0.07"], "--resolution: course width 6.0 m is not a multiple of the resolution"),
        (["{p}", "--resolution", "0.05", "--spawn", "1.12"], "course spawn 1.12 m is not a multiple"),
    ],
)
def test_bad_arguments_are_refused_by_name(tmp_path, capsys, args, message):
    policy = tmp_path / "p.onnx"
    policy.write_bytes(b"")
    with pytest.raises(SystemExit) as exit_info:
        screen.main([a.format(p=policy) for a in args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_run_directories_and_checkpoints_are_named_by_iteration(tmp_path):
    run = tmp_path / "rough_line"
    run.mkdir()
    for it in (5, 10, 7):
        (run / f"model_{it}.pt").write_bytes(b"")
    (run / "model_best.pt").write_bytes(b"")  # not an iteration: ignored
    policies = named_path_items([str(run), f"x={run / 'model_5.pt'}", str(run / "model_7.pt")], directories=True)
    named = screen.checkpoints_to_screen([("rough_line", run)], last=2)
    assert named == {"rough_line_7": run / "model_7.pt", "rough_line_10": run / "model_10.pt"}
    assert screen.checkpoints_to_screen([policies[1]], last=1) == {"x_5": run / "model_5.pt"}
    unnamed = screen.checkpoints_to_screen([policies[2]], last=1)
    assert unnamed == {"rough_line_7": run / "model_7.pt"}  # named after its run directory
    with pytest.raises(ValueError, match="would be named 'rough_line_7'"):
        screen.checkpoints_to_screen(policies, last=2)  # the directory's 7 and the checkpoint's 7
    # one NAME for several checkpoints of a run: the iteration tells them apart
    same_name = named_path_items([f"spd={run / 'model_5.pt'}", f"spd={run / 'model_7.pt'}"], directories=True)
    assert screen.checkpoints_to_screen(same_name, last=1) == {"spd_5": run / "model_5.pt", "spd_7": run / "model_7.pt"}
    with pytest.raises(ValueError, match="would be named 'spd_5'"):
        screen.checkpoints_to_screen([*same_name, ("spd", run / "model_5.pt")], last=1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no checkpoints"):
        screen.checkpoints_to_screen(named_path_items([str(tmp_path / "empty")], directories=True), last=1)


def test_policy_items_are_named_once_and_must_exist(tmp_path):
    """evaluate and screen read ``[NAME=]PATH`` alike: the stem names an unnamed file, a name
    given twice is refused (it would have merged two policies into one row), and a directory is
    a policy only where the tool takes run directories."""
    a, b = tmp_path / "a.onnx", tmp_path / "sub" / "a.onnx"
    b.parent.mkdir()
    a.write_bytes(b"")
    b.write_bytes(b"")
    assert parse_named_paths([str(a), f"other={b}"]) == {"a": a, "other": b}
    with pytest.raises(ValueError, match="the name 'a' is given twice"):
        parse_named_paths([str(a), str(b)])
    with pytest.raises(ValueError, match="expected PATH or NAME=PATH"):
        parse_named_paths([f"={a}"])
    with pytest.raises(ValueError, match=r"no file .*missing\.onnx"):
        parse_named_paths([f"x={tmp_path / 'missing.onnx'}"])
    with pytest.raises(ValueError, match="no file"):
        parse_named_paths([f"x={tmp_path / 'sub'}"])  # evaluate takes files only
    assert parse_named_paths([f"x={tmp_path / 'sub'}"], directories=True) == {"x": tmp_path / "sub"}


def test_a_run_directory_is_exported_verified_and_screened(tmp_path, monkeypatch):
    """A real (tiny) training run: its latest checkpoint is exported with verification into
    OUT/policies/<run>_<it>.onnx, named by its contract in screen.md, and driven."""
    import training.envs  # noqa: F401
    from training.config import TrainConfig
    from training.networks import NetworkConfig
    from training.runner import Runner

    run = tmp_path / "tiny"
    cfg = TrainConfig(
        task="aow_flat", algo="np3o", num_envs=4, num_steps_per_env=8, iterations=1, save_interval=1,
        network=NetworkConfig(actor_hidden=(16, 16), critic_hidden=(16, 16), cost_critic_hidden=(16,)),
    )  # fmt: skip
    cfg.ppo.num_minibatches = 2
    Runner(cfg, run, progress=False, tensorboard=False).learn()
    monkeypatch.setattr(screen, "COURSE", MILD_COURSE)
    monkeypatch.setattr(screen, "STAND_UP_S", 0.5)
    out = tmp_path / "screen"
    argv = [str(run), "--speed", "0.5", "--time-limit", "1", "--jobs", "1", "--out", str(out), "--no-progress"]
    assert screen.main(argv) == 0
    onnx_file = out / "policies" / "tiny_1.onnx"
    assert onnx_file.is_file() and (out / "policies" / "tiny_1.yaml").is_file()
    data = json.loads((out / "screen.json").read_text())
    assert data["policies"] == {"tiny_1": str(onnx_file)}
    assert data["identities"]["tiny_1"]["training"]["iteration"] == 1
    [drive] = data["drives"]
    assert drive["policy"] == "tiny_1" and drive["end"] == "time limit" and not drive["passes"]
    assert "- tiny_1: `" in (out / "screen.md").read_text() and "it. 1" in (out / "screen.md").read_text()
