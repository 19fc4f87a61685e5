"""python -m training.command_tracking: a checkpoint's deterministic policy held at fixed commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.command_tracking import _parse_command, _parse_sequence, evaluate, main

SHIPPED = Path(__file__).resolve().parents[1] / "policies" / "aow_flat_np3o" / "model_250.pt"


def test_the_shipped_policy_rolls_forward_and_steps_sideways_and_around():
    """The shipped flat N-P3O policy (policies/README.md) rolls forward at the commanded 1.0 m/s
    with its feet on the ground, and steps when sent sideways or turned in place: the tool must
    show both gaits (a trot has about half of the wheel-steps in the air)."""
    commands = [("fwd", 1.0, 0.0, 0.0), ("side", 0.0, 0.5, 0.0), ("turn", 0.0, 0.0, 1.0)]
    (fwd, side, turn), info = evaluate(SHIPPED, commands, robots=2, seconds=3.0)
    assert info["task"] == "aow_flat_style" and info["iteration"] == 250
    assert fwd.mean_velocity[0] > 0.85 and fwd.error[0] < 0.15 and fwd.fallen == 0
    assert side.mean_velocity[1] > 0.4 and side.error[1] < 0.1 and side.fallen == 0
    assert turn.mean_velocity[2] > 0.8 and turn.error[2] < 0.2 and turn.fallen == 0
    # Rolling forward keeps the feet down; sideways and turning in place are stepped.
    assert fwd.air_share < 0.1 and side.air_share > 0.3 and turn.air_share > 0.3


def test_cli_writes_json_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main([str(SHIPPED), "--command", "0,0,0", "--robots", "1", "--seconds", "0.5", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["results"][0]["command"] == [0.0, 0.0, 0.0] and "stand" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])
    assert "no such checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(SHIPPED), "--command", "1,2"])
    assert "VX,VY,YAW_RATE" in capsys.readouterr().err
    assert _parse_command("1,0,0.5")[1:] == (1.0, 0.0, 0.5)


def test_braked_wheels_slow_the_rolling_policy():
    """The shipped policy rolls forward (the test above, error < 0.15): with its wheels braked
    (--braked-wheels) it falls well short of the forward command (measured 0.56 of 1.0 m/s)."""
    results, info = evaluate(SHIPPED, [("fwd", 1.0, 0.0, 0.0)], robots=2, seconds=3.0, braked_wheels=True)
    assert info["braked_wheels"] is True
    assert results[0].mean_velocity[0] < 0.75 and results[0].error[0] > 0.25


def test_a_reversal_scores_the_second_command_and_says_what_came_first(capsys):
    """Forward 1.0 then backward 0.5 (the shipped policy rolls both ways): the scored velocity is
    the second command's, so it is negative; a plain hold of forward 1.0 would read +1."""
    results, _ = evaluate(SHIPPED, [("fwd->back", (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0))], robots=2, seconds=2.0)
    (r,) = results
    assert r.command == (-0.5, 0.0, 0.0) and r.reversed_from == (1.0, 0.0, 0.0)
    assert r.mean_velocity[0] < -0.3 and r.error[0] < 0.2 and r.fallen == 0
    # It rolls back: its legs move slowly, far from the controller's 15 rad/s plausibility bound.
    assert 0.0 < r.peak_joint_speed < 10.0 and r.tripped == 0
    # The CLI's --reversals runs the default pairs after any --command.
    assert main([str(SHIPPED), "--command", "0,0,0", "--reversals", "--robots", "1", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "(0, 0, 0)" in out and "left->right 1.0" in out and "turn r->l 1.5" in out


def test_a_sequence_holds_each_command_in_turn(capsys):
    name, *phases = _parse_sequence("1,0,0 -1,0,0 0,0,0")
    assert name == "(1, 0, 0) -> (-1, 0, 0) -> (0, 0, 0)" and phases == [
        (1.0, 0.0, 0.0),
        (-1.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
    ]
    with pytest.raises(SystemExit):
        main([str(SHIPPED), "--sequence", "1,0,0"])
    assert "two or more" in capsys.readouterr().err
    (r,) = evaluate(SHIPPED, [("f-b-f", (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0), (0.5, 0.0, 0.0))], robots=2, seconds=1.5)[0]
    assert r.command == (0.5, 0.0, 0.0) and r.reversed_from == (-0.5, 0.0, 0.0) and r.mean_velocity[0] > 0.2
