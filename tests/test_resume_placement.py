"""Resume on another machine: device, backend, number of environments and checkpoint cadence may
change on --resume (training.config.PLACEMENT_FIELDS), everything that defines what is learned may
not; time-based checkpoints; SIGTERM / Ctrl-C checkpoint and stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.test_runner import TINY_FLAGS, tiny_config
from training.checkpoint import load_checkpoint, save_checkpoint
from training.runner import Runner
from training.train import main

REPO = Path(__file__).resolve().parents[1]


def _as_if_trained_on_cuda(path: Path) -> None:
    """Rewrite a CPU checkpoint as a CUDA machine writes it: config device cuda, and generator
    states in the CUDA generator's format (16 bytes: seed and offset), which a CPU generator refuses."""
    ckpt = load_checkpoint(path)
    ckpt["config"]["device"] = "cuda"
    ckpt["config"]["backend"] = "mujoco_warp"
    cuda_state = torch.zeros(16, dtype=torch.uint8)
    ckpt["rng"]["generators"] = [cuda_state]
    for rank in ckpt["runner_state"]["ranks"]:
        rank["generator"] = cuda_state
        if rank.get("env") is not None:
            rank["env"]["generator"] = cuda_state
    with pytest.raises(RuntimeError):
        torch.Generator().set_state(cuda_state)  # why the runner must reseed, not load
    ckpt.pop("format"), ckpt.pop("version")
    save_checkpoint(path, ckpt)


def _resume(run: Path, iterations: int, **placement) -> Runner:
    return Runner(tiny_config("np3o", iterations, **placement), run, resume=True, progress=False, tensorboard=False)


def test_a_gpu_checkpoint_continues_on_a_cpu_with_the_learning_state_exact(tmp_path):
    run = tmp_path / "run"
    Runner(tiny_config("np3o", 2), run, progress=False, tensorboard=False).learn()
    _as_if_trained_on_cuda(run / "model_2.pt")
    saved = load_checkpoint(run / "model_2.pt")
    resumed = _resume(run, 4)
    assert resumed.iteration == 2
    assert resumed.resumed_from == {"device": "cuda", "backend": "mujoco_warp", "num_envs": 8}
    assert any("device cuda -> cpu" in n and "reseeded" in n for n in resumed.resume_notes), resumed.resume_notes
    for key, value in resumed.model.state_dict().items():  # networks and normalizers as saved
        assert torch.equal(value, saved["model"][key]), key
    for key, value in saved["algo_state"].items():  # penalty state (kappa scale), learning rate
        mine = resumed.algo.state_dict()[key]
        assert torch.equal(mine, value) if isinstance(value, torch.Tensor) else mine == value, key
    optimizer_state = resumed.algo.optimizer.state_dict()["state"]
    for mine, theirs in zip(optimizer_state.values(), saved["optimizer"]["state"].values(), strict=True):
        assert torch.equal(mine["exp_avg_sq"], theirs["exp_avg_sq"])
    resumed.learn()
    assert load_checkpoint(run / "model_4.pt")["config"]["device"] == "cpu"
    # deterministic: the same resume again gives the same weights
    other = tmp_path / "again"
    Runner(tiny_config("np3o", 2), other, progress=False, tensorboard=False).learn()
    _as_if_trained_on_cuda(other / "model_2.pt")
    _resume(other, 4).learn()
    a, b = load_checkpoint(run / "model_4.pt")["model"], load_checkpoint(other / "model_4.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    segments = [json.loads(line) for line in (run / "segments.jsonl").read_text().splitlines()]
    assert [s["iteration"] for s in segments] == [0, 2]
    assert segments[0]["resumed_from"] is None and segments[1]["resumed_from"]["device"] == "cuda"
    assert segments[1]["device"] == "cpu" and segments[1]["notes"] == resumed.resume_notes


def test_resume_with_another_number_of_environments(tmp_path):
    run = tmp_path / "run"
    Runner(tiny_config("np3o", 1), run, progress=False, tensorboard=False).learn()
    resumed = _resume(run, 2, num_envs=16)
    assert resumed.num_envs == 16 and resumed.iteration == 1
    assert any("8 -> 16 environments" in n for n in resumed.resume_notes), resumed.resume_notes
    resumed.learn()
    assert load_checkpoint(run / "model_2.pt")["config"]["num_envs"] == 16


def test_same_placement_resume_reports_nothing_lost(tmp_path):
    run = tmp_path / "run"
    Runner(tiny_config("np3o", 1), run, progress=False, tensorboard=False).learn()
    assert _resume(run, 2).resume_notes == []


def test_cli_resume_accepts_placement_flags_and_refuses_the_rest(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["--task", "toy_speed_limit", "--algo", "np3o", "--num-envs", "8", "--steps-per-env", "8"]
    assert (
        main([*base, "--iterations", "1", "--run-dir", str(run), "--no-progress", "--no-tensorboard", *TINY_FLAGS]) == 0
    )
    flags = ["--device", "cpu", "--num-envs", "16", "--save-minutes", "0", "--save-interval", "7"]
    assert main(["--resume", str(run), "--iterations", "2", *flags, "--no-progress", "--no-tensorboard"]) == 0
    cfg = load_checkpoint(run / "model_2.pt")["config"]
    assert (cfg["num_envs"], cfg["save_minutes"], cfg["save_interval"]) == (16, 0.0, 7)
    assert "8 -> 16 environments" in capsys.readouterr().err
    assert main(["--resume", str(run), "--steps-per-env", "4"]) == 2
    err = capsys.readouterr().err
    assert "--steps-per-env: cannot change a resumed run" in err and "--device" in err and "--num-envs" in err


def test_checkpoints_by_wall_time_as_well_as_by_iteration(tmp_path):
    every = Runner(tiny_config("np3o", 3, save_minutes=1e-9), tmp_path / "a", progress=False, tensorboard=False)
    every.learn()
    assert sorted(p.name for p in (tmp_path / "a").glob("model_*.pt")) == ["model_1.pt", "model_2.pt", "model_3.pt"]
    off = Runner(tiny_config("np3o", 3, save_minutes=0.0), tmp_path / "b", progress=False, tensorboard=False)
    off.learn()
    assert [p.name for p in (tmp_path / "b").glob("model_*.pt")] == ["model_3.pt"]  # save_interval 100: the end only


def test_a_stop_request_checkpoints_the_iteration_in_progress(tmp_path):
    r = Runner(tiny_config("np3o", 50), tmp_path, progress=False, tensorboard=False)
    calls = []
    r.learn(stop_requested=lambda: calls.append(1) or len(calls) >= 2)
    assert r.stopped_by_budget and r.iteration == 2
    assert load_checkpoint(tmp_path / "model_2.pt")["iteration"] == 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_aow_train_stops_cleanly_on_sigterm_and_ctrl_c(tmp_path, sig):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "training.train", "--task", "toy_speed_limit", "--num-envs", "8",
            "--steps-per-env", "8", "--iterations", "100000", "--run-dir", str(run), "--no-progress",
            "--no-tensorboard", *TINY_FLAGS]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        metrics = run / "metrics.jsonl"
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert f"stopped by {signal.Signals(sig).name}" in out and "Traceback" not in err
    last = max(int(p.stem.split("_")[1]) for p in run.glob("model_*.pt"))
    assert last >= 2 and load_checkpoint(run / f"model_{last}.pt")["iteration"] == last
    assert main(["--resume", str(run), "--iterations", str(last + 1), "--no-progress", "--no-tensorboard"]) == 0


def test_terrain_levels_carry_over_to_another_number_of_environments(tmp_path):
    pytest.importorskip("training.envs")
    run = tmp_path / "run"
    first = Runner(tiny_config("np3o", 1, task="aow_rough", num_envs=4), run, progress=False, tensorboard=False)
    first.env.curriculum.levels[:] = torch.tensor([0, 3, 5, 9], device=first.env.curriculum.levels.device)
    first.learn()
    saved = load_checkpoint(run / "model_1.pt")["runner_state"]["ranks"][0]["env"]["terrain_levels"]
    resumed = Runner(
        tiny_config("np3o", 2, task="aow_rough", num_envs=8), run, resume=True, progress=False, tensorboard=False
    )
    assert resumed.env.curriculum.levels.tolist() == saved.tolist() * 2
    assert any("4 -> 8 environments: terrain levels" in n for n in resumed.resume_notes), resumed.resume_notes
