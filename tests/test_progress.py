"""The training progress bar (training.progress) counts against what ends the run: the time budget
of a time-bounded run (aow-train --max-minutes, the demo's DEMO_MINUTES), the iteration limit when
that comes first, the iteration target otherwise."""

from __future__ import annotations

import io
import re

import pytest

from tests.test_runner import tiny_config
from training.progress import TrainingProgress, format_duration, time_bound_s
from training.runner import Runner


def _last_line(text: str) -> str:
    return re.split(r"[\r\n]+", text.strip())[-1]


def test_durations_read_as_a_clock():
    assert [format_duration(s) for s in (0, 59.4, 60, 552, 3599.6, 3600, 112_271)] == [
        "0:00",
        "0:59",
        "1:00",
        "9:12",
        "1:00:00",
        "1:00:00",
        "31:11:11",
    ]


def test_the_bound_is_the_budget_unless_the_iteration_limit_comes_first():
    # the demo after 9 min 12 s: 582 of 100,000 iterations would take days; the budget ends it
    assert time_bound_s(600.0, 552.0, 582, 100_000 - 582) == (600.0, "time budget")
    # 10 iterations in 20 s, 5 left: 30 s in all, inside a 600 s budget
    assert time_bound_s(600.0, 20.0, 10, 5) == (pytest.approx(30.0), "iteration limit")
    assert time_bound_s(600.0, 0.0, 0, 5) == (600.0, "time budget")  # no pace yet: the budget


def test_a_time_bounded_bar_shows_the_time_left_in_the_budget():
    out = io.StringIO()
    bar = TrainingProgress("np3o aow_flat", 0, 100_000, time_budget_s=600.0, file=out)
    bar.update(582, 552.0, {"reward": "10.71"})
    bar.close()
    assert (bar.total, bar.n, bar.bound) == (600, 552, "time budget")
    line = _last_line(out.getvalue())
    assert " 92%|" in line and "9:12 of 10:00 (time budget), 0:48 left" in line, line
    assert "iteration 582," in line and "reward 10.71" in line and "100000" not in line


def test_runner_bar_for_a_time_bounded_run_has_the_budget_as_its_total(tmp_path):
    r = Runner(tiny_config("np3o", 100_000), tmp_path, tensorboard=False)
    r.progress_file = out = io.StringIO()
    calls = []
    r.learn(time_budget_s=900.0, stop_requested=lambda: calls.append(1) or len(calls) >= 3)
    assert r.iteration == 3
    line = _last_line(out.getvalue())
    assert "of 15:00 (time budget)" in line and "iteration 3," in line, line
    assert "100000" not in line and "/100000" not in out.getvalue()


def test_runner_bar_follows_the_iteration_limit_when_it_comes_before_the_budget(tmp_path):
    r = Runner(tiny_config("np3o", 3), tmp_path, tensorboard=False)
    r.progress_file = out = io.StringIO()
    r.learn(time_budget_s=3600.0)
    line = _last_line(out.getvalue())
    assert "(iteration limit)" in line and "iteration 3 of 3" in line and "1:00:00" not in line, line
    assert " 100%|" in line


def test_runner_bar_without_a_budget_counts_iterations(tmp_path):
    r = Runner(tiny_config("np3o", 3), tmp_path, tensorboard=False)
    r.progress_file = out = io.StringIO()
    r.learn()
    assert "3/3" in _last_line(out.getvalue())
