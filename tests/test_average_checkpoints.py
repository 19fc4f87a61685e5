"""training.average_checkpoints: the model of the written checkpoint is the entry-wise mean of the
inputs' (hand-computed values and a real run's checkpoints), integer entries are kept and must agree,
the newest checkpoint's iteration and optimizer are kept, the runner state is dropped, the averaged
checkpoint exports with parity and its contract names the averaged iterations; checkpoints of
other runs, a single checkpoint and an overwrite of an input are refused by name."""

from __future__ import annotations

import copy

import pytest
import torch

from export import export_policy
from tests.tiny_runs import train_tiny_rough_np3o
from training.average_checkpoints import average
from training.average_checkpoints import main as average_main
from training.checkpoint import CheckpointError, load_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """np3o on aow_rough (height scan), 3 iterations of 4 envs x 8 steps, a checkpoint after each."""
    torch.set_num_threads(1)
    return train_tiny_rough_np3o(tmp_path_factory.mktemp("average_run"), iterations=3)


def _filled(ckpt: dict, iteration: int, value: float) -> dict:
    out = copy.deepcopy(ckpt)
    out["iteration"] = iteration
    out["model"] = {
        k: torch.full_like(v, value) if v.is_floating_point() else v.clone() for k, v in ckpt["model"].items()
    }
    return out


def test_the_model_is_the_entrywise_mean_and_the_newest_checkpoint_is_kept(run_dir):
    base = load_checkpoint(run_dir / "model_1.pt")
    base["model"]["actor.test_index"] = torch.tensor([2, 0, 1])  # an integer entry, as the mirror maps are
    inputs = [_filled(base, 3, 6.0), _filled(base, 1, 1.0), _filled(base, 2, 2.0)]  # out of order on purpose
    inputs[0]["optimizer"] = {"marker": torch.tensor(3.0)}
    before = copy.deepcopy(inputs)
    made = average(inputs)
    for key, value in made["model"].items():
        if value.is_floating_point():
            assert torch.all(value == 3.0), key  # (1 + 2 + 6) / 3
            assert value.dtype == base["model"][key].dtype
    assert torch.equal(made["model"]["actor.test_index"], torch.tensor([2, 0, 1]))
    assert made["iteration"] == 3 and made["averaged_from"] == [1, 2, 3]
    assert torch.equal(made["optimizer"]["marker"], torch.tensor(3.0))  # the newest one's optimizer
    assert "runner_state" not in made
    for was, now in zip(before, inputs, strict=True):  # the inputs are not changed
        assert all(torch.equal(was["model"][k], now["model"][k]) for k in was["model"])


def test_a_runs_checkpoints_average_export_with_parity_and_the_contract_names_them(run_dir, tmp_path):
    out = tmp_path / "avg" / "model_3.pt"
    assert average_main([str(run_dir), "--from", "1", "--to", "3", "--out", str(out)]) == 0
    made = load_checkpoint(out)
    ckpts = [load_checkpoint(run_dir / f"model_{i}.pt") for i in (1, 2, 3)]
    assert made["averaged_from"] == [1, 2, 3] and made["iteration"] == 3
    moved = 0
    for key, value in made["model"].items():
        if value.is_floating_point():
            mean = sum(c["model"][key].double() for c in ckpts) / 3
            torch.testing.assert_close(value.double(), mean, rtol=0, atol=1e-6)
            moved += not torch.equal(ckpts[0]["model"][key], ckpts[2]["model"][key])
    assert moved > 0  # the run's weights changed between the checkpoints, so the mean is not any one of them

    result = export_policy(out, tmp_path / "avg" / "policy.onnx", rollout_steps=10, rollout_envs=2, log=lambda _: None)
    assert result.verification.ok and result.verification.worst <= 1e-5
    assert result.contract["training"]["averaged_from"] == [1, 2, 3]
    assert result.contract["training"]["iteration"] == 3
    plain = export_policy(
        run_dir / "model_3.pt", tmp_path / "plain.onnx", rollout_steps=2, rollout_envs=1, log=lambda _: None
    )
    assert "averaged_from" not in plain.contract["training"]


def test_other_runs_single_checkpoints_and_overwrites_are_refused(run_dir, tmp_path, capsys):
    one, two = load_checkpoint(run_dir / "model_1.pt"), load_checkpoint(run_dir / "model_2.pt")
    with pytest.raises(CheckpointError, match="at least two checkpoints"):
        average([one])
    with pytest.raises(CheckpointError, match="the same iteration appears twice"):
        average([one, one])
    other = {**two, "config": {**two["config"], "task": "aow_flat"}}
    with pytest.raises(CheckpointError, match=r"iteration 2 is not of the run of iteration 1 \(task differ"):
        average([one, other])
    ints = [copy.deepcopy(c) for c in (one, two)]
    ints[0]["model"]["actor.test_index"] = torch.tensor([0, 1])
    ints[1]["model"]["actor.test_index"] = torch.tensor([1, 0])
    with pytest.raises(CheckpointError, match=r"actor.test_index \(integer\) differs"):
        average(ints)

    source = run_dir / "model_2.pt"
    size = source.stat().st_size
    assert average_main([str(run_dir / "model_1.pt"), str(source), "--out", str(source)]) == 1
    assert "would overwrite one of the averaged checkpoints" in capsys.readouterr().err
    assert source.stat().st_size == size and load_checkpoint(source)["iteration"] == 2
    assert average_main([str(run_dir), "--from", "7", "--to", "9", "--out", str(tmp_path / "x.pt")]) == 1
    assert "no checkpoints between iterations 7 and 9" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()
