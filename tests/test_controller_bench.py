"""bench.controller_step runs and reports the keys the issue names (no timing asserted)."""

from __future__ import annotations

import json

from aow_policy import heightmap, observation
from bench import controller_step


def test_bench_reports_p50_p99_and_its_baseline(capsys):
    assert controller_step.main(["--steps", "100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"p50_us", "p99_us", "inference_p50_us", "inference_p99_us", "meets_goal"} <= set(result)
    assert 0 < result["p50_us"] <= result["p99_us"] <= result["max_us"]
    assert result["steps"] == 100 and result["scan_points"] == 187 and result["map_cells"] == "200x200"


def test_bench_rclpy_like_messages_convert_alike(capsys):
    assert controller_step.main(["--steps", "100", "--json", "--rclpy-like"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["messages"].startswith("rclpy-like")


def test_bench_numpy_flag_selects_the_numpy_paths(capsys):
    assert controller_step.main(["--steps", "100", "--json", "--numpy"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["native_scan"] is False and result["native_control"] is False
    assert "native_speedup_p50" not in result  # nothing native to compare
    assert controller_step.main(["--steps", "100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["native_scan"] is heightmap.NATIVE_AVAILABLE  # the flag did not leak
    assert result["native_control"] is (observation.native_control is not None)


def test_bench_times_the_c_paths_against_the_numpy_path_in_the_same_run(capsys):
    assert controller_step.main(["--steps", "1000", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    if not (heightmap.NATIVE_AVAILABLE or observation.native_control is not None):
        assert "native_speedup_p50" not in result
        return
    ab = ("ab_native_p50_us", "ab_native_p99_us", "ab_numpy_p50_us", "ab_numpy_p99_us")
    assert all(result[k] > 0 for k in ab)
    assert result["native_speedup_p50"] == result["ab_numpy_p50_us"] / result["ab_native_p50_us"]
    assert lines[-2].startswith("same run, alternating blocks: C fast paths")


def test_bench_realtime_flag_times_under_sched_fifo_or_says_why_not():
    """In a child process: the timed loop runs under SCHED_FIFO where permitted."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "bench.controller_step", "--steps", "100", "--json", "--realtime", "10"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    scheduling = json.loads(out.strip().splitlines()[-1])["scheduling"]
    assert scheduling == "SCHED_FIFO priority 10" or scheduling.startswith("normal (not permitted")
