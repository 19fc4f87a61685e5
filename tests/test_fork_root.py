"""training.fork_root: a policy-only copy given the portable runner state (terrain levels,
generators, counters) of a later checkpoint of its run forks with those levels and fresh episodes,
instead of a curriculum restarted at its first levels; --reseed makes two forks of one root differ;
checkpoints of different runs are refused by name and no input is overwritten."""

from __future__ import annotations

import pytest
import torch

from tests.test_fork import _fork_config
from tests.test_locomotion_resume import _config
from training.checkpoint import CheckpointError, load_checkpoint
from training.fork_root import fork_root
from training.fork_root import main as fork_root_main
from training.runner import Runner
from training.slim_checkpoint import main as slim_main

TASK = "aow_rough_style"


@pytest.fixture(scope="module")
def line(tmp_path_factory):
    """A run's checkpoints at iterations 1 and 3, and the policy-only copy of the first."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fork_root")
    first = Runner(_config(TASK, 3), root / "run", progress=False, tensorboard=False)
    first.learn(time_budget_s=1e-9)  # checkpoints iteration 1
    first.env.close()
    rest = Runner(_config(TASK, 3), root / "run", resume=True, progress=False, tensorboard=False)
    rest.env.curriculum.levels[:] = torch.arange(rest.num_envs) % 3  # levels that differ from iteration 1's
    rest.learn()
    rest.env.close()
    assert slim_main([str(root / "run" / "model_1.pt"), "--policy", "--out", str(root / "ship")]) == 0
    return root, root / "ship" / "model_1.pt", root / "run" / "model_3.pt"


def test_the_root_is_the_policy_with_the_later_checkpoints_levels_and_forks_with_them(line, tmp_path):
    root, policy_1, state_3 = line
    out = tmp_path / "root" / "model_1.pt"
    assert fork_root_main([str(policy_1), str(state_3), "--out", str(out)]) == 0
    made, policy, state = load_checkpoint(out), load_checkpoint(policy_1), load_checkpoint(state_3)
    assert made["iteration"] == 1
    for key, value in policy["model"].items():
        assert torch.equal(made["model"][key], value), key
    env = made["runner_state"]["ranks"][0]["env"]
    assert "exact" not in env and "obs" not in made["runner_state"]["ranks"][0]  # episodes restart
    levels_3 = state["runner_state"]["ranks"][0]["env"]["terrain_levels"]
    assert torch.equal(env["terrain_levels"], levels_3)
    levels_1 = load_checkpoint(root / "run" / "model_1.pt")["runner_state"]["ranks"][0]["env"]["terrain_levels"]
    assert not torch.equal(levels_3, levels_1)

    fork = Runner(_fork_config(_config(TASK, 3), out), tmp_path / "branch", progress=False, tensorboard=False)
    assert fork.iteration == 1
    assert torch.equal(fork.env.curriculum.levels, levels_3)
    assert "the checkpoint holds no simulation state: episodes restart" in fork.resume_notes
    fork.learn()
    fork.env.close()
    assert fork.iteration == 3


def test_reseed_gives_two_forks_of_one_root_their_own_generators(line):
    _, policy_1, state_3 = line
    policy, state = load_checkpoint(policy_1), load_checkpoint(state_3)
    plain = fork_root(policy, state)
    one, again, two = (fork_root(policy, state, reseed=s) for s in (1, 1, 2))
    gens = [r["runner_state"]["ranks"][0]["generator"] for r in (plain, one, again, two)]
    assert torch.equal(gens[0], state["runner_state"]["ranks"][0]["generator"])
    assert torch.equal(gens[1], gens[2])  # the same seed, the same generators
    assert not torch.equal(gens[1], gens[3]) and not torch.equal(gens[0], gens[1])
    env_gens = [r["runner_state"]["ranks"][0]["env"]["generator"] for r in (one, two)]
    assert not torch.equal(env_gens[0], env_gens[1])
    assert torch.equal(one["rng"]["generators"][0], gens[1])  # "rng" kept consistent with the runner state
    # The global torch state is reseeded too: the same seed the same, another another, and a state
    # torch.set_rng_state accepts (what a resume does with it).
    torch_states = [r["rng"]["torch"] for r in (plain, one, again, two)]
    assert torch.equal(torch_states[0], policy["rng"]["torch"])
    assert torch.equal(torch_states[1], torch_states[2]) and not torch.equal(torch_states[1], torch_states[3])
    assert not torch.equal(torch_states[0], torch_states[1])
    saved = torch.get_rng_state()
    try:
        torch.set_rng_state(torch_states[1])
        first = torch.rand(3)
        torch.set_rng_state(torch_states[2])
        assert torch.equal(torch.rand(3), first)
    finally:
        torch.set_rng_state(saved)


def test_checkpoints_of_different_runs_and_overwrites_are_refused(line, tmp_path, capsys):
    _, policy_1, state_3 = line
    policy, state = load_checkpoint(policy_1), load_checkpoint(state_3)
    other = {**state, "config": {**state["config"], "task": "aow_flat", "num_envs": 64}}
    with pytest.raises(CheckpointError, match=r"task: 'aow_rough_style' vs 'aow_flat'.*num_envs"):
        fork_root(policy, other)
    with pytest.raises(CheckpointError, match="no runner state"):
        fork_root(state, policy)
    before = policy_1.read_bytes()
    assert fork_root_main([str(policy_1), str(state_3), "--out", str(policy_1)]) == 1
    assert "would overwrite an input" in capsys.readouterr().err
    assert policy_1.read_bytes() == before
