"""python -m training.episode_ends: what ends a rough-terrain policy's episodes, per sub-terrain
kind, with the tripping joints; counts that add up, and a clear refusal without a curriculum."""

from __future__ import annotations

import json

import pytest
import torch

from tests.test_locomotion_resume import _config
from training.config import TrainConfig
from training.episode_ends import count_episode_ends, main
from training.runner import Runner


def _one_iteration_run(tmp_path, task: str, trip: float):
    data = _config(task, 1).to_dict()
    data["env_overrides"]["terminations.joint_speed_trip"] = trip
    data["env_overrides"]["episode_length_s"] = 0.3
    runner = Runner(TrainConfig.from_dict(data), tmp_path / task, progress=False, tensorboard=False)
    runner.learn()
    runner.env.close()
    return tmp_path / task / "model_1.pt"


def test_every_ending_episode_is_counted_once_with_its_causes(tmp_path, capsys):
    """A trip bound of 0.05 x the actuator limit (0.4 rad/s): a fresh policy trips at once."""
    torch.set_num_threads(1)
    ckpt = _one_iteration_run(tmp_path, "aow_rough_style", 0.05)
    result = count_episode_ends(ckpt, robots=6, seconds=1.0, sample=True)
    assert result["info"]["iteration"] == 1 and result["info"]["sampled"] is True
    assert sum(result["episodes"].values()) >= 6  # 0.3 s episodes over 1 s: every robot ends some
    for kind, n in result["episodes"].items():
        causes = result["causes"][kind]
        # each episode ended by a failure or by its time-out (a robot can meet several failures at once)
        assert sum(causes.values()) >= n and causes.get("time_out", 0) <= n
        assert causes.get("joint_speed_trip", 0) > 0
        joints = result["tripped_joints"][kind]
        assert sum(joints.values()) >= causes["joint_speed_trip"]  # at least one joint per trip
        assert all(name.endswith((" swing", " stance")) for name in joints)
    assert main([str(ckpt), "--robots", "4", "--seconds", "0.5", "--json", str(tmp_path / "e.json")]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| kind | episodes | failed |") and "joint_speed_trip" in table
    assert json.loads((tmp_path / "e.json").read_text())["info"]["sampled"] is False


def test_a_task_without_a_curriculum_is_refused_by_name(tmp_path, capsys):
    ckpt = _one_iteration_run(tmp_path, "aow_flat_style", 2.0)
    assert main([str(ckpt), "--robots", "2", "--seconds", "0.1"]) == 2
    assert "has no terrain curriculum" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.pt")]) == 2
    with pytest.raises(SystemExit):
        main(["--help"])
