"""aow-compare: the Table II aggregation by hand, and a tiny end-to-end comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.compare import (
    main,
    markdown_so_far,
    markdown_table,
    read_metrics,
    run_dir_for,
    summarize,
    summarize_so_far,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _fake_run(out: Path, algo: str, seed: int, rewards: list[float], violations: list[float]) -> None:
    d = run_dir_for(out, algo, seed)
    d.mkdir(parents=True)
    lines = [
        json.dumps({"iteration": i, "mean_reward": r, "violations_per_episode": v})
        for i, (r, v) in enumerate(zip(rewards, violations, strict=True))
    ]
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_table_is_mean_and_std_over_seeds_of_the_final_window(tmp_path):
    # 10 iterations each; the final window (last 10% = 1 iteration, or 2 when asked) is averaged.
    _fake_run(tmp_path, "ppo", 0, [0.0] * 9 + [24.0], [9.0] * 9 + [500.0])
    _fake_run(tmp_path, "ppo", 1, [0.0] * 9 + [26.0], [9.0] * 9 + [560.0])
    _fake_run(tmp_path, "np3o", 0, [0.0] * 8 + [22.0, 24.0], [9.0] * 8 + [1.0, 0.0])
    _fake_run(tmp_path, "np3o", 1, [0.0] * 8 + [24.0, 26.0], [9.0] * 8 + [0.0, 0.0])
    s = summarize(tmp_path, ["ppo", "np3o"], [0, 1])
    assert s["algorithms"]["ppo"]["reward"] == pytest.approx([25.0, 2**0.5])  # mean, sample std of (24, 26)
    assert s["algorithms"]["ppo"]["violations"] == pytest.approx([530.0, 60 / 2**0.5])
    s2 = summarize(tmp_path, ["ppo", "np3o"], [0, 1], window=2)
    assert s2["runs"]["np3o_s0"]["reward"] == 23.0 and s2["runs"]["np3o_s1"]["reward"] == 25.0
    assert s2["algorithms"]["np3o"]["violations"] == pytest.approx([0.25, 0.25 * 2**0.5])
    table = markdown_table(s2, ["ppo", "np3o"])
    assert "| Algorithm | Reward | Violations per episode |" in table
    assert "| N-P3O | 24.00 (± 1.41) | 0.25 (± 0.35) |" in table
    assert "| PPO (unconstrained) |" in table
    assert "over 2 seed(s)" in table


def test_a_comparison_under_way_tables_its_finished_runs_and_lists_the_rest(tmp_path):
    _fake_run(tmp_path, "ppo", 0, [0.0] * 9 + [24.0], [9.0] * 9 + [500.0])
    (run_dir_for(tmp_path, "ppo", 0) / "model_10.pt").write_bytes(b"")  # reached its 10 iterations
    _fake_run(tmp_path, "ppo", 1, [0.0] * 4 + [26.0], [9.0] * 4 + [560.0])  # 5 of 10 so far
    s = summarize_so_far(tmp_path, ["ppo", "np3o"], [0, 1], iterations=10)
    assert s["algorithms"]["ppo"]["seeds_finished"] == [0]
    assert s["algorithms"]["ppo"]["reward"] == [24.0, 0.0]  # over the finished seed only
    assert s["algorithms"]["np3o"]["seeds_finished"] == [] and s["runs"]["ppo_s1"]["finished"] is False
    table = markdown_so_far(s, ["ppo", "np3o"])
    assert "| PPO (unconstrained) | seed 0 (1 of 2) | 24.00 | 500.00 |" in table  # one seed: no spread shown
    assert "| N-P3O | none (0 of 2) | n/a |" in table
    assert "| ppo_s1 | 5 | 26.00 | 560.00 |" in table and "| ppo_s0 |" not in table
    (run_dir_for(tmp_path, "ppo", 1) / "model_10.pt").write_bytes(b"")  # now both are done
    done = markdown_so_far(summarize_so_far(tmp_path, ["ppo"], [0, 1], iterations=10), ["ppo"])
    assert "No run in progress" in done and "Runs in progress" not in done


def test_the_table_so_far_reads_past_the_line_a_running_trainer_is_writing(tmp_path, capsys):
    _fake_run(tmp_path, "ppo", 0, [0.0] * 4 + [26.0], [9.0] * 4 + [560.0])
    metrics = run_dir_for(tmp_path, "ppo", 0) / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"iteration": 5, "mean_rew')  # the trainer is mid-write
    s = summarize_so_far(tmp_path, ["ppo"], [0], iterations=10)
    assert s["runs"]["ppo_s0"]["iterations"] == 5 and s["runs"]["ppo_s0"]["reward"] == 26.0
    args = ["--task", "anymal_flat_speed_limit", "--algos", "ppo", "--seeds", "1", "--iterations", "10"]
    assert main([*args, "--out", str(tmp_path), "--so-far"]) == 0
    assert "| ppo_s0 | 5 | 26.00 | 560.00 |" in capsys.readouterr().out
    metrics.write_text('{"iteration": 0}\nnot json\n{"iteration": 2}\n')  # damaged, not mid-write
    assert main([*args, "--out", str(tmp_path), "--so-far"]) == 1
    assert "metrics.jsonl:2: not JSON" in capsys.readouterr().err


def test_compare_end_to_end_and_reuse(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = [
        "--task", "toy_speed_limit", "--algos", "ppo,np3o", "--seeds", "2", "--iterations", "2", "--out", str(out),
        "--num-envs", "8", "--steps-per-env", "8", "--threads", "1",
        "--set", "network.actor_hidden=[16,16]", "--set", "network.critic_hidden=[16,16]",
        "--set", "network.cost_critic_hidden=[16]", "--set", "ppo.num_epochs=1",
        "--algo-set", "np3o:kappa_max=2.0",
    ]  # fmt: skip
    assert main(argv) == 0
    table = (out / "table.md").read_text()
    assert "| PPO (unconstrained) |" in table and "| N-P3O |" in table
    for name in ("reward.png", "violations.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == {"ppo_s0", "ppo_s1", "np3o_s0", "np3o_s1"}
    ckpt = torch.load(out / "runs" / "np3o_s1" / "model_2.pt", weights_only=True)
    assert ckpt["config"]["seed"] == 1 and ckpt["config"]["algo_params"]["kappa_max"] == 2.0
    # Running the same command again reuses the finished runs (nothing is retrained).
    before = (out / "runs" / "ppo_s0" / "model_2.pt").stat().st_mtime_ns
    assert main(argv) == 0
    assert (out / "runs" / "ppo_s0" / "model_2.pt").stat().st_mtime_ns == before


def test_compare_refuses_bad_arguments(tmp_path, capsys):
    base = ["--task", "toy_speed_limit", "--iterations", "1", "--out", str(tmp_path / "o")]
    assert main([*base, "--algos", "ppo,sac"]) == 2
    assert "unknown ['sac']" in capsys.readouterr().err
    assert main([*base, "--set", "algo_params.kappa_max=2"]) == 2
    assert "--algo-set" in capsys.readouterr().err
    assert main([*base, "--set", "ppo.clip_param=3"]) == 2
    assert "ppo.clip_param" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_compare_max_minutes_stops_and_the_same_command_continues(tmp_path, capsys, monkeypatch):
    """--max-minutes: the run under way at the deadline stops with a checkpoint after its iteration,
    the runs not reached are not started, no table is written; the same command without the bound
    resumes the stopped run and trains the rest. The clock is the test's: it stands still for the
    deadline, the first run's start and its budget, then jumps past the deadline."""
    from training import compare

    calls = []

    class Clock:
        @staticmethod
        def time() -> float:
            calls.append(None)
            return 0.0 if len(calls) <= 3 else 1e9

    monkeypatch.setattr(compare, "time", Clock)
    out = tmp_path / "cmp"
    argv = [
        "--task", "toy_speed_limit", "--algos", "ppo,np3o", "--seeds", "2", "--iterations", "3", "--out", str(out),
        "--num-envs", "8", "--steps-per-env", "8", "--threads", "1", "--set", "ppo.num_epochs=1",
    ]  # fmt: skip
    assert main([*argv, "--max-minutes", "1e-9"]) == 0
    text = capsys.readouterr().out
    assert "time budget of 1e-09 min reached; 4 of 4 runs" in text
    assert "ppo_s0: 1 of 3 iterations" in text and "np3o_s1: 0 of 3 iterations" in text
    assert (out / "runs" / "ppo_s0" / "model_1.pt").is_file() and not (out / "runs" / "np3o_s0").exists()
    assert not (out / "table.md").exists()
    # What there is so far: no finished run yet, ppo_s0 where it stopped.
    so_far = (out / "table_so_far.md").read_text()
    assert "| PPO (unconstrained) | none (0 of 2) | n/a" in so_far
    assert "| ppo_s0 | 1 |" in so_far and "np3o_s0" not in so_far  # a run never begun is not listed
    assert json.loads((out / "results_so_far.json").read_text())["runs"]["ppo_s0"]["finished"] is False
    (out / "table_so_far.md").unlink()
    assert main([*argv, "--so-far"]) == 0  # the same table on demand, nothing trained
    assert (out / "table_so_far.md").read_text() == so_far and not (out / "runs" / "np3o_s0").exists()
    assert main([*argv, "--max-minutes", "0"]) == 2  # a bound must be positive
    assert main(argv) == 0  # the same command, unbounded: continues
    assert (out / "table.md").is_file()
    assert not (out / "table_so_far.md").exists() and not (out / "results_so_far.json").exists()
    segments = (out / "runs" / "ppo_s0" / "segments.jsonl").read_text().splitlines()
    assert len(segments) == 2  # started, then resumed
    for run in ("ppo_s0", "ppo_s1", "np3o_s0", "np3o_s1"):
        assert (out / "runs" / run / "model_3.pt").is_file()


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigterm_stops_a_comparison_with_checkpoints_and_the_same_command_continues(tmp_path, jobs):
    """aow-compare under SIGTERM (systemd, ``timeout``, a lent machine taken back) ends like
    --max-minutes: every run in progress checkpoints the iteration under way, none starts after,
    the table so far is written; nothing is lost (the same command resumes from there)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.test_runner import TINY_FLAGS
    from training.checkpoint import load_checkpoint

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "cmp"
    args = [
        "--task", "toy_speed_limit", "--algos", "ppo,np3o", "--seeds", "2", "--out", str(out),
        "--num-envs", "8", "--steps-per-env", "8", "--threads", "1", "--jobs", str(jobs), *TINY_FLAGS,
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "training.compare", *args, "--iterations", "100000"],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = [out / "runs" / name / "metrics.jsonl" for name in ("ppo_s0", "np3o_s0")[:jobs]]
    try:
        deadline = time.monotonic() + 120
        while not all(m.is_file() and m.read_text().count("\n") >= 2 for m in started):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert "SIGTERM: stopped; 4 of 4 runs" in stdout
    for metrics in started:  # each run in progress ended on a checkpoint of its last iteration
        run = metrics.parent
        last = max(int(p.stem.split("_")[1]) for p in run.glob("model_*.pt"))
        assert last >= 2 and load_checkpoint(run / f"model_{last}.pt")["iteration"] == last
        assert len(read_metrics(run)) == last
    assert not (out / "runs" / "ppo_s1").exists()  # not started after the stop
    assert (out / "table_so_far.md").is_file() and not (out / "table.md").exists()
    first = started[0].parent
    reached = max(int(p.stem.split("_")[1]) for p in first.glob("model_*.pt"))
    assert main([*args, "--iterations", str(reached + 1), "--algos", "ppo", "--seeds", "1"]) == 0
    assert load_checkpoint(first / f"model_{reached + 1}.pt")["iteration"] == reached + 1
