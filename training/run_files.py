"""A run directory's own records, read without torch: what ``aow-status`` and the curves share."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


class RunFileError(ValueError):
    """A run's record file that cannot be read (a line other than the last is not JSON)."""


def read_jsonl(path: Path, on_bad_line: Callable[[int, str], None] | None = None) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` or ``segments.jsonl`` (empty where there is no
    file). A last line that is not JSON is skipped: a running trainer is writing it right now,
    and a reader beside it (aow-status, ``aow-compare --so-far``, the curves) must not fail on
    it. Any earlier line that is not JSON raises :class:`RunFileError` naming file and line,
    unless ``on_bad_line`` is given: then every such line (the last included) is skipped and
    reported to it as (line number, reason), which is what a resume does with its own file."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if on_bad_line is not None:
                on_bad_line(number, e.msg)
            elif number != len(lines):
                raise RunFileError(f"{path}:{number}: not JSON ({e.msg})") from None
    return rows


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's saved ``config.yaml`` as a plain dict (empty where there is none)."""
    import yaml

    path = run_dir / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def env_steps(run_dir: Path, iterations: np.ndarray) -> np.ndarray:
    """Environment steps collected by the end of each given iteration (0-based, as in
    metrics.jsonl): each stretch in ``segments.jsonl`` ran from its start iteration with its own
    number of environments; without that file, the config's ``num_envs`` throughout."""
    config = run_config(run_dir)
    per_env = int(config.get("num_steps_per_env", 24))
    segments = read_jsonl(run_dir / "segments.jsonl")
    if not segments:
        segments = [{"iteration": 0, "num_envs": int(config.get("num_envs", 4096))}]
    starts = np.array([int(s["iteration"]) for s in segments])
    envs = np.array([int(s["num_envs"]) for s in segments])
    done = iterations + 1  # iterations completed after record i
    total = np.zeros_like(done, dtype=float)
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else np.inf
        total += np.clip(np.minimum(done, end) - start, 0, None) * envs[k] * per_env
    return total
