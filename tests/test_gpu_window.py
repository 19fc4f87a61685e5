"""The lent-GPU window's script (policies/gpu/issue23_window.sh) can start or resume every training
line committed under policies/runs: a name it does not know would fail on the GPU, in the few
minutes a session gets one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "policies" / "gpu" / "issue23_window.sh"
COMMITTED_RUNS = sorted(d.name for d in (ROOT / "policies" / "runs").iterdir() if any(d.glob("model_*.pt")))


def spec(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(WINDOW), "--spec", name], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("name", COMMITTED_RUNS)
def test_every_committed_run_is_known_to_the_window(name):
    result = spec(name)
    assert result.returncode == 0, result.stderr
    envs = result.stdout.split()[0]
    assert int(envs) >= 4096  # the number of envs the run gets on the GPU comes first


def test_the_ppo_rough_line_resumes_at_the_rough_size():
    assert "rough_sharp_spd_ppo" in COMMITTED_RUNS
    assert spec("rough_sharp_spd_ppo").stdout.split() == ["16384"]  # a fork: only its size, no fresh flags


def test_an_unknown_run_is_refused_by_name():
    result = spec("rough_nonexistent_ppo")
    assert result.returncode == 2 and "unknown run rough_nonexistent_ppo" in result.stderr
