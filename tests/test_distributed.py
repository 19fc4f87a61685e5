"""Multi-process training over torch.distributed (gloo): ranks stay identical, only rank 0 writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from training.config import TrainConfig, apply_override
from training.distributed import DistContext, init_distributed, shutdown_distributed, split_envs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config() -> TrainConfig:
    data = TrainConfig(
        task="toy_speed_limit", algo="np3o", num_envs=8, num_steps_per_env=8, iterations=3, seed=5
    ).to_dict()
    for a in (
        "network.actor_hidden=[16,16]",
        "network.critic_hidden=[16,16]",
        "network.cost_critic_hidden=[16]",
        "ppo.num_epochs=2",
        "ppo.num_minibatches=2",
    ):
        apply_override(data, a)
    return TrainConfig.from_dict(data)


def _worker(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    from training.runner import Runner

    ctx = init_distributed("cpu")
    try:
        r = Runner(_config(), run_dir=out / "run", dist=ctx, progress=False, tensorboard=False)
        r.learn()
        torch.save(
            {
                "model": r.model.state_dict(),
                "kappa": r.algo.kappa,
                "learning_rate": r.algo.learning_rate,
                "num_envs": r.num_envs,
                "speed": r.env.speed.clone(),
                "history": len(r.history),
            },
            out / f"rank{rank}.pt",
        )
    finally:
        shutdown_distributed(ctx)


def test_two_gloo_processes_have_identical_parameters_after_3_iterations(tmp_path):
    mp.start_processes(_worker, args=(2, _free_port(), tmp_path), nprocs=2, start_method="spawn", join=True)
    a = torch.load(tmp_path / "rank0.pt", weights_only=True)
    b = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert a["num_envs"] == b["num_envs"] == 4  # 8 environments split over 2 ranks
    assert not torch.equal(a["speed"], b["speed"])  # the ranks simulated different environments
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key  # weights, normalizers: bit-identical
    assert a["kappa"] == b["kappa"] and a["learning_rate"] == b["learning_rate"]
    assert a["model"]["actor.normalizer.count"].item() == 3 * 8 * 8  # moments reduced over both ranks
    # Only rank 0 writes: one checkpoint, one metrics file with one record per iteration.
    run = tmp_path / "run"
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_3.pt"]
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    assert a["history"] == 3 and b["history"] == 0
    # and training did move the weights away from the shared initialization
    torch.manual_seed(5)
    from training.runner import Runner

    fresh = Runner(_config(), progress=False, tensorboard=False)
    assert not torch.equal(fresh.model.state_dict()["actor.mean_head.weight"], a["model"]["actor.mean_head.weight"])


def _nan_worker(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    from training.runner import Runner, TrainingError
    from training.toy_cmdp import ToySpeedLimitEnv

    class NaNOnRankOne(ToySpeedLimitEnv):
        def step(self, actions):
            obs, rewards, costs, dones, infos = super().step(actions)
            return obs, rewards * (float("nan") if rank == 1 else 1.0), costs, dones, infos

    ctx = init_distributed("cpu")
    try:
        r = Runner(_config(), dist=ctx, env=NaNOnRankOne(4, seed=rank), progress=False, tensorboard=False)
        try:
            r.learn()
        except TrainingError as e:
            (out / f"rank{rank}.err").write_text(str(e))
    finally:
        shutdown_distributed(ctx)


@pytest.mark.slow
def test_nan_on_one_rank_stops_every_rank(tmp_path):
    ctx = mp.start_processes(_nan_worker, args=(2, _free_port(), tmp_path), nprocs=2, start_method="spawn", join=False)
    for _ in range(120):  # a deadlock would hang here: fail instead
        if ctx.join(timeout=1):
            break
    else:
        for p in ctx.processes:
            p.kill()
        pytest.fail("ranks deadlocked after a NaN on one of them")
    assert "non-finite loss" in (tmp_path / "rank1.err").read_text()
    assert "non-finite" in (tmp_path / "rank0.err").read_text()


@pytest.mark.slow
def test_torchrun_cli(tmp_path):
    run = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
        "-m", "training.train", "--task", "toy_speed_limit", "--algo", "crpo", "--num-envs", "8",
        "--steps-per-env", "8", "--iterations", "2", "--run-dir", str(run), "--no-progress",
        "--set", "network.actor_hidden=[16,16]", "--set", "network.critic_hidden=[16,16]",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_2.pt"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]


def test_env_split_and_single_process_context():
    ctx = DistContext()
    assert not ctx.enabled and ctx.is_main
    t = torch.ones(3)
    assert ctx.all_reduce_mean(t) is t and t.tolist() == [1.0, 1.0, 1.0]
    assert [split_envs(10, DistContext(rank=r, world_size=3)) for r in range(3)] == [4, 3, 3]
    with pytest.raises(ValueError, match="cannot be split over 4 processes"):
        split_envs(3, DistContext(rank=0, world_size=4))
