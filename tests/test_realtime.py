"""Real-time scheduling of the control thread: set where permitted, a clear reason otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from aow_policy.realtime import enable_realtime, parse_cpus

needs_sched = pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no os.sched_setscheduler here")


@needs_sched
def test_sched_fifo_is_set_for_the_calling_thread_or_a_reason_is_given():
    # in a child process: a real-time test process could starve the machine if something hung
    code = textwrap.dedent(
        """
        import os
        from aow_policy.realtime import enable_realtime
        ok, why = enable_realtime(10, cpus=[0])
        print(ok, os.sched_getscheduler(0) == os.SCHED_FIFO, os.sched_getparam(0).sched_priority,
              sorted(os.sched_getaffinity(0)), why)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30).stdout
    ok, fifo, priority, cpus, _why = out.split(maxsplit=4)
    if ok == "True":
        assert fifo == "True" and priority == "10" and cpus == "[0]"
    else:  # an unprivileged machine: normal scheduling kept, the reason says why
        assert fifo == "False" and "running at normal priority" in out


def test_without_permission_the_thread_keeps_running_and_says_why(monkeypatch):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: None, raising=False)
    ok, why = enable_realtime(50)
    assert not ok and "not permitted to use SCHED_FIFO priority 50" in why and "normal priority" in why


@pytest.mark.parametrize("bad", [0, 100, -1, 2.5, True, "50"])
def test_a_bad_priority_is_refused(bad):
    with pytest.raises(ValueError, match="real-time priority must be an integer in \\[1, 99\\]"):
        enable_realtime(bad)


def test_cpu_lists():
    assert parse_cpus("") is None
    assert parse_cpus("1") == [1]
    assert parse_cpus("0,2-3") == [0, 2, 3]
    for bad in ("a", "3-1", "-1", "1,,2"):
        with pytest.raises(ValueError, match="cpus"):
            parse_cpus(bad)
    with pytest.raises(ValueError, match="at least one CPU"):
        enable_realtime(5, cpus=[])
