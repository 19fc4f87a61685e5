"""Train a tiny policy for a couple of iterations (real runner, real MuJoCo task), export, reload.

Parity on random, rollout and single observations; metadata round trip; refusal of robot
contracts with swapped joints, another control period or another height-scan grid.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
import yaml

import training.config as config_module  # part of this package: imported, never skipped
import training.envs  # noqa: F401
import training.runner as runner_module
from aow_policy.policy import PolicyRunner
from aow_policy.policy_contract import METADATA_KEY, PolicyContractError
from aow_policy.robot import load_robot, robot_from_dict
from export import export_policy
from export.checkpoint_source import load_policy_source
from export.synthetic import paper_observation_layout
from tests.tiny_runs import train_tiny_rough_np3o
from training.networks import NetworkConfig


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory, robot):
    """np3o on aow_rough (height scan), 2 iterations of 4 envs x 8 steps, exported with a rollout check."""
    run_dir = train_tiny_rough_np3o(tmp_path_factory.mktemp("tiny_run"), iterations=2)
    lines: list[str] = []
    result = export_policy(run_dir, None, robot, rollout_steps=10, rollout_envs=2, log=lines.append)
    return run_dir, result, lines


def _variant(robot, edit):
    raw = robot.to_dict()
    edit(raw)
    return robot_from_dict(raw, source="variant.yaml")


def test_trained_checkpoint_exports_with_parity(trained_export, robot):
    run_dir, result, lines = trained_export
    assert result.checkpoint == run_dir / "model_2.pt"
    assert any("using the latest checkpoint model_2.pt" in line for line in lines)
    assert result.verification.ok and result.verification.worst <= 1e-5
    assert result.verification.counts == {"random": 1000, "rollout": 20, "single observation": 100}
    source = load_policy_source(result.checkpoint)
    assert float(source.actor.normalizer.count) > 0  # the runner's normalizer statistics went into the graph
    runner = PolicyRunner.load(result.onnx_path, robot)
    obs = np.random.default_rng(2).standard_normal((64, runner.obs_dim)).astype(np.float32) * 2
    with torch.no_grad():
        expected = source.actor(torch.from_numpy(obs)).numpy()
    assert np.abs(np.stack([runner(o) for o in obs]) - expected).max() <= 1e-5


def test_trained_metadata_round_trips(trained_export, robot):
    _, result, _ = trained_export
    meta = json.loads({p.key: p.value for p in onnx.load(result.onnx_path).metadata_props}[METADATA_KEY])
    assert meta == yaml.safe_load(result.yaml_path.read_text()) == result.contract
    assert meta == PolicyRunner.load(result.onnx_path, robot).contract
    assert meta["training"]["task"] == "aow_rough" and meta["training"]["algorithm"] == "np3o"
    assert meta["training"]["iteration"] == 2 and meta["training"]["obs_normalization"] is True
    assert [a["joint"] for a in meta["actions"]] == list(robot.joint_names)
    assert meta["observation"]["terms"] == paper_observation_layout(robot).to_list()


def test_trained_policy_refused_by_mismatched_robots(trained_export, robot):
    path = trained_export[1].onnx_path

    def swap(raw):
        raw["joints"][12], raw["joints"][13] = raw["joints"][13], raw["joints"][12]

    with pytest.raises(PolicyContractError, match="joint order differs at action index 12: policy LF_WHEEL, robot RF"):
        PolicyRunner.load(path, _variant(robot, swap))
    with pytest.raises(PolicyContractError, match=r"control period physics_dt: policy 0\.005 s, robot 0\.0025 s"):
        PolicyRunner.load(path, _variant(robot, lambda raw: raw["rates"].update(physics_dt=0.0025)))
    with pytest.raises(
        PolicyContractError, match=r"height-scan grid y_range: policy \[-0.5, 0.5\], robot \[-0.6, 0.6\]"
    ):
        PolicyRunner.load(path, _variant(robot, lambda raw: raw["height_scan"].update(y_range=[-0.6, 0.6])))


def test_real_task_run_exports_with_rollout_parity(tmp_path, robot):
    """aow_flat on the MuJoCo backend: the export's rollout check runs on the real task."""
    cfg = config_module.TrainConfig(
        task="aow_flat",
        algo="np3o",
        num_envs=4,
        num_steps_per_env=8,
        iterations=2,
        save_interval=2,
        network=NetworkConfig(actor_hidden=(32, 16), critic_hidden=(32, 16), cost_critic_hidden=(16,)),
    )
    cfg.ppo.num_minibatches = 2
    runner_module.Runner(cfg, tmp_path, progress=False, tensorboard=False).learn()
    result = export_policy(tmp_path, None, robot, rollout_steps=10, rollout_envs=2, log=lambda _: None)
    assert result.onnx_path == tmp_path / "policy.onnx"
    assert result.verification.counts["rollout"] == 20
    assert result.verification.max_abs_diff["rollout"] <= 1e-5
    contract = PolicyRunner.load(result.onnx_path, robot).contract
    assert contract["training"]["task"] == "aow_flat" and contract["training"]["iteration"] == 2
    assert contract["height_scan"] is None and contract["observation"]["dim"] == 56
    assert contract["action_clip"] == 100.0  # the task config's raw action clip
    assert contract["export"]["verified_observations"] == {"random": 1000, "rollout": 20}


def test_ship_a_checkpoint_as_a_policy_directory(trained_export, tmp_path):
    """export.ship: the policy-only checkpoint, config, the line's joined metrics, a verified ONNX
    with its contract and the curves; the replaced policy's evaluation is kept, or nothing changes."""
    import shutil

    from export.ship import ShipError, main, ship
    from training.checkpoint import load_checkpoint
    from training.run_files import read_jsonl

    run_dir, _, _ = trained_export
    run = tmp_path / "run"  # a line's later stretch: its metrics begin at iteration 1
    shutil.copytree(run_dir, run)
    records = read_jsonl(run / "metrics.jsonl")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["iteration"] >= 1))
    dst = tmp_path / "policy"
    ship(run, 1, dst, log=lambda _: None)
    assert "runner_state" in load_checkpoint(run / "model_1.pt")  # the run's own checkpoint untouched
    assert "runner_state" not in load_checkpoint(dst / "model_1.pt")
    assert {"config.yaml", "metrics.jsonl", "policy.onnx", "policy.yaml", "training_curves.png"} <= {
        p.name for p in dst.iterdir()
    }
    # The earlier stretch's record (iteration 0) is kept ahead of the run's own.
    (dst / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "earlier": 1.0}) + "\n")
    (dst / "evaluation.md").write_text("it. 1 on the course\n")
    assert main([str(run), "2", str(dst)]) == 1  # its evaluation would be lost: nothing changes
    assert (dst / "model_1.pt").is_file() and not (dst / "model_2.pt").exists()
    with pytest.raises(ShipError, match="no such checkpoint"):
        ship(run, 7, dst, old_evaluation_to=tmp_path / "old")
    assert main([str(run), "2", str(dst), "--old-evaluation-to", str(tmp_path / "old")]) == 0
    assert (tmp_path / "old" / "sim2sim_1_shipped_evaluation.md").read_text() == "it. 1 on the course\n"
    assert sorted(p.name for p in dst.glob("model_*.pt")) == ["model_2.pt"] and not (dst / ".ship").exists()
    joined = read_jsonl(dst / "metrics.jsonl")
    assert [r["iteration"] for r in joined] == [0, 1] and joined[0].get("earlier") == 1.0
    loaded = PolicyRunner.load(dst / "policy.onnx", load_robot())  # the contract fits the robot
    assert loaded.contract["training"]["iteration"] == 2
