"""python -m training.curves: moving average and the four-panel PNG from metrics.jsonl."""

from __future__ import annotations

import json

import numpy as np
import pytest

from training.curves import env_steps, main, smooth


@pytest.fixture
def drawn(monkeypatch) -> list[str]:
    """The label of every line the figure draws, in order."""
    import matplotlib.axes

    labels: list[str] = []
    original = matplotlib.axes.Axes.plot

    def recording_plot(self, *args, label=None, **kwargs):
        labels.append(str(label))
        return original(self, *args, label=label, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recording_plot)
    return labels


def test_smooth_is_a_trailing_mean_that_skips_nan() -> None:
    x = np.array([1.0, 3.0, np.nan, 5.0, 7.0])
    assert np.allclose(smooth(x, 2), [1.0, 2.0, 3.0, 5.0, 6.0])
    assert np.array_equal(smooth(x, 1), x, equal_nan=True)


def test_curves_png_from_runs(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"iteration": i, "mean_reward": float(i), "mean_episode_length": 10.0 * i,
         "episode/rew/lin_vel": 0.1 * i, "episode/rew/yaw_rate": 0.05 * i,
         "episode/violations/joint_speed": 100.0 - i, "episode/violations/body_contact": 1.0}
        for i in range(30)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "curves.png"
    assert main([f"np3o={run}", "--out", str(out), "--per-constraint"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert main([str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 30, "mean_rew')  # a running trainer's half-written line is skipped
    assert main([f"np3o={run}", "--out", str(out)]) == 0
    (run / "metrics.jsonl").write_text('{"iteration": 0}\nnot json\n{"iteration": 2}\n')
    assert main([str(run), "--out", str(out)]) == 2
    assert "metrics.jsonl:2: not JSON" in capsys.readouterr().err


def test_curves_draw_only_the_named_constraints_and_refuse_unknown_ones(tmp_path, drawn, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"iteration": i, "mean_reward": 1.0, "mean_episode_length": 5.0,
         "episode/violations/joint_speed": 3.0, "episode/violations/hip_position": 900.0}
        for i in range(5)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "curves.png"
    args = [f"a={run}", f"b={run}", "--out", str(out), "--per-constraint", "--constraints", "joint_speed"]
    assert main(args) == 0
    violation_lines = [d for d in drawn if d.endswith(("joint_speed", "hip_position"))]
    assert violation_lines == ["a joint_speed", "b joint_speed"]
    assert main([f"a={run}", "--out", str(out), "--constraints", "joint_sped"]) == 2
    assert "unknown constraint(s) ['joint_sped']" in capsys.readouterr().err


def test_rough_runs_get_a_terrain_level_row_with_one_line_per_sub_terrain_kind(tmp_path, monkeypatch, drawn) -> None:
    """A run with a terrain curriculum: the figure has a third row, the mean level and one line
    per sub-terrain kind in the metrics, and a panel of the failures that ended its episodes; a
    flat run beside it draws none there."""
    rough, flat = tmp_path / "rough", tmp_path / "flat"
    base = {"mean_reward": 1.0, "mean_episode_length": 5.0, "episode/violations/joint_speed": 3.0}
    levels = {"episode/terrain_level": 3.0, "episode/terrain_level/stairs_up": 2.0, "episode/terrain_level/bumps": 5.0}
    levels |= {"episode/ends/time_out": 0.7, "episode/ends/joint_speed_trip": 0.2, "episode/ends/contact": 0.1}
    for run, extra in ((rough, levels), (flat, {})):
        run.mkdir()
        rows = [{"iteration": i, **base, **extra} for i in range(5)]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    import matplotlib.figure

    shapes: list[tuple[int, int]] = []
    original_subplots = matplotlib.figure.Figure.subplots

    def recording_subplots(self, nrows=1, ncols=1, **kwargs):
        shapes.append((nrows, ncols))
        return original_subplots(self, nrows, ncols, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "subplots", recording_subplots)
    out = tmp_path / "curves.png"
    assert main([f"r={rough}", f"f={flat}", "--out", str(out)]) == 0
    assert shapes == [(4, 2)]  # and a seventh panel: what ended the episodes
    assert {"r bumps", "r stairs_up"} <= set(drawn)  # one line per kind, each labelled
    assert {"r joint_speed_trip", "r contact"} <= set(drawn) and "r time_out" not in drawn  # failures only
    assert drawn.count("r") == 4 and drawn.count("f") == 3  # reward, violations, length; r's mean level
    assert main([f"f={flat}", "--out", str(out)]) == 0
    assert shapes[-1] == (2, 2)  # no curriculum, no third row


def test_environment_steps_follow_the_segments_of_a_resumed_run(tmp_path):
    """A run resumed with another number of environments: 2 iterations at 4096 envs, then 3 at
    2048, 24 steps each; the x axis in steps counts each stretch with its own width."""
    (tmp_path / "config.yaml").write_text("num_envs: 2048\nnum_steps_per_env: 24\n")
    segments = [{"iteration": 0, "num_envs": 4096}, {"iteration": 2, "num_envs": 2048}]
    (tmp_path / "segments.jsonl").write_text("".join(json.dumps(s) + "\n" for s in segments))
    steps = env_steps(tmp_path, np.arange(5.0))
    assert steps.tolist() == [4096 * 24, 2 * 4096 * 24] + [2 * 4096 * 24 + k * 2048 * 24 for k in (1, 2, 3)]
    (tmp_path / "segments.jsonl").unlink()  # no segments: the config's width throughout
    assert env_steps(tmp_path, np.arange(2.0)).tolist() == [2048 * 24, 2 * 2048 * 24]
