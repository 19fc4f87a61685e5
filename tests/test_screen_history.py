"""python -m sim2sim.screen_history: screens gathered into a line's course record by iteration.

The screen files are written by sim2sim.screen's own report() from hand-made drive results (the
keys sim2sim.screen.drive() records: test_sim2sim_screen checks those on real drives)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim2sim import screen
from sim2sim.screen_history import ScreenFileError, gather, main, series_name


def _identity(iteration: int) -> dict:
    return {
        "path": "x.onnx",
        "sha256": "0" * 64,
        "training": {
            "task": "t",
            "algorithm": "np3o",
            "iteration": iteration,
            "checkpoint": f"model_{iteration}.pt",
            "leg_actuator": "dc_motor",
        },
    }


def _write_screen(path: Path, passes: dict[str, list[bool]], seeds=(1616,), spawns=(1.0, 1.1, 1.2), resolution=None):
    """A screen of each policy at 0.5 and 1.0 m/s on ``seeds`` from ``spawns``, plus the block; a
    policy's drives pass as listed, in drives_for's order."""
    policies = {name: Path(f"{name}.onnx") for name in passes}
    drives = screen.drives_for(
        policies, [0.5, 1.0], list(seeds), block=True, spawns=list(spawns), resolution=resolution
    )
    results, used = [], dict.fromkeys(passes, 0)
    for d in drives:
        ok = passes[d.policy][used[d.policy]]
        used[d.policy] += 1
        results.append({"policy": d.policy, "layout": d.strip.layout, "speed": d.speed, "seed": d.seed,
                        "spawn": d.strip.spawn, "resolution_m": d.strip.resolution, "passes": ok,
                        "mean_speed": 0.5, "crossed": ok, "falls": [], "fault": None, "end": "stalled",
                        "section_reached": "stairs_up", "final_section": "stairs_up"})  # fmt: skip
    assert used == {name: len(p) for name, p in passes.items()}  # every listed result was used
    identities = {name: _identity(int(name.rsplit("_", 1)[1])) for name in passes}
    _, payload = screen.report(drives, results, identities)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def test_points_count_the_fields_course_drives_and_the_block_once_per_checkpoint(tmp_path):
    line = tmp_path / "rough_kappa_np3o"
    # six starts x two speeds = 6 course drives and 3 block drives per policy at three starts
    _write_screen(line / "screen_starts_10_20.json", {
        "kappa_10": [True, True, False, True, False, False, True, True, False],
        "kappa_20": [True] * 9,
        "avg_20": [False] * 6 + [True] * 3,
    })  # fmt: skip
    # it. 10 again from one start (fewer drives: the six-start record stands), on another field too
    _write_screen(line / "screen_one_start_10.json", {"kappa_10": [True] * 5}, seeds=(1616, 7), spawns=(1.0,))
    # at training's spacing: not the course's own, left out
    _write_screen(line / "screen_res005_30.json", {"kappa_30": [True] * 9}, resolution=0.05)
    # named after its run directory (as sim2sim.follow names them): the same line
    _write_screen(line / "screen_40.json", {"rough_kappa_np3o_40": [True] * 6 + [False] * 3})
    points = gather([(None, line)])
    got = {(p.line, p.iteration): (p.course_passed, p.course_driven, p.block_passed, p.block_driven) for p in points}
    assert got == {
        ("rough_kappa_np3o", 10): (3, 6, 2, 3),
        ("rough_kappa_np3o", 20): (6, 6, 3, 3),
        ("rough_kappa_np3o", 40): (6, 6, 0, 3),
        ("rough_kappa_np3o:avg", 20): (0, 6, 3, 3),  # kept beside the line: a line of its own
    }
    ten = next(p for p in points if p.iteration == 10)
    assert [Path(f).name for f in ten.files] == ["screen_one_start_10.json", "screen_starts_10_20.json"]
    # the other field alone: only the one-start screen has drives there
    other = gather([("k", line / "screen_one_start_10.json")], seed=7)
    assert [(p.line, p.iteration, p.course_passed, p.course_driven) for p in other] == [("k", 10, 2, 2)]


def test_series_names_drop_trailing_iterations():
    assert series_name("kappa_1338") == "kappa"
    assert series_name("spd_1409_1409") == "spd"
    assert series_name("avg7") == "avg7"
    assert series_name("rough_kl_np3o_1300") == "rough_kl_np3o"


def test_the_command_writes_the_plot_and_the_table(tmp_path, capsys):
    _write_screen(tmp_path / "a" / "screen_1.json", {"np3o_5": [True] * 9, "np3o_9": [False] * 9})
    out = tmp_path / "plots" / "history.png"
    assert main([str(tmp_path / "a"), "--out", str(out), "--md", str(tmp_path / "h.md")]) == 0
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "h.md").read_text()
    assert "| a | 5 | 6 of 6 | 3 of 3 | screen_1.json |" in text and "| a | 9 | 0 of 6 | 0 of 3 |" in text
    assert text in capsys.readouterr().out


def test_bad_sources_are_refused_by_name(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    with pytest.raises(ScreenFileError, match=r"bad\.json: not a sim2sim\.screen result"):
        gather([(None, bad)])
    (tmp_path / "broken.json").write_text("{")
    assert main([str(tmp_path / "broken.json"), "--out", str(tmp_path / "x.png")]) == 1
    assert "broken.json: not readable as JSON" in capsys.readouterr().err
    assert main([str(tmp_path / "empty_dir_missing"), "--out", str(tmp_path / "x.png")]) == 1
    assert "no such screen file or directory" in capsys.readouterr().err
    old = tmp_path / "old.json"  # before identities were recorded: no iteration to place it at
    old.write_text(json.dumps({"criteria": {}, "policies": {"np3o_7": "p.onnx"}, "summary": {}, "drives": []}))
    assert main([str(old), "--out", str(tmp_path / "x.png")]) == 1
    assert "no course drives on field 1616" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
