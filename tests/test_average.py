"""training.average: the weight average of a run's checkpoints, checked value by value, exported
with its sources named in the contract; checkpoints of different lines are refused."""

from __future__ import annotations

import json

import pytest
import torch

import training.envs  # noqa: F401
from aow_policy.policy_contract import METADATA_KEY
from export import export_policy
from training.average import average_checkpoints, main, select_checkpoints
from training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from training.config import TrainConfig
from training.networks import NetworkConfig
from training.runner import Runner


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """np3o on aow_flat, 3 iterations of 4 envs x 8 steps, a checkpoint after each."""
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("avg_run")
    cfg = TrainConfig(
        task="aow_flat",
        algo="np3o",
        num_envs=4,
        num_steps_per_env=8,
        iterations=3,
        save_interval=1,
        network=NetworkConfig(actor_hidden=(16, 16), critic_hidden=(16, 16), cost_critic_hidden=(16,)),
    )
    cfg.ppo.num_minibatches = 2
    runner = Runner(cfg, path, progress=False, tensorboard=False)
    runner.learn()
    runner.env.close()
    return path


def test_average_is_the_mean_of_every_float_tensor_and_keeps_the_last_state(run_dir):
    paths = select_checkpoints([run_dir], first=2, last=3)
    assert [p.name for p in paths] == ["model_2.pt", "model_3.pt"]
    second, third = (load_checkpoint(p) for p in paths)
    averaged = average_checkpoints(list(reversed(paths)))  # order of the arguments does not matter
    changed = 0
    for name, value in averaged["model"].items():
        a, b = second["model"][name], third["model"][name]
        if value.is_floating_point():
            assert torch.allclose(value, (a + b) / 2, atol=1e-7, rtol=0), name
            changed += int(not torch.equal(a, b))
        else:
            assert torch.equal(value, b), name
    assert changed >= 5  # an update moved the weights: the mean differs from both
    first_weight = next(k for k in averaged["model"] if k.endswith("weight"))
    assert not torch.equal(averaged["model"][first_weight], third["model"][first_weight])
    assert averaged["iteration"] == 3 and averaged["algo_state"].keys() == third["algo_state"].keys()
    assert "runner_state" not in averaged
    assert [s["iteration"] for s in averaged["averaged_from"]] == [2, 3]
    assert all(len(s["sha256"]) == 64 for s in averaged["averaged_from"])


def test_the_average_exports_and_names_its_sources(run_dir, tmp_path):
    out = tmp_path / "avg" / "model_3.pt"
    assert main([str(run_dir), "--first", "1", "--out", str(out)]) == 0
    result = export_policy(out, tmp_path / "avg.onnx", log=lambda _: None)
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(result.onnx_path)).metadata_props}
    contract = json.loads(meta[METADATA_KEY])
    assert contract["training"]["averaged_iterations"] == [1, 2, 3]
    assert contract["training"]["iteration"] == 3
    assert main([str(run_dir), "--out", str(out)]) == 1  # never overwrites


def test_checkpoints_of_different_lines_are_refused(run_dir, tmp_path, capsys):
    other = load_checkpoint(run_dir / "model_1.pt")
    other["config"] = {**other["config"], "task": "aow_rough"}
    save_checkpoint(tmp_path / "model_9.pt", other)
    with pytest.raises(CheckpointError, match=r"config task '.*' differs from the first checkpoint's"):
        average_checkpoints([run_dir / "model_2.pt", tmp_path / "model_9.pt"])
    reshaped = load_checkpoint(run_dir / "model_1.pt")
    name = next(k for k, v in reshaped["model"].items() if v.ndim == 2)
    reshaped["model"][name] = reshaped["model"][name][:, :-1].clone()
    save_checkpoint(tmp_path / "model_8.pt", reshaped)
    with pytest.raises(CheckpointError, match=f"model tensor {name} has shape"):
        average_checkpoints([run_dir / "model_2.pt", tmp_path / "model_8.pt"])
    with pytest.raises(CheckpointError, match="at least two"):
        average_checkpoints([run_dir / "model_2.pt"])
    assert main([str(run_dir), "--first", "7", "--out", str(tmp_path / "x.pt")]) == 1
    assert "between iterations 7 and None" in capsys.readouterr().err
