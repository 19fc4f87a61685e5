"""``aow-train --fork``: a branch continues its parent's whole learning state (networks, optimizer,
algorithm state, iteration, generators, the environment and its terrain levels) with only what it
changes changed: unchanged, it is the parent's own continuation bit for bit; a changed task config
keeps the terrain levels and restarts the episodes; what cannot continue is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.test_locomotion_resume import _config
from training.checkpoint import load_checkpoint
from training.config import TrainConfig
from training.runner import Runner
from training.train import main as train_main

TASK = "aow_rough_style"  # a terrain curriculum and the whole C MuJoCo simulation in its state


def _fork_config(parent: TrainConfig, checkpoint, **changes) -> TrainConfig:
    data = parent.to_dict()
    data.update(init_from=None, fork_from=str(checkpoint))
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            data[section][field] = value
        else:
            data[key] = value
    return TrainConfig.from_dict(data)


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A 3-iteration run (the straight continuation) and its checkpoint at iteration 1."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fork")
    stopped = Runner(_config(TASK, 3), root / "parent", progress=False, tensorboard=False)
    stopped.learn(time_budget_s=1e-9)  # checkpoints iteration 1
    stopped.env.close()
    at_1 = root / "parent" / "model_1.pt"
    straight = Runner(_config(TASK, 3), root / "parent", resume=True, progress=False, tensorboard=False)
    straight.learn()
    straight.env.close()
    return root, at_1, root / "parent" / "model_3.pt"


def test_an_unchanged_fork_is_its_parents_own_continuation(parent, tmp_path):
    _, at_1, parent_3 = parent
    cfg = _fork_config(_config(TASK, 3), at_1)
    fork = Runner(cfg, tmp_path / "branch", progress=False, tensorboard=False)
    assert fork.iteration == 1
    assert fork.resume_notes == [f"forked from {at_1} at iteration 1; changed: nothing"]
    fork.learn()
    a, b = load_checkpoint(parent_3), load_checkpoint(tmp_path / "branch" / "model_3.pt")
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg"], pb["exp_avg"])
    assert a["algo_state"].keys() == b["algo_state"].keys()
    ea, eb = a["runner_state"]["ranks"][0]["env"], b["runner_state"]["ranks"][0]["env"]
    assert torch.equal(ea["terrain_levels"], eb["terrain_levels"])
    assert torch.equal(ea["exact"]["commands"], eb["exact"]["commands"])
    assert b["config"]["fork_from"] == str(at_1) and b["config"]["init_from"] is None
    records = [json.loads(line) for line in (tmp_path / "branch" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2]  # its own iterations, numbered on from the parent's
    segment = json.loads((tmp_path / "branch" / "segments.jsonl").read_text().splitlines()[0])
    assert segment["iteration"] == 1 and segment["notes"][0].startswith("forked from")


def test_a_fork_with_another_task_config_keeps_the_levels_and_restarts_the_episodes(parent, tmp_path):
    at_1 = parent[1]
    base = _config(TASK, 3)
    overrides = {**base.env_overrides, "rewards.weights.hip_range": -1.0}
    cfg = _fork_config(base, at_1, env_overrides=overrides, **{"ppo.entropy_coef": 0.002})
    fork = Runner(cfg, tmp_path / "branch", progress=False, tensorboard=False)
    saved = load_checkpoint(at_1)
    assert torch.equal(fork.env.curriculum.levels, saved["runner_state"]["ranks"][0]["env"]["terrain_levels"])
    assert fork.resume_notes == [
        f"forked from {at_1} at iteration 1; changed: env_overrides.rewards.weights.hip_range, ppo.entropy_coef",
        "the task's config changed: episodes restart",
    ]
    for key, value in saved["model"].items():
        assert torch.equal(fork.model.state_dict()[key], value), key
    fork.learn()
    assert fork.iteration == 3 and fork.env.cfg.rewards.weights["hip_range"] == -1.0


def test_a_fork_whose_override_sets_the_tasks_own_value_says_so_and_continues_bit_for_bit(parent, tmp_path):
    """Session 21 forked a line with ``rewards.tracking_sharpness=4.0``, the value its task already
    had, and read "changed: ..., episodes restart": a lever that was never pulled. The fork now
    compares the tasks the two configs build."""
    from training.envs import task_config

    _, at_1, parent_3 = parent
    base = _config(TASK, 3)
    assert task_config(TASK, **base.env_overrides).rewards.tracking_sharpness == 4.0
    overrides = {**base.env_overrides, "rewards.tracking_sharpness": 4.0}
    cfg = _fork_config(base, at_1, env_overrides=overrides)
    fork = Runner(cfg, tmp_path / "branch", progress=False, tensorboard=False)
    assert fork.resume_notes == [
        f"forked from {at_1} at iteration 1; changed: env_overrides.rewards.tracking_sharpness "
        "(already the parent's value: the task is unchanged)"
    ]
    fork.learn()
    a, b = load_checkpoint(parent_3), load_checkpoint(tmp_path / "branch" / "model_3.pt")
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key


def test_fork_refuses_what_cannot_continue(parent, tmp_path, capsys):
    at_1 = parent[1]
    with pytest.raises(Exception, match="cannot continue as 'ppo'"):
        Runner(_fork_config(_config(TASK, 3), at_1, algo="ppo", algo_params=None), tmp_path / "a", progress=False)
    with pytest.raises(Exception, match="its networks do not fit"):
        wider = _config(TASK, 3).to_dict()["network"] | {"actor_hidden": [8]}
        Runner(_fork_config(_config(TASK, 3), at_1, network=wider), tmp_path / "b", progress=False)
    with pytest.raises(Exception, match="not both"):
        _fork_config(_config(TASK, 3), at_1, init_from=str(at_1)).validate()
    assert train_main(["--fork", str(at_1), "--task", "aow_flat"]) == 2
    assert "--task: --fork continues" in capsys.readouterr().err
    assert train_main(["--fork", str(at_1)]) == 2
    assert "--fork needs --run-dir" in capsys.readouterr().err
    assert train_main(["--fork", str(tmp_path / "missing.pt"), "--run-dir", str(tmp_path / "c")]) == 2


def test_the_cli_fork_applies_set_and_env_override_to_the_parents_config(parent, tmp_path):
    """The parent given as a run directory (its latest checkpoint), one iteration more."""
    from training.train import build_parser, fork_config

    root, _, parent_3 = parent
    args = build_parser().parse_args(
        ["--fork", str(root / "parent"), "--run-dir", str(tmp_path / "b"), "--set", "ppo.entropy_coef=0.001",
         "--env-override", "terrain.max_init_level=1", "--iterations", "4"]
    )  # fmt: skip
    args.fork = Path(args.fork)
    cfg = fork_config(args)
    stored = TrainConfig.from_dict(load_checkpoint(parent_3)["config"])
    assert cfg.fork_from == str(parent_3) and cfg.iterations == 4 and cfg.ppo.entropy_coef == 0.001
    assert cfg.env_overrides == {**stored.env_overrides, "terrain.max_init_level": 1}
    assert cfg.network == stored.network and cfg.task == stored.task
