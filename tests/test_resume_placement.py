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

import numpy as np
import pytest
import torch

from tests.test_runner import TINY_FLAGS, tiny_config
from training.checkpoint import load_checkpoint, save_checkpoint
from training.runner import Runner, spread_terrain_levels
from training.train import main

REPO = Path(__file__).resolve().parents[1]


def cuda_generator_state(seed: int, offset: int) -> torch.Tensor:
    """What a CUDA (Philox) generator's ``get_state()`` returns: its seed and offset, 8 bytes each.
    A CPU generator's state is a 5056-byte Mersenne Twister and refuses it."""
    return torch.from_numpy(np.array([seed, offset], dtype=np.int64).view(np.uint8).copy())


def _as_if_trained_on_cuda(path: Path) -> None:
    """Rewrite a checkpoint written here (no GPU) as a CUDA machine writes it: config device cuda,
    and every generator state (the runner's and the environment's) in the CUDA generator's format."""
    ckpt = load_checkpoint(path)
    ckpt["config"]["device"] = "cuda"
    ckpt["config"]["backend"] = "mujoco_warp"
    ckpt["rng"]["generators"] = [cuda_generator_state(ckpt["config"]["seed"], 0)]
    for k, rank in enumerate(ckpt["runner_state"]["ranks"]):
        rank["generator"] = cuda_generator_state(ckpt["config"]["seed"], 4 * ckpt["iteration"] + k)
        if rank.get("env") is not None:
            rank["env"]["generator"] = cuda_generator_state(ckpt["config"]["seed"] + 1, 4 * ckpt["iteration"] + k)
    with pytest.raises(RuntimeError):
        torch.Generator().set_state(ckpt["rng"]["generators"][0])  # why the runner must reseed, not load
    ckpt.pop("format"), ckpt.pop("version")
    save_checkpoint(path, ckpt)


def _resume(run: Path, iterations: int, **placement) -> Runner:
    return Runner(tiny_config("np3o", iterations, **placement), run, resume=True, progress=False, tensorboard=False)


def test_a_cuda_format_checkpoint_continues_on_a_cpu_with_the_learning_state_exact(tmp_path):
    run = tmp_path / "run"
    Runner(tiny_config("np3o", 2), run, progress=False, tensorboard=False).learn()
    _as_if_trained_on_cuda(run / "model_2.pt")
    saved = load_checkpoint(run / "model_2.pt")
    resumed = _resume(run, 4)
    assert resumed.iteration == 2
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


def _rough_config(iterations: int, **fields):
    return tiny_config("np3o", iterations, task="aow_rough", **fields)


def _resume_rough(run: Path, iterations: int, **placement) -> Runner:
    return Runner(_rough_config(iterations, **placement), run, resume=True, progress=False, tensorboard=False)


def _assert_same_proportions(new: torch.Tensor, saved: torch.Tensor) -> None:
    """Each level's count among the new environments is within one of its share of the saved ones."""
    n, m = len(new), len(saved)
    for level in torch.unique(saved).tolist():
        share = n * int((saved == level).sum()) / m
        assert abs(int((new == level).sum()) - share) < 1, (level, new.tolist(), saved.tolist())
    assert set(new.tolist()) <= set(saved.tolist())


@pytest.mark.parametrize("saved_envs", [4, 6, 10])
def test_spread_terrain_levels_keeps_the_proportions(saved_envs):
    generator = torch.Generator().manual_seed(saved_envs)
    for _ in range(20):
        saved = torch.randint(0, 10, (saved_envs,), generator=generator)
        for num_envs in range(1, 4 * saved_envs + 2):
            _assert_same_proportions(spread_terrain_levels(saved, num_envs), saved)
        assert torch.equal(spread_terrain_levels(saved, saved_envs), saved)  # the same number: unchanged
        # a multiple: each saved environment's level repeated in place (its terrain column follows its index)
        assert torch.equal(spread_terrain_levels(saved, 3 * saved_envs), saved.repeat_interleave(3))


def test_terrain_levels_keep_their_proportions_over_more_fewer_and_non_multiple_environments(tmp_path):
    run = tmp_path / "run"
    first = Runner(_rough_config(1, num_envs=6), run, progress=False, tensorboard=False)
    first.env.curriculum.levels[:] = torch.tensor([9, 0, 9, 0, 9, 5], device=first.env.curriculum.levels.device)
    first.learn()
    saved = load_checkpoint(run / "model_1.pt")["runner_state"]["ranks"][0]["env"]["terrain_levels"]
    assert len(set(saved.tolist())) >= 2  # the episodes did not end: the levels still differ
    for num_envs in (12, 3, 4, 9):  # a multiple, fewer, fewer and not a divisor, more and not a multiple
        resumed = _resume_rough(run, 2, num_envs=num_envs)
        levels = resumed.env.curriculum.levels.cpu()
        assert len(levels) == num_envs
        _assert_same_proportions(levels, saved)
        note = f"6 -> {num_envs} environments: terrain levels"
        assert any(note in n for n in resumed.resume_notes), resumed.resume_notes


def test_a_locomotion_run_from_a_cuda_machine_continues_here_with_its_environment_reseeded(tmp_path):
    """The resume path a GPU run takes on a CPU, on the real locomotion environment: its saved
    generator state cannot be loaded here, so the runner hands the environment a seed derived from
    (seed, iteration) (``load_state_dict`` with ``seed``), while the terrain levels and step count
    carry over exactly."""
    run = tmp_path / "run"
    first = Runner(_rough_config(2, num_envs=4, save_interval=1), run, progress=False, tensorboard=False)
    first.env.curriculum.levels[:] = torch.tensor([9, 0, 9, 7], device=first.env.curriculum.levels.device)
    first.learn()
    at_one = tmp_path / "at_one"  # the same run resumed from its first checkpoint instead
    at_one.mkdir()
    (at_one / "model_1.pt").write_bytes((run / "model_1.pt").read_bytes())
    for path in (run / "model_1.pt", run / "model_2.pt", at_one / "model_1.pt"):
        _as_if_trained_on_cuda(path)
    saved_env = load_checkpoint(run / "model_2.pt")["runner_state"]["ranks"][0]["env"]

    resumed = _resume_rough(run, 3, num_envs=4, device="cpu", backend="mujoco")
    with pytest.raises(RuntimeError):  # what the environment could not have taken as saved
        torch.Generator().set_state(saved_env["generator"])
    assert resumed.iteration == 2
    assert any("device cuda -> cpu" in n and "reseeded" in n for n in resumed.resume_notes), resumed.resume_notes
    assert resumed.env.curriculum.levels.tolist() == saved_env["terrain_levels"].tolist()
    assert resumed.env.common_step == saved_env["common_step"] > 0
    state = resumed.env.generator.get_state()
    again = _resume_rough(run, 3, num_envs=4, device="cpu", backend="mujoco")
    assert torch.equal(again.env.generator.get_state(), state)  # derived, not drawn: the same resume, the same stream
    earlier = _resume_rough(at_one, 3, num_envs=4, device="cpu", backend="mujoco")
    assert earlier.iteration == 1
    assert not torch.equal(earlier.env.generator.get_state(), state)  # another iteration, another stream
    fresh = Runner(_rough_config(1, num_envs=4), None, progress=False, tensorboard=False)
    assert not torch.equal(fresh.env.generator.get_state(), state)  # reseeded, not left as built
    resumed.learn()
    written = load_checkpoint(run / "model_3.pt")
    assert written["config"]["device"] == "cpu"
    assert len(written["runner_state"]["ranks"][0]["env"]["generator"]) == len(state)  # a CPU generator's state now


def test_a_resume_drops_metric_lines_past_the_checkpoint_and_cut_off_ones_and_says_so(tmp_path):
    Runner(tiny_config("np3o", 3), tmp_path, progress=False, tensorboard=False).learn()
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [0, 1, 2]
    # a record past the checkpoint, a line cut off mid-write in the middle and one at the end
    metrics.write_text(lines[0] + "\n" + '{"iteration": 1, "mean_rew\n' + "\n".join(lines[1:]) + "\n"
                       + json.dumps({"iteration": 3}) + "\n" + '{"itera')  # fmt: skip
    r = Runner(tiny_config("np3o", 4), tmp_path, resume=True, progress=False, tensorboard=False)
    assert r.iteration == 3
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [0, 1, 2]
    assert [rec["iteration"] for rec in r.history] == [0, 1, 2]
    assert "metrics.jsonl line(s) [2, 6] not JSON (cut off mid-write): dropped" in r.resume_notes
