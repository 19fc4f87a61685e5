"""aow-status: where runs stand, read from their files (real tiny runs for the lineage)."""

from __future__ import annotations

import json
import os
import time

import pytest
from test_runner import tiny_config

from training import status
from training.config import TrainConfig
from training.runner import Runner


def _train(cfg: TrainConfig, run_dir, budget_s: float | None = None) -> None:
    Runner(cfg, run_dir, progress=False, tensorboard=False).learn(time_budget_s=budget_s)


def _with(cfg: TrainConfig, **fields) -> TrainConfig:
    data = cfg.to_dict()
    data.update(fields)
    return TrainConfig.from_dict(data)


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """root (3 it. x 8 envs x 8 steps) -> init at its it. 3 -> c1 (1 it. x 16 envs) -> fork at
    it. 1 -> branch (it. 1 to 4, 16 envs, a 60-minute budget). The line's steps: root 192, c1 128,
    branch 3 x 128 = 384."""
    root = tmp_path_factory.mktemp("runs")
    _train(tiny_config("np3o", 3), root / "root")
    _train(_with(tiny_config("np3o", 1), num_envs=16, init_from=str(root / "root" / "model_3.pt")), root / "c1")
    fork = _with(tiny_config("np3o", 4), num_envs=16, fork_from=str(root / "c1" / "model_1.pt"))
    _train(fork, root / "branch", budget_s=3600.0)
    return root


def test_a_forked_and_initialised_line_counts_every_ancestors_steps(lineage):
    s = status.run_status(lineage / "branch")
    assert (s.task, s.algo, s.iteration, s.target) == ("toy_speed_limit", "np3o", 4, 4)
    assert s.steps_in_run == 3 * 16 * 8  # its own iterations 1..3 (it continues the parent's numbering)
    assert [(a.link, a.at, a.path is not None) for a in s.ancestors] == [("fork", 1, True), ("init", 3, True)]
    assert s.ancestors[0].steps == 1 * 16 * 8 and s.ancestors[1].steps == 3 * 8 * 8
    assert s.steps_by_task == {"toy_speed_limit": 3 * 16 * 8 + 16 * 8 + 3 * 8 * 8}
    assert s.latest_checkpoint == "model_4.pt"
    assert s.stretch_budget_s == 3600.0  # recorded in segments.jsonl by the runner
    text = status.format_status(s)
    assert "line: branch <- fork at it. 1 of c1 <- init at it. 3 of root" in text
    assert "steps by task: toy_speed_limit 704" in text
    assert "violations per episode: speed_limit" in text
    assert "finished (its target)" in text  # it. 4 of 4: done, however recent its last write


def test_a_parent_that_is_not_here_is_named_and_searched_for(lineage, tmp_path):
    copy = tmp_path / "elsewhere" / "branch"
    copy.mkdir(parents=True)
    for f in ("metrics.jsonl", "segments.jsonl", "config.yaml"):
        (copy / f).write_bytes((lineage / "branch" / f).read_bytes())
    config = (copy / "config.yaml").read_text().replace(str(lineage / "c1"), "gone/c1")
    (copy / "config.yaml").write_text(config)
    s = status.run_status(copy)
    assert [(a.link, a.recorded, a.path) for a in s.ancestors] == [("fork", "gone/c1/model_1.pt", None)]
    assert s.steps_by_task == {"toy_speed_limit": 3 * 16 * 8}
    assert "gone/c1/model_1.pt (not here: --parents DIR)" in status.format_status(s)
    found = status.run_status(copy, search=[lineage])  # looked for by name in another folder
    assert [a.path for a in found.ancestors] == [str(lineage / "c1"), str(lineage / "root")]


def test_running_or_not_is_told_from_the_metrics_files_age(lineage):
    metrics = lineage / "branch" / "metrics.jsonl"
    now = metrics.stat().st_mtime
    live = status.run_status(lineage / "branch", now=now + 5)
    assert live.running and live.stretch_ends is not None  # within its budget's hour
    started = json.loads((lineage / "branch" / "segments.jsonl").read_text().splitlines()[-1])["started"]
    assert live.stretch_ends == time.strftime(
        "%H:%M", time.localtime(time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S%z")) + 3600)
    )
    idle = status.run_status(lineage / "branch", now=now + 3 * 3600)
    assert not idle.running and idle.stretch_ends is None
    idle.target = 10  # as if it had stopped short of its target
    assert "not running: last iteration 3.0 h ago" in status.format_status(idle)
    live.target = 10
    assert "running: last iteration 5 s ago" in status.format_status(live)


def test_the_window_compares_the_last_iterations_with_the_ones_before(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"iteration": i, "mean_reward": float(i), "episode/violations/joint_speed": 10.0} for i in range(30)]
    rows[-1]["episode/ends/time_out"] = 1.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 30, "mean_re')
    s = status.run_status(run, window=10)  # the half-written last line is skipped
    assert s.iteration == 30 and s.window == 10
    assert s.recent["mean_reward"] == pytest.approx(24.5) and s.before["mean_reward"] == pytest.approx(14.5)
    assert "reward 24.50 (+10.00)" in status.format_status(s)
    assert s.task == "?" and s.latest_checkpoint is None and s.ancestors == []
    (run / "metrics.jsonl").write_text('{"iteration": 0}\nnot json\n{"iteration": 1}\n')
    with pytest.raises(status.RunFileError, match=r"metrics.jsonl:2: not JSON"):
        status.run_status(run)


def test_cli_reads_a_folder_of_runs_and_reports_what_it_cannot_read(lineage, tmp_path, capsys):
    assert status.main([str(lineage), "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    report = json.loads(out[-1])
    assert [os.path.basename(r["path"]) for r in report["runs"]] == ["branch", "c1", "root"]
    assert status.main([str(tmp_path / "nothing")]) == 1
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert status.main([str(tmp_path / "empty")]) == 1
    assert "no runs below it" in capsys.readouterr().err
    assert status.main([str(lineage), "--window", "0"]) == 2


def test_help_names_what_it_reads(capsys):
    with pytest.raises(SystemExit) as exit_info:
        status.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "usage: aow-status" in text and "--parents DIR" in text and "segments" not in text.split("options:")[1]
