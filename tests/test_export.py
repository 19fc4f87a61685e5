"""aow-export: graph, contract, verification, atomic output and every refusal (nothing written)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import yaml

from aow_policy.layout import ObservationLayout
from aow_policy.policy import PolicyRunner
from aow_policy.policy_contract import METADATA_KEY, PolicyContractError
from aow_policy.robot import load_robot, robot_from_dict
from export import ExportError, export_policy
from export.checkpoint_source import load_policy_source
from export.cli import main
from export.contract import config_hash
from export.synthetic import paper_observation_layout, synthetic_payload, write_synthetic_checkpoint
from training.checkpoint import save_checkpoint
from training.networks import NetworkConfig

SMALL = NetworkConfig(scan_encoder=(16, 8), actor_hidden=(32, 16), critic_hidden=(16,), cost_critic_hidden=(8,))
QUIET = {"rollout_steps": 0, "log": lambda _: None}


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, robot):
    d = tmp_path_factory.mktemp("run")
    for it in (2, 10, 9):
        write_synthetic_checkpoint(d / f"model_{it}.pt", robot, iteration=it, seed=it)
    return d


@pytest.fixture(scope="module")
def exported(run_dir, robot, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "policy.onnx"
    lines: list[str] = []
    result = export_policy(run_dir, out, robot, rollout_steps=0, log=lines.append)
    return result, lines


def _files(d):
    return sorted(p.name for p in d.iterdir())


def test_run_dir_picks_latest_and_says_so(exported, run_dir):
    result, lines = exported
    assert result.checkpoint == run_dir / "model_10.pt" and result.picked_latest
    assert f"run directory {run_dir}: using the latest checkpoint model_10.pt" in lines
    assert result.contract["training"]["iteration"] == 10
    assert _files(result.onnx_path.parent) == ["policy.onnx", "policy.yaml"]


def test_graph_interface_opset_and_checker(exported):
    result, _ = exported
    model = onnx.load(result.onnx_path)
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "obs" and out.name == "actions"
    in_dims, out_dims = inp.type.tensor_type.shape.dim, out.type.tensor_type.shape.dim
    assert in_dims[0].dim_param and not in_dims[0].dim_value  # dynamic batch axis
    assert in_dims[1].dim_value == 243 and out_dims[1].dim_value == 16
    # the normalizer is part of the graph: statistics folded into constants, no extra inputs
    ops = [n.op_type for n in model.graph.node]
    assert {"Sub", "Div", "Clip"} <= set(ops)
    session = ort.InferenceSession(str(result.onnx_path), providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        assert session.run(None, {"obs": np.zeros((batch, 243), np.float32)})[0].shape == (batch, 16)


def test_metadata_and_sidecar_hold_the_same_contract(exported, robot):
    result, _ = exported
    meta = {p.key: p.value for p in onnx.load(result.onnx_path).metadata_props}
    stored = json.loads(meta[METADATA_KEY])
    assert stored == yaml.safe_load(result.yaml_path.read_text()) == result.contract
    source = load_policy_source(result.checkpoint)
    assert stored["schema_version"] == 1
    assert stored["robot"] == {"name": robot.name, "contract_hash": robot.contract_hash}
    assert stored["control"] == {"policy_dt": 0.02, "physics_dt": 0.005}
    assert [a["joint"] for a in stored["actions"]] == list(robot.joint_names)
    lh_kfe = stored["actions"][robot.joint_names.index("LH_KFE")]
    assert lh_kfe == {"joint": "LH_KFE", "kind": "leg", "mode": "position", "scale": 0.5, "offset": 0.8} | {
        "low": -9.42,
        "high": 9.42,
    }
    rh_wheel = stored["actions"][robot.joint_names.index("RH_WHEEL")]
    assert (rh_wheel["mode"], rh_wheel["scale"], rh_wheel["low"], rh_wheel["high"]) == ("velocity", 5.0, -30.0, 30.0)
    assert stored["observation"] == {"dim": 243, "terms": paper_observation_layout(robot).to_list()}
    scan = stored["observation"]["terms"][-1]
    assert (scan["name"], scan["offset"], scan["scale"], scan["clip"]) == ("height_scan", 56, 5.0, 1.0)
    assert stored["height_scan"] == {
        "x_range": [-0.8, 0.8],
        "y_range": [-0.5, 0.5],
        "spacing": 0.1,
        "order": "x_major",
        "num_points": 187,
        "nx": 17,
        "ny": 11,
    }
    assert stored["constraint_limits"] == {"joint_speed": 6.0, "joint_torque": 75.0}
    training = stored["training"]
    assert (training["task"], training["algorithm"], training["iteration"]) == ("aow_rough", "np3o", 10)
    assert training["config_hash"] == config_hash(source.config) and len(training["config_hash"]) == 64
    assert training["obs_normalization"] is True
    assert training["source_commit"] is None or len(training["source_commit"]) == 40
    assert stored["export"]["opset"] == 17
    assert 0 <= stored["export"]["verified_max_abs_diff"] <= 1e-5
    assert stored["export"]["verified_observations"] == {"random": 1000}
    assert stored["export"]["time_utc"].endswith("Z")


def test_config_hash_ignores_key_order():
    assert config_hash({"a": 1, "b": {"c": 2, "d": 3}}) == config_hash({"b": {"d": 3, "c": 2}, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


@pytest.mark.parametrize("normalize", [True, False])
def test_with_and_without_normalization_verified(tmp_path, robot, normalize):
    network = NetworkConfig(normalize_obs=normalize)
    ckpt = write_synthetic_checkpoint(tmp_path / "model_1.pt", robot, network=network, iteration=1)
    result = export_policy(ckpt, None, robot, **QUIET)
    assert result.onnx_path == tmp_path / "policy.onnx"
    assert result.verification.ok and result.verification.counts["random"] == 1000
    assert result.verification.counts["single observation"] == 100
    assert result.contract["training"]["obs_normalization"] is normalize
    ops = {n.op_type for n in onnx.load(result.onnx_path).graph.node}
    assert ("Clip" in ops) is normalize  # the normalizer's clip exists only when normalization is on
    runner = PolicyRunner.load(result.onnx_path, robot)
    actor = load_policy_source(ckpt).actor
    obs = (np.random.default_rng(5).standard_normal((20, 243)) * 4).astype(np.float32)
    with torch.no_grad():
        expected = actor(torch.from_numpy(obs)).numpy()
    assert np.abs(np.stack([runner(o) for o in obs]) - expected).max() <= 1e-5


def _payload(robot, **kwargs):
    return synthetic_payload(robot, network=SMALL, **kwargs)


def _raw_save(path, payload):
    """torch.save without save_checkpoint's own key check, to build broken checkpoints."""
    torch.save({"format": "aow-checkpoint", "version": 1, **payload}, path)
    return path


def _break_missing_key(robot, path):
    payload = _payload(robot)
    del payload["optimizer"]
    return _raw_save(path, payload), "checkpoint lacks key(s) ['optimizer']"


def _break_unknown_key(robot, path):
    return _raw_save(path, _payload(robot) | {"surprise": 1}), "unknown checkpoint key(s) ['surprise']"


def _break_missing_weight(robot, path):
    payload = _payload(robot)
    del payload["model"]["actor.mean_head.bias"]
    return _raw_save(path, payload), "missing weight(s) ['actor.mean_head.bias']"


def _break_unknown_weight(robot, path):
    payload = _payload(robot)
    payload["model"]["actor.extra.weight"] = torch.zeros(3)
    return _raw_save(path, payload), "unknown weight(s) ['actor.extra.weight']"


def _break_nan_weight(robot, path):
    payload = _payload(robot)
    payload["model"]["actor.trunk.body.0.weight"][0, 0] = float("nan")
    return _raw_save(path, payload), "non-finite (NaN or inf) values in weight(s) ['actor.trunk.body.0.weight']"


def _break_obs_size(robot, path):
    payload = _payload(robot)
    terms = [t for t in paper_observation_layout(robot).to_list() if t["name"] != "last_action"]
    payload["obs_layout"]["policy"] = ObservationLayout.build(terms).to_list()  # 16 values fewer than trained
    return _raw_save(path, payload), "weight shapes disagree with the config (observation size 227"


def _break_truncated(robot, path):
    save_checkpoint(path, _payload(robot))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path, "not a readable checkpoint"


def _break_text_file(robot, path):
    path.write_text("iteration: 3\n")
    return path, "not a readable checkpoint"


def _break_foreign_pickle(robot, path):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    return path, "not an AoW checkpoint"


def _break_action_count(robot, path):
    payload = _payload(robot)
    payload["num_actions"] = 12
    return _raw_save(path, payload), "num_actions is 12 but action_layout lists 16 joints"


@pytest.mark.parametrize(
    "breaker",
    [
        _break_missing_key,
        _break_unknown_key,
        _break_missing_weight,
        _break_unknown_weight,
        _break_nan_weight,
        _break_obs_size,
        _break_truncated,
        _break_text_file,
        _break_foreign_pickle,
        _break_action_count,
    ],
)
def test_bad_checkpoints_refused_and_nothing_written(tmp_path, robot, breaker):
    ckpt, message = breaker(robot, tmp_path / "model_3.pt")
    before = _files(tmp_path)
    with pytest.raises(ExportError) as e:
        export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert message in str(e.value)
    assert _files(tmp_path) == before


def test_missing_path_and_empty_run_dir_refused(tmp_path, robot):
    with pytest.raises(ExportError, match="no such checkpoint file or run directory"):
        export_policy(tmp_path / "nope.pt", tmp_path / "p.onnx", robot, **QUIET)
    with pytest.raises(ExportError, match="no checkpoints"):
        export_policy(tmp_path, tmp_path / "p.onnx", robot, **QUIET)
    assert _files(tmp_path) == []


def test_verification_failure_prints_numbers_and_writes_nothing(tmp_path, robot, monkeypatch):
    ckpt = save_checkpoint(tmp_path / "model_1.pt", _payload(robot))
    import export.pipeline as pipeline

    real = pipeline.actor_to_onnx

    def perturbed(actor, obs_dim, opset):
        wrong = copy.deepcopy(actor)  # the PyTorch reference keeps the checkpoint's weights
        with torch.no_grad():
            wrong.mean_head.bias[3] += 1e-3
        return real(wrong, obs_dim, opset)

    monkeypatch.setattr(pipeline, "actor_to_onnx", perturbed)
    before = _files(tmp_path)
    with pytest.raises(ExportError) as e:
        export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    text = str(e.value)
    assert "verification failed (graph): ONNX Runtime and PyTorch disagree by up to 0.001" in text
    assert "random: 1000 observations, max |onnx - torch| = 0.001 (ABOVE tolerance 1e-05)" in text
    assert _files(tmp_path) == before


def test_failure_after_writing_temporaries_leaves_nothing(tmp_path, robot, monkeypatch):
    ckpt = save_checkpoint(tmp_path / "model_1.pt", _payload(robot))
    (tmp_path / "policy.onnx").write_bytes(b"previous policy")
    import export.pipeline as pipeline

    def broken(*args, **kwargs):
        raise ExportError("simulated failure of the written-file check")

    monkeypatch.setattr(pipeline, "_verify_written", broken)
    with pytest.raises(ExportError, match="simulated"):
        export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert _files(tmp_path) == ["model_1.pt", "policy.onnx"]
    assert (tmp_path / "policy.onnx").read_bytes() == b"previous policy"


def test_checkpoint_from_another_robot_contract_refused(tmp_path, robot):
    raw = robot.to_dict()
    raw["joints"][0], raw["joints"][1] = raw["joints"][1], raw["joints"][0]
    other = robot_from_dict(raw, source="swapped.yaml")
    ckpt = save_checkpoint(tmp_path / "model_1.pt", _payload(other))
    with pytest.raises(ExportError) as e:
        export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert "does not fit robot contract" in str(e.value)
    assert "joint order differs at action index 0: policy LF_HFE, robot LF_HAA" in str(e.value)
    assert _files(tmp_path) == ["model_1.pt"]


class _FakeEnv:
    """Mimics the environment API (INTERFACES section 1) closely enough for a rollout."""

    def __init__(self, layout, num_envs):
        self.obs_spec = {"policy": layout, "critic": layout}
        self.num_envs, self.layout, self.steps = num_envs, layout, 0
        self.closed = False

    def _obs(self):
        g = torch.Generator().manual_seed(self.steps)
        return {"policy": torch.randn(self.num_envs, self.layout.dim, generator=g)}

    def reset(self):
        return self._obs()

    def step(self, actions):
        assert actions.shape == (self.num_envs, 16)
        self.steps += 1
        return self._obs(), torch.zeros(self.num_envs), None, torch.zeros(self.num_envs, dtype=torch.bool), {}

    def close(self):
        self.closed = True


def test_rollout_observations_verified_when_env_builds(tmp_path, robot, monkeypatch):
    payload = _payload(robot, task="aow_rough")
    payload["config"]["env_overrides"] = {"terrain": "flat"}  # the run's task overrides reach make_env
    ckpt = save_checkpoint(tmp_path / "model_1.pt", payload)
    envs = []

    def make_env(task, num_envs, **kwargs):
        assert task == "aow_rough"
        assert kwargs == {"backend": "mujoco", "device": "cpu", "seed": 0, "terrain": "flat"}
        envs.append(_FakeEnv(paper_observation_layout(robot), num_envs))
        return envs[-1]

    monkeypatch.setitem(sys.modules, "training.envs", types.SimpleNamespace(make_env=make_env))
    result = export_policy(ckpt, tmp_path / "p.onnx", robot, rollout_steps=5, rollout_envs=3, log=lambda _: None)
    assert result.verification.counts["rollout"] == 15
    assert result.verification.max_abs_diff["rollout"] <= 1e-5
    assert result.contract["export"]["verified_observations"] == {"random": 1000, "rollout": 15}
    assert envs[0].steps == 5 and envs[0].closed

    def other_layout_env(task, num_envs, **kwargs):
        return _FakeEnv(paper_observation_layout(robot, height_scan=False), num_envs)

    monkeypatch.setitem(sys.modules, "training.envs", types.SimpleNamespace(make_env=other_layout_env))
    result = export_policy(ckpt, tmp_path / "p.onnx", robot, rollout_steps=5, log=lambda _: None)
    assert "rollout" not in result.verification.counts
    assert any("different policy observation layout" in n for n in result.verification.notes)


def test_cli_exit_codes_and_messages(tmp_path, robot, capsys):
    ckpt = save_checkpoint(tmp_path / "model_4.pt", _payload(robot, iteration=4))
    assert main([str(tmp_path), "-o", str(tmp_path / "out" / "p.onnx"), "--rollout-steps", "0"]) == 0
    printed = capsys.readouterr().out
    assert "using the latest checkpoint model_4.pt" in printed and "max |onnx - torch|" in printed
    assert _files(tmp_path / "out") == ["p.onnx", "p.yaml"]

    ckpt.write_bytes(b"garbage")
    assert main([str(ckpt), "-o", str(tmp_path / "bad.onnx")]) == 1
    assert "aow-export: error:" in capsys.readouterr().err
    assert main([str(tmp_path), "-o", str(tmp_path / "p.txt")]) == 1
    assert "expected a .onnx file name" in capsys.readouterr().err
    assert not (tmp_path / "bad.onnx").exists()


def test_python_dash_m_export_help():
    proc = subprocess.run([sys.executable, "-m", "export", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: aow-export")
    assert "checkpoint file (model_<iteration>.pt) or run directory" in " ".join(proc.stdout.split())


def test_flat_policy_without_height_scan(tmp_path, robot):
    layout = paper_observation_layout(robot, height_scan=False)
    ckpt = save_checkpoint(tmp_path / "model_1.pt", _payload(robot, layout=layout, task="aow_flat"))
    result = export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert result.contract["height_scan"] is None and result.contract["observation"]["dim"] == 56
    raw = robot.to_dict()
    raw["height_scan"]["spacing"] = 0.2
    other_grid = robot_from_dict(raw, source="grid.yaml")
    with pytest.raises(PolicyContractError, match="contract hash") as e:  # only the hash differs: grid unused
        PolicyRunner.load(result.onnx_path, other_grid)
    assert "height-scan" not in str(e.value)
    assert PolicyRunner.load(result.onnx_path, robot)(np.zeros(56, np.float32)).shape == (16,)


def test_runner_extras_ppo_without_cost_critics_and_action_clip(tmp_path, robot):
    payload = _payload(robot, cost_critics=False)  # plain PPO trains no cost critics
    assert not any(k.startswith("cost_critics.") for k in payload["model"])
    # keys the training runner adds beyond the required ones; the task config carries the action clip
    payload |= {"cost_names": ["c1"], "env_config": {"actions": {"clip": 100.0}}, "runner_state": {"ranks": []}}
    ckpt = save_checkpoint(tmp_path / "model_1.pt", payload)
    result = export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert result.contract["action_clip"] == 100.0
    assert result.verification.ok


def test_cost_critic_count_must_match_cost_groups(tmp_path, robot):
    payload = _payload(robot)
    payload["cost_groups"] = {"only": ["c1"]}
    ckpt = _raw_save(tmp_path / "model_1.pt", payload)
    with pytest.raises(ExportError, match=r"holds 2 cost critic\(s\) but the checkpoint lists 1 cost group\(s\)"):
        export_policy(ckpt, tmp_path / "policy.onnx", robot, **QUIET)
    assert _files(tmp_path) == ["model_1.pt"]
