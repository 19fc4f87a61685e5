"""python -m sim2sim.evaluate: the reference bar's arithmetic and one real (short) evaluation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from test_sim2sim import ROBOT, constant_policy

from sim2sim import evaluate
from sim2sim.evaluate import PolicyScore, bar_check
from training.sim.anymal_c import WHEEL


def score(name: str, forward_error: float | None, falls: int, speed_steps: int, steps: int = 3000) -> PolicyScore:
    return PolicyScore(
        name=name,
        path=f"{name}.onnx",
        forward_error=forward_error,
        segment_errors={},
        falls={"reference": falls, "full_range": 0},
        violations_per_episode={},
        violating_steps={
            "reference": {"velocity": 0, "effort": 0},
            "full_range": {"velocity": speed_steps, "effort": 0},
        },
        policy_steps={"reference": steps, "full_range": steps},
    )


def test_violations_per_episode_pool_both_sequences() -> None:
    s = score("a", 0.1, 0, speed_steps=60, steps=3000)  # 60 of 6000 policy steps, 1000 steps per 20 s
    assert s.total_per_episode("velocity") == pytest.approx(10.0)


def test_bar_passes_only_when_every_part_holds() -> None:
    baseline = score("ppo", 0.1, 0, speed_steps=300)
    assert bar_check(score("good", 0.15, 0, speed_steps=30), baseline)["passes"]
    assert bar_check(score("good", 0.15, 0, speed_steps=0), baseline)["joint_speed_violation_factor"] == float("inf")
    slow = bar_check(score("slow", 0.25, 0, speed_steps=0), baseline)
    assert not slow["forward_error_below_0.2"] and not slow["passes"]
    fell = bar_check(score("fell", 0.1, 1, speed_steps=0), baseline)
    assert not fell["no_fall"] and not fell["passes"]
    stressed = score("stressed", 0.1, 0, speed_steps=0)
    stressed.falls["full_range"] = 1  # a fall at the edge of the command ranges: reported, not the bar's
    assert bar_check(stressed, baseline)["no_fall"]
    violent = bar_check(score("violent", 0.1, 0, speed_steps=31), baseline)
    assert violent["joint_speed_violation_factor"] == pytest.approx(300 / 31)
    assert not violent["violations_10x_fewer"] and not violent["passes"]


def test_the_both_ways_table_shows_a_one_sided_gait() -> None:
    s = score("left_only", 0.1, 0, speed_steps=0)
    s.violations_per_episode = {q: {"velocity": 0.0, "effort": 0.0} for q in ("reference", "full_range")}
    s.segment_errors = {
        "reference": {},
        "full_range": {
            "left": [0.01, 0.05, 0.02],
            "right": [0.02, 0.98, 0.01],  # does not go right at all
            "turn_left": [0.0, 0.0, 0.1],
            "turn_right": [0.0, 0.0, 1.4],
            "backward": None,  # a segment without settled samples
        },
    }
    table = evaluate.markdown([s], {})
    header, _, row = table.strip().splitlines()[-3:]
    assert "right 1.0 m/s vy err" in header and "turn right 1.5 rad/s yaw err" in header
    assert row == "| left_only | – | 0.05 | 0.98 | 0.10 | 1.40 |"


def test_full_range_repeats_shift_the_first_segment_and_count_runs_with_a_fall() -> None:
    shifted = evaluate.shifted_full_range(2)
    original = evaluate.SEQUENCES["full_range"]
    assert shifted[0]["duration"] == pytest.approx(original[0]["duration"] + 2 * 0.17)
    assert shifted[1:] == original[1:] and original[0]["duration"] == 8.0  # the sequence itself untouched
    s = score("a", 0.1, 0, speed_steps=0)
    s.violations_per_episode = {q: {"velocity": 0.0, "effort": 0.0} for q in ("reference", "full_range")}
    s.falls["full_range"] = 1
    s.full_range_repeat_falls = [0, 2]
    assert s.full_range_runs_fallen() == (2, 3)
    assert "| a | 2 of 3 | 1, 0, 2 |" in evaluate.markdown([s], {})
    s.full_range_repeat_falls = []
    assert "runs with a fall" not in evaluate.markdown([s], {})  # no repeats asked: no table


def test_a_controller_fault_is_reported_with_its_time_and_reason() -> None:
    from types import SimpleNamespace

    why = "joint_states: implausible velocities for ['LH_KFE']"
    transitions = [(0.02, "STAND_UP", "start requested"), (2.02, "POLICY", "stand-up done"), (22.06, "DAMPING", why)]
    assert evaluate.controller_fault(SimpleNamespace(fault=why, transitions=transitions)) == f"t = 22.06 s: {why}"
    assert evaluate.controller_fault(SimpleNamespace(fault=None, transitions=transitions[:2])) is None
    s = score("a", 0.1, 0, speed_steps=0)
    s.violations_per_episode = {q: {"velocity": 0.0, "effort": 0.0} for q in ("reference", "full_range")}
    assert "Controller faults" not in evaluate.markdown([s], {})
    s.controller_faults["full_range run 2"] = f"t = 22.06 s: {why}"
    assert f"- a, full_range run 2: t = 22.06 s: {why}" in evaluate.markdown([s], {})


def test_a_baseline_without_violations_cannot_demonstrate_the_factor() -> None:
    checks = bar_check(score("np3o", 0.1, 0, speed_steps=0), score("ppo", 0.1, 0, speed_steps=0))
    assert checks["violations_10x_fewer"] is None and checks["joint_speed_violation_factor"] is None
    assert checks["passes"]  # what can be shown holds; the table says the factor is not demonstrable
    assert "n/a" in evaluate.markdown([], {"np3o": checks})


def shorten_sequences(monkeypatch: pytest.MonkeyPatch, forward_s: float, stop_s: float) -> None:
    """A 0.5 s stand-up and two one-segment sequences: 1.0 m/s forward, then a stop."""
    monkeypatch.setattr(evaluate, "STAND_UP_S", 0.5)
    monkeypatch.setattr(
        evaluate,
        "SEQUENCES",
        {
            "reference": [{"name": "forward", "duration": forward_s, "vx": 1.0}],
            "full_range": [{"name": "stop", "duration": stop_s}],
        },
    )


def roller_policy(path: Path) -> Path:
    """Legs held at the default pose, wheels at +5 rad/s (action 1.0): it rolls straight ahead."""
    return constant_policy(path, np.array([0.0 if j.kind == "leg" else 1.0 for j in ROBOT.joints]))


def test_evaluation_of_a_rolling_policy(tmp_path, monkeypatch) -> None:
    """Wheels at +5 rad/s: the forward error is |1.0 - 5 r| (analytic), no fall, files written."""
    shorten_sequences(monkeypatch, forward_s=3.0, stop_s=1.0)
    roller = roller_policy(tmp_path / "roll.onnx")
    still = constant_policy(tmp_path / "still.onnx", np.zeros(len(ROBOT.joints)))
    out = tmp_path / "eval"
    assert evaluate.main(["--policy", f"roll={roller}", "--policy", f"still={still}", "--baseline", "still",
                          "--out", str(out), "--no-progress", "--full-range-repeats", "1"]) == 0  # fmt: skip
    data = json.loads((out / "evaluation.json").read_text())
    roll = next(p for p in data["policies"] if p["name"] == "roll")
    expected = abs(1.0 - 5.0 * WHEEL.radius)
    assert roll["forward_error"] == pytest.approx(expected, abs=0.05)
    assert roll["falls"] == {"reference": 0, "full_range": 0} and roll["full_range_repeat_falls"] == [0]
    assert data["bar"]["roll"]["forward_error_below_0.2"] is (expected < 0.2)
    assert "| roll |" in (out / "evaluation.md").read_text() and "| roll | 0 of 2 | 0, 0 |" in data_md(out)
    # Neither contract names a leg drive model: both ran on the PD drives of every earlier run.
    assert data["leg_actuators"] == {"roll": "pd", "still": "pd"} and "Leg drives" not in data_md(out)
    # Each policy named by what outlives its file: the file's hash and its contract's training block.
    identity = data["identities"]["roll"]
    assert identity["sha256"] == hashlib.sha256(roller.read_bytes()).hexdigest()
    assert identity["training"] == {"task": "test", "algorithm": "none", "iteration": 0, "config_hash": "0" * 64,
                                    "leg_actuator": "pd"}  # fmt: skip
    assert data["identities"]["still"]["sha256"] != identity["sha256"]  # another bias, another file
    assert data_md(out).startswith(
        f"Policies:\n\n- roll: `{roller}` (it. 0, test, none, pd drives; sha256 {identity['sha256'][:12]})\n"
    )


def data_md(out: Path) -> str:
    return (out / "evaluation.md").read_text()


def test_evaluation_on_dc_motor_legs_is_recorded_as_such(tmp_path, monkeypatch) -> None:
    """--leg-actuator dc_motor: the legs hold the pose through the drive line, the wheels roll as before."""
    shorten_sequences(monkeypatch, forward_s=3.0, stop_s=1.0)
    roller = roller_policy(tmp_path / "roll.onnx")
    out = tmp_path / "eval"
    assert evaluate.main(["--policy", f"roll={roller}", "--out", str(out), "--no-progress",
                          "--leg-actuator", "dc_motor"]) == 0  # fmt: skip
    data = json.loads((out / "evaluation.json").read_text())
    assert data["leg_actuators"] == {"roll": "dc_motor"}
    assert "\n\nLeg drives simulated as: roll `dc_motor` (--leg-actuator)" in data_md(out)
    roll = data["policies"][0]
    assert roll["forward_error"] == pytest.approx(abs(1.0 - 5.0 * WHEEL.radius), abs=0.05)
    assert roll["falls"] == {"reference": 0, "full_range": 0}


def test_bad_arguments_are_refused(tmp_path, capsys) -> None:
    assert evaluate.main(["--policy", "a=x", "--out", str(tmp_path), "--full-range-repeats", "-1"]) == 2
    assert "--full-range-repeats" in capsys.readouterr().err
    assert evaluate.main(["--policy", "=nonsense", "--out", str(tmp_path)]) == 2
    assert "NAME=PATH" in capsys.readouterr().err
    assert evaluate.main(["--policy", "nonsense", "--out", str(tmp_path)]) == 2
    assert "no file nonsense" in capsys.readouterr().err
    twice = tmp_path / "p.onnx"
    twice.write_bytes(b"")
    assert evaluate.main(["--policy", f"a={twice}", "--policy", f"a={twice}", "--out", str(tmp_path)]) == 2
    assert "the name 'a' is given twice" in capsys.readouterr().err
    assert evaluate.main(["--policy", f"a={tmp_path / 'missing.onnx'}", "--out", str(tmp_path)]) == 2
    assert "no file" in capsys.readouterr().err
