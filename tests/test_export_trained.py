"""Train a tiny policy with the real runner for a couple of iterations, export it, reload it.

The environment is a small robot-shaped stand-in (the robot contract's joints, the paper's
observation layout with the height scan, two cost groups) so the test does not depend on the
MuJoCo task; the runner, algorithm, normalizer updates and checkpoint writing are the real ones.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
import yaml

from aow_policy.policy import PolicyRunner
from aow_policy.policy_contract import METADATA_KEY, PolicyContractError
from aow_policy.robot import load_robot, robot_from_dict
from export import export_policy
from export.checkpoint_source import load_policy_source
from export.synthetic import paper_observation_layout, robot_action_layout
from training.networks import NetworkConfig

runner_module = pytest.importorskip("training.runner", reason="the training runner (issue 4) is not here yet")
config_module = pytest.importorskip("training.config")


class RobotShapedEnv:
    """Follows the environment API (INTERFACES section 1) with toy linear dynamics."""

    def __init__(self, robot, num_envs: int, seed: int = 0):
        self.robot = robot
        self.num_envs, self.num_actions = num_envs, len(robot.joint_names)
        self.device = torch.device("cpu")
        self.max_episode_length = 6
        layout = paper_observation_layout(robot)
        self.obs_spec = {"policy": layout, "critic": layout}
        self.cost_names = ["smoothness_1", "joint_speed"]
        self.cost_groups = {"smoothness": ["smoothness_1"], "limits": ["joint_speed"]}
        self.action_layout = robot_action_layout(robot)
        self.generator = torch.Generator().manual_seed(seed)
        self.mix = torch.randn(self.num_actions, layout.dim, generator=self.generator) * 0.3
        self.state = torch.zeros(num_envs, layout.dim)
        self.steps = torch.zeros(num_envs, dtype=torch.long)

    def _obs(self):
        return {"policy": self.state.clone(), "critic": self.state.clone()}

    def reset(self):
        self.state = torch.randn(self.num_envs, self.state.shape[1], generator=self.generator)
        return self._obs()

    def step(self, actions):
        noise = torch.randn(self.state.shape, generator=self.generator)
        self.state = 0.8 * self.state + actions.clamp(-3, 3) @ self.mix + 0.1 * noise
        speed = actions.abs().amax(-1)
        rewards = -actions.square().mean(-1)
        costs = torch.stack([(speed > 1.5).float(), (speed > 2.0).float()], dim=-1)
        self.steps += 1
        time_outs = self.steps >= self.max_episode_length
        infos = {"time_outs": time_outs, "episode": {}, "terminal_obs": self._obs()}
        if bool(time_outs.any()):
            self.state[time_outs] = torch.randn(int(time_outs.sum()), self.state.shape[1], generator=self.generator)
            self.steps[time_outs] = 0
            infos["episode"] = {"length": float(self.max_episode_length)}
        return self._obs(), rewards, costs, time_outs.clone(), infos


@pytest.fixture(scope="module")
def robot():
    return load_robot()


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory, robot):
    run_dir = tmp_path_factory.mktemp("tiny_run")
    cfg = config_module.TrainConfig(
        task="aow_flat",
        algo="np3o",
        num_envs=8,
        num_steps_per_env=8,
        iterations=2,
        save_interval=1,
        network=NetworkConfig(
            scan_encoder=(16, 8), actor_hidden=(32, 16), critic_hidden=(32, 16), cost_critic_hidden=(16,)
        ),
    )
    cfg.ppo.num_minibatches = 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner_module, "check_task", lambda task: None)  # the stand-in env replaces the task
        runner = runner_module.Runner(cfg, run_dir, env=RobotShapedEnv(robot, 8), progress=False, tensorboard=False)
        runner.learn()
    lines: list[str] = []
    result = export_policy(run_dir, run_dir / "policy.onnx", robot, rollout_steps=0, log=lines.append)
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
    assert meta["training"]["task"] == "aow_flat" and meta["training"]["algorithm"] == "np3o"
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
