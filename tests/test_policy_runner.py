"""PolicyRunner: parity with PyTorch one observation at a time, buffers, fail-safe refusals, no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from aow_policy.policy import PolicyError, PolicyRunner
from aow_policy.policy_contract import METADATA_KEY, PolicyContractError
from aow_policy.robot import load_robot, robot_from_dict
from export import export_policy
from export.checkpoint_source import load_policy_source
from export.synthetic import write_synthetic_checkpoint


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, robot):
    d = tmp_path_factory.mktemp("runner")
    ckpt = write_synthetic_checkpoint(d / "model_7.pt", robot, iteration=7, seed=3)
    result = export_policy(ckpt, d / "policy.onnx", robot, rollout_steps=0, log=lambda _: None)
    return result, load_policy_source(ckpt).actor


def _torch(actor, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return actor(torch.from_numpy(np.atleast_2d(obs))).numpy()


def _variant(robot, edit):
    raw = robot.to_dict()
    edit(raw)
    return robot_from_dict(raw, source="variant.yaml")


def test_single_observations_match_pytorch(exported, robot):
    result, actor = exported
    runner = PolicyRunner.load(result.onnx_path, robot)
    assert (runner.obs_dim, runner.num_actions) == (243, 16)
    assert runner.joint_names == robot.joint_names
    assert runner.contract == json.loads(onnx.load(result.onnx_path).metadata_props[0].value)
    obs = np.random.default_rng(1).standard_normal((50, runner.obs_dim)).astype(np.float32)
    singles = np.stack([runner(o) for o in obs])
    expected = _torch(actor, obs)
    assert np.abs(singles - expected).max() <= 1e-5
    # consecutive calls see their own input: the bound input buffer is refreshed every call
    assert not np.allclose(singles[0], singles[1])
    np.testing.assert_allclose(runner.run_batch(obs), expected, atol=1e-5)


def test_returned_actions_are_not_the_internal_buffer(exported, robot):
    runner = PolicyRunner.load(exported[0].onnx_path, robot)
    a, b = np.ones(runner.obs_dim, np.float32), -np.ones(runner.obs_dim, np.float32)
    first = runner(a)
    kept = first.copy()
    runner(b)
    np.testing.assert_array_equal(first, kept)
    out = np.empty(runner.num_actions, np.float32)
    assert runner(a, out=out) is out
    np.testing.assert_array_equal(out, kept)
    # float64 vectors and lists are accepted and cast
    np.testing.assert_allclose(runner(a.astype(np.float64)), kept)
    np.testing.assert_allclose(runner([1.0] * runner.obs_dim), kept)


def test_wrong_shape_and_nan_fail_safe(exported, robot):
    runner = PolicyRunner.load(exported[0].onnx_path, robot)
    with pytest.raises(ValueError, match=r"shape \(242,\), the policy expects \(243,\)"):
        runner(np.zeros(runner.obs_dim - 1, np.float32))
    with pytest.raises(ValueError, match="shape"):
        runner(np.zeros((1, runner.obs_dim), np.float32))
    obs = np.zeros(runner.obs_dim, np.float32)
    obs[5] = np.nan
    with pytest.raises(PolicyError, match=r"non-finite action .* observation values at \[5\]"):
        runner(obs)
    assert np.isfinite(runner(np.zeros(runner.obs_dim, np.float32))).all()


def test_refuses_robot_with_swapped_joints_changed_period_or_grid(exported, robot):
    path = exported[0].onnx_path

    def swap(raw):
        raw["joints"][3], raw["joints"][4] = raw["joints"][4], raw["joints"][3]

    with pytest.raises(PolicyContractError) as e:
        PolicyRunner.load(path, _variant(robot, swap))
    assert "joint order differs at action index 3: policy RF_HAA, robot RF_HFE; 4: policy RF_HFE, robot RF_HAA" in str(
        e.value
    )
    with pytest.raises(PolicyContractError, match=r"control period policy_dt: policy 0.02 s, robot 0.025 s"):
        PolicyRunner.load(path, _variant(robot, lambda raw: raw["rates"].update(policy_hz=40.0)))
    with pytest.raises(PolicyContractError) as e:
        PolicyRunner.load(path, _variant(robot, lambda raw: raw["height_scan"].update(x_range=[-0.5, 0.5])))
    assert "height-scan grid x_range: policy [-0.8, 0.8], robot [-0.5, 0.5]" in str(e.value)
    assert "height-scan grid num_points: policy 187, robot 121" in str(e.value)


def test_refuses_onnx_without_contract_and_mismatched_sidecar(exported, robot, tmp_path):
    model = onnx.load(exported[0].onnx_path)
    contract = json.loads(model.metadata_props[0].value)
    del model.metadata_props[:]
    onnx.save(model, tmp_path / "bare.onnx")
    with pytest.raises(PolicyContractError, match=f"no '{METADATA_KEY}' in the ONNX metadata"):
        PolicyRunner.load(tmp_path / "bare.onnx", robot)

    (tmp_path / "other.onnx").write_bytes(exported[0].onnx_path.read_bytes())
    contract["training"]["iteration"] = 99
    (tmp_path / "other.yaml").write_text(json.dumps(contract))
    with pytest.raises(PolicyContractError, match=r"other\.yaml differs from the contract inside other\.onnx"):
        PolicyRunner.load(tmp_path / "other.onnx", robot)

    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(PolicyContractError, match="not a loadable ONNX model"):
        PolicyRunner.load(tmp_path / "junk.onnx", robot)
    with pytest.raises(FileNotFoundError):
        PolicyRunner.load(tmp_path / "missing.onnx", robot)


def test_runtime_never_imports_torch(exported):
    code = (
        "import sys, numpy as np\n"
        "from aow_policy.policy import PolicyRunner\n"
        "from aow_policy.robot import load_robot\n"
        f"r = PolicyRunner.load({str(exported[0].onnx_path)!r}, load_robot())\n"
        "a = r(np.zeros(r.obs_dim, np.float32))\n"
        "assert a.shape == (16,), a.shape\n"
        "bad = [m for m in ('torch', 'training', 'export') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
