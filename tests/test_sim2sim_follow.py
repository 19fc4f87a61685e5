"""python -m sim2sim.follow: a training run's new checkpoints kept and screened as they come.

The end-to-end case trains a tiny real run and screens it on the mild course of
test_sim2sim_course (as test_sim2sim_screen does); which checkpoint is due is checked on empty
files."""

from __future__ import annotations

import json

import pytest
from test_sim2sim_course import MILD_COURSE

from sim2sim import follow, screen
from training.checkpoint import load_checkpoint


def test_the_newest_checkpoint_is_due_every_n_iterations(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert follow.pending_checkpoint(run, [], every=10) is None  # nothing written yet
    for it in (5, 12):
        (run / f"model_{it}.pt").write_bytes(b"")
    assert follow.pending_checkpoint(run, [], every=10) == (12, run / "model_12.pt")  # the first at once
    assert follow.pending_checkpoint(run, [12], every=10) is None
    (run / "model_20.pt").write_bytes(b"")
    assert follow.pending_checkpoint(run, [12], every=10) is None  # 8 past the last screened
    (run / "model_22.pt").write_bytes(b"")
    assert follow.pending_checkpoint(run, [12], every=10) == (22, run / "model_22.pt")
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("screen_12.json", "screen_3.json", "screen_x.json", "history.md"):
        (kept / name).write_text("{}")
    assert follow.screened_iterations(kept) == [3, 12]


def test_a_tiny_run_is_kept_screened_and_followed_on(tmp_path, monkeypatch, capsys):
    import training.envs  # noqa: F401
    from training.config import TrainConfig
    from training.networks import NetworkConfig
    from training.runner import Runner

    run = tmp_path / "tiny"
    cfg = TrainConfig(
        task="aow_flat", algo="np3o", num_envs=4, num_steps_per_env=8, iterations=2, save_interval=1,
        network=NetworkConfig(actor_hidden=(16, 16), critic_hidden=(16, 16), cost_critic_hidden=(16,)),
    )  # fmt: skip
    cfg.ppo.num_minibatches = 2
    runner = Runner(cfg, run, progress=False, tensorboard=False)
    runner.learn()
    runner.env.close()
    monkeypatch.setattr(screen, "COURSE", MILD_COURSE)
    monkeypatch.setattr(screen, "STAND_UP_S", 0.5)
    out = tmp_path / "follow"
    opts = ["--speed", "0.5", "1.0", "--time-limit", "1", "--jobs", "1", "--no-progress"]
    assert follow.main([str(run), "--out", str(out), "--once", "--", *opts]) == 0
    kept = out / "tiny"
    assert sorted(p.name for p in kept.iterdir()) == ["model_2.pt", "screen_2.json", "screen_2.md"]
    assert "runner_state" not in load_checkpoint(kept / "model_2.pt")  # the policy copy
    data = json.loads((kept / "screen_2.json").read_text())
    assert data["identities"]["tiny_2"]["training"]["iteration"] == 2 and len(data["drives"]) == 2
    assert (out / "history.png").is_file() and "| tiny | 2 | 0 of 2 |" in (out / "history.md").read_text()
    assert "tiny it. 2: course 0 of 2" in capsys.readouterr().out
    # started again: nothing new, nothing screened twice
    assert follow.follow([run], out, opts, every=1, deadline=None, once=True, log=lambda _: None) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{run}", "--out", "o"], "give --minutes"),
        (["{run}", "--out", "o", "--once", "--every", "0"], "--every must be at least 1"),
        (["{run}/missing", "--out", "o", "--once"], "no such run directory"),
        (["{run}", "--out", "o", "--once", "--", "--out", "x"], "the follower's to set"),
        (["{run}", "--out", "o", "--once", "--", "--spawn"], "not sim2sim.screen's"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_screened(tmp_path, capsys, args, message):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(SystemExit) as refused:
        follow.main([a.replace("{run}", str(run)) for a in args])
    assert refused.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
