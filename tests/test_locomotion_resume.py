"""Issue 23: a locomotion run stopped by its time budget and resumed reaches the same learning
state as one run straight through, with the new MDP terms on (air time, command modes, style
rewards, only-positive rewards, command reversals, the joint-speed trip, the hip-range penalty,
the terrain curriculum by progress along the command): the C MuJoCo simulation and every per-env
buffer are saved."""

from __future__ import annotations

import pytest
import torch

from training.checkpoint import load_checkpoint
from training.config import TrainConfig, apply_override
from training.runner import Runner

TINY = [
    "network.actor_hidden=[16,16]",
    "network.critic_hidden=[16,16]",
    "network.cost_critic_hidden=[16]",
    "ppo.num_epochs=1",
    "ppo.num_minibatches=2",
]


# Task-specific levers on top of the common ones.
EXTRA = {
    "aow_flat_style": {"rewards.weights.hip_range": -1.0},
    "anymal_flat_legged_gym": {},
    "aow_rough_style": {
        "terrain.num_rows": 3,
        "terrain.num_cols": 2,
        "terrain.tile_size": 4.0,
        "terrain.border": 2.0,
        "terrain.curriculum_distance": "along_command",
        "terrain.max_init_level": 2,
    },
}


def _config(task: str, iterations: int) -> TrainConfig:
    data = TrainConfig(
        task=task, algo="np3o", num_envs=4, num_steps_per_env=16, iterations=iterations, save_interval=100
    ).to_dict()
    for a in TINY:
        apply_override(data, a)
    # Short episodes and command periods so resets, resampling and pushes all happen in the test.
    data["env_overrides"] = {
        "episode_length_s": 0.5,
        "commands.resampling_time": 0.2,
        "domain_rand.push_interval_s": 0.3,
        "sim.num_threads": 1,
        "commands.reversal_share": 0.5,  # draws from the env's generator on every timed resample
        "terminations.joint_speed_trip": 2.0,
        **EXTRA[task],
    }
    return TrainConfig.from_dict(data)


@pytest.mark.parametrize("task", list(EXTRA))
def test_time_bounded_run_resumed_equals_a_straight_run(tmp_path, task):
    torch.set_num_threads(1)
    straight = Runner(_config(task, 3), tmp_path / "straight", progress=False, tensorboard=False)
    assert straight.env.resume_exact
    straight.learn()
    stopped = Runner(_config(task, 3), tmp_path / "stopped", progress=False, tensorboard=False)
    stopped.learn(time_budget_s=1e-9)  # the budget ends after the first iteration, which is checkpointed
    assert stopped.iteration == 1 and (tmp_path / "stopped" / "model_1.pt").is_file()
    stopped.env.close()
    resumed = Runner(_config(task, 3), tmp_path / "stopped", resume=True, progress=False, tensorboard=False)
    assert resumed.iteration == 1 and resumed.resume_notes == []
    resumed.learn()
    a = load_checkpoint(tmp_path / "straight" / "model_3.pt")
    b = load_checkpoint(tmp_path / "stopped" / "model_3.pt")
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg"], pb["exp_avg"]) and torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])
    ea, eb = a["runner_state"]["ranks"][0]["env"]["exact"], b["runner_state"]["ranks"][0]["env"]["exact"]
    for name in ("feet_air_time", "commands", "episode_rewards", "last_actions", "progress_along_command"):
        assert torch.equal(ea[name], eb[name]), name
    if task == "aow_rough_style":
        assert torch.equal(
            a["runner_state"]["ranks"][0]["env"]["terrain_levels"],
            b["runner_state"]["ranks"][0]["env"]["terrain_levels"],
        )
        assert float(ea["commanded_path"].max()) > 0  # the sums ran
    assert torch.equal(ea["sim"]["integration"], eb["sim"]["integration"])
    metrics_a = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    metrics_b = (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()
    assert [m.split('"time/')[0] for m in metrics_a] == [m.split('"time/')[0] for m in metrics_b]
    straight.env.close()
    resumed.env.close()


def test_whole_state_checkpoint_resumes_on_a_backend_without_it(tmp_path, monkeypatch):
    """A C MuJoCo checkpoint (whole simulation saved) resumed where the env cannot take a whole
    simulation (MuJoCo Warp has no ``get_state``): the levels and counters carry over, the
    episodes restart. Session 23's GPU window stopped here: the saved simulation reached the env."""
    from training.envs.locomotion import LocomotionEnv

    torch.set_num_threads(1)
    first = Runner(_config("aow_rough_style", 2), tmp_path / "run", progress=False, tensorboard=False)
    first.learn(time_budget_s=1e-9)
    saved = load_checkpoint(tmp_path / "run" / "model_1.pt")["runner_state"]["ranks"][0]["env"]
    assert "exact" in saved
    first.env.close()
    monkeypatch.setattr(LocomotionEnv, "resume_exact", property(lambda self: False))
    resumed = Runner(_config("aow_rough_style", 2), tmp_path / "run", resume=True, progress=False, tensorboard=False)
    assert resumed.iteration == 1
    assert torch.equal(resumed.env.curriculum.levels.cpu(), saved["terrain_levels"])
    assert resumed.env.common_step == saved["common_step"]
    resumed.learn()
    assert resumed.iteration == 2
    resumed.env.close()


def test_slim_checkpoints_resume_elsewhere_and_ship(tmp_path):
    """training.slim_checkpoint: the portable copy (no simulation, no observations) resumes at
    another number of environments with the terrain levels spread; the policy copy has no runner
    state; a copy never overwrites its source."""
    from training.checkpoint import CheckpointError
    from training.slim_checkpoint import main as slim_main
    from training.slim_checkpoint import slim_files

    torch.set_num_threads(1)
    first = Runner(_config("aow_rough_style", 2), tmp_path / "run", progress=False, tensorboard=False)
    first.learn(time_budget_s=1e-9)
    first.env.close()
    src = tmp_path / "run" / "model_1.pt"
    full = load_checkpoint(src)
    assert slim_main([str(tmp_path / "run"), "--last", "1", "--out", str(tmp_path / "back")]) == 0
    slim = load_checkpoint(tmp_path / "back" / "model_1.pt")
    rank = slim["runner_state"]["ranks"][0]
    assert "exact" not in rank["env"] and "obs" not in rank
    assert torch.equal(rank["env"]["terrain_levels"], full["runner_state"]["ranks"][0]["env"]["terrain_levels"])
    for key, value in full["model"].items():
        assert torch.equal(value, slim["model"][key]), key
    assert (tmp_path / "back" / "model_1.pt").stat().st_size < src.stat().st_size
    assert "exact" in full["runner_state"]["ranks"][0]["env"]  # the source is untouched
    # The portable copy continues at twice the environments, its levels handed out in proportion.
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("config.yaml", "metrics.jsonl", "segments.jsonl"):
        (moved / name).write_bytes((tmp_path / "run" / name).read_bytes())
    (moved / "model_1.pt").write_bytes((tmp_path / "back" / "model_1.pt").read_bytes())
    cfg = _config("aow_rough_style", 2)
    cfg.num_envs = 8
    resumed = Runner(cfg, moved, resume=True, progress=False, tensorboard=False)
    assert resumed.iteration == 1 and any("4 -> 8 environments" in n for n in resumed.resume_notes)
    assert sorted(resumed.env.curriculum.levels.tolist()) == sorted(2 * rank["env"]["terrain_levels"].tolist())
    resumed.learn()
    resumed.env.close()
    assert slim_main([str(src), "--policy", "--out", str(tmp_path / "ship")]) == 0
    assert "runner_state" not in load_checkpoint(tmp_path / "ship" / "model_1.pt")
    with pytest.raises(CheckpointError, match="overwrite its source"):
        slim_files([src], tmp_path / "run")
    assert slim_main([str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 1
