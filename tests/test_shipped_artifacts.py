"""Shipped policies load against the robot contract; the sample bag replays; `make demo` runs end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aow_policy.policy import PolicyRunner
from aow_policy.robot import load_robot

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted((ROOT / "policies").glob("*/policy.onnx"))


@pytest.mark.parametrize("path", POLICIES, ids=[p.parent.name for p in POLICIES])
def test_shipped_policy_loads_and_runs_against_the_robot_contract(path: Path):
    robot = load_robot()
    runner = PolicyRunner.load(path, robot)
    assert runner.contract["robot"]["contract_hash"] == robot.contract_hash
    assert [a["joint"] for a in runner.contract["actions"]] == list(robot.joint_names)
    actions = runner(np.zeros(runner.obs_dim, dtype=np.float32))
    assert actions.shape == (16,) and np.isfinite(actions).all()
    assert path.stat().st_size < 5 * 2**20


@pytest.mark.parametrize("path", POLICIES, ids=[p.parent.name for p in POLICIES])
def test_shipped_policy_completes_a_short_sim_to_sim_run(path: Path):
    """A smoke test, not a performance bar (policies/README.md has the measured ones): each shipped
    policy stands up and drives 3 s of commands on the simulated robot through the deployment
    runtime, without a controller fault or a fall."""
    from sim2sim.runner import run

    commands = [{"name": "forward", "duration": 1.5, "vx": 0.5}, {"name": "turn", "duration": 1.5, "yaw_rate": 0.5}]
    result = run(path, 5.0, commands)
    assert result.final_state == "POLICY" and not result.fell
    assert result.policy_start is not None and result.policy_start <= 2.5


def test_there_are_shipped_policies():
    assert {p.parent.name for p in POLICIES} >= {"aow_flat_np3o", "aow_flat_ppo", "aow_rough_np3o", "aow_rough_ppo"}


def test_sample_bag_replays(tmp_path: Path):
    bag = ROOT / "hardware_logs" / "samples" / "sim2sim_flat_np3o"
    out = tmp_path / "report"
    subprocess.run(
        [sys.executable, "-m", "hardware_logs", str(bag), "--out", str(out), "--no-plots", "--no-progress", "--quiet"],
        check=True,
        cwd=ROOT,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["velocity"]["samples"] == 8000 * 16  # 400 Hz x 20 s, joint samples of all 16 joints
    assert summary["partial"] is False


@pytest.mark.slow
def test_make_demo_one_minute_end_to_end(tmp_path: Path):
    """`python -m demo` (what `make demo` runs) with a one-minute budget; every artifact is valid."""
    out = tmp_path / "demo"
    env = {**os.environ, "DEMO_MINUTES": "1"}
    subprocess.run(
        [sys.executable, "-m", "demo", "--out", str(out), "--num-envs", "64", "--no-progress"],
        check=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    (run,) = out.glob("run_*")
    from rosbags.highlevel import AnyReader

    from training.checkpoint import latest_checkpoint, load_checkpoint

    assert load_checkpoint(latest_checkpoint(run))["iteration"] >= 1
    PolicyRunner.load(run / "policy.onnx", load_robot())
    with AnyReader([run / "sim2sim_bag"]) as reader:
        topics = {c.topic for c in reader.connections}
        assert {"/joint_states", "/joint_commands", "/odometry", "/elevation_map", "/cmd_vel"} <= topics
    summary = json.loads((run / "replay_report" / "summary.json").read_text())
    assert summary["velocity"]["samples"] > 0 and "violations_per_window" in summary["velocity"]
    assert json.loads((run / "sim2sim.json").read_text())["final_state"] == "POLICY"
    from viz.video import read_video

    for name in ("sim2sim.mp4", "reference.mp4"):  # 30 s at the demo's 10 fps, 480x360
        frames, fps = read_video(run / name)
        assert frames.shape == (301, 360, 480, 3) and fps == pytest.approx(10.0)
    course = json.loads((run / "rough_course.json").read_text())  # the height-scan policy's drive
    assert course["end"] in ("crossed", "stalled", "time limit") and course["progress_m"] > 0
    frames, _ = read_video(run / "rough_course.mp4")  # one frame per 0.1 s of the drive, standing up included
    assert frames.shape[1:] == (360, 480, 3) and abs(len(frames) - 10 * course["sim_time"]) <= 2


@pytest.mark.slow
def test_shipped_evaluation_reproduces(tmp_path: Path):
    """policies/evaluation.json (python -m sim2sim.evaluate on the shipped policies) is reproduced:
    the same tracking errors within 0.05 and the same falls for every shipped policy."""
    shipped = json.loads((ROOT / "policies" / "evaluation.json").read_text())
    argv = [sys.executable, "-m", "sim2sim.evaluate", "--out", str(tmp_path), "--no-progress"]
    for p in shipped["policies"]:
        argv += ["--policy", f"{p['name']}={ROOT / p['path']}"]
    if shipped["baseline"]:
        argv += ["--baseline", shipped["baseline"]]
    subprocess.run(argv, check=True, cwd=ROOT, timeout=900)
    fresh = {p["name"]: p for p in json.loads((tmp_path / "evaluation.json").read_text())["policies"]}
    for p in shipped["policies"]:
        again = fresh[p["name"]]
        assert again["forward_error"] == pytest.approx(p["forward_error"], abs=0.05)
        assert again["falls"] == p["falls"]


def test_demo_summary_means_skip_iterations_without_finished_episodes():
    """The demo's end-of-training figures: iterations in which no episode ended have no episode
    statistics (the one-minute demo can end on one) and are skipped, not printed as None."""
    from demo.__main__ import recent_mean

    history = [{"iteration": i, "mean_reward": float(i)} for i in range(12)] + [{"iteration": 12}]
    assert recent_mean(history, "mean_reward") == sum(range(2, 12)) / 10
    assert recent_mean(history, "violations_per_episode") is None
    assert recent_mean([], "mean_reward") is None
