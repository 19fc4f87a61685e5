"""JSON Lines log of the violation monitor: one file per run, one flushed line per record.

Records (each a JSON object on its own line, written with one ``write`` and flushed, so a crash
loses at most the line being written and never leaves half a line):

* ``{"type": "start", "time_utc", "robot", "contract_hash", "limits", "policy_dt"}`` -- first line
* ``{"type": "event", ...}`` -- a :class:`aow_policy.monitor.ViolationEvent` when it ends
* ``{"type": "interval", ...}`` -- :meth:`ViolationMonitor.interval_summary`, once per second
* ``{"type": "summary", ...}`` -- :meth:`ViolationMonitor.summary`, at shutdown (last line)
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path
from typing import Any, TextIO

from aow_policy.monitor import ViolationEvent, ViolationMonitor


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class ViolationLog:
    """Creates ``<log_dir>/violations_<UTC time>_<pid>[_<n>].jsonl`` (never overwrites a file)."""

    def __init__(self, log_dir: str | os.PathLike[str], monitor: ViolationMonitor, prefix: str = "violations"):
        self.monitor = monitor
        directory = Path(log_dir).expanduser()
        directory.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        base = f"{prefix}_{stamp}_{os.getpid()}"
        self.path = directory / f"{base}.jsonl"
        n = 0
        while True:
            try:
                self._file: TextIO | None = open(self.path, "x", encoding="utf-8")  # noqa: SIM115 (kept open)
                break
            except FileExistsError:
                n += 1
                self.path = directory / f"{base}_{n}.jsonl"
        robot = monitor.robot
        self.write(
            {
                "type": "start",
                "time_utc": dt.datetime.now(dt.UTC).isoformat(),
                "robot": robot.name,
                "contract_hash": robot.contract_hash,
                "policy_dt": monitor.policy_dt,
                "limits": {
                    "joint_speed": robot.constraints["joint_speed"].limit,
                    "joint_torque": robot.constraints["joint_torque"].limit,
                },
            }
        )

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"violation log {self.path} is closed")
        self._file.write(json.dumps(_finite(record), allow_nan=False) + "\n")
        self._file.flush()

    def events(self, events: list[ViolationEvent]) -> None:
        for event in events:
            self.write({"type": "event", **event.to_dict()})

    def interval(self, t: float) -> None:
        self.write({"type": "interval", **self.monitor.interval_summary(t)})

    def close(self) -> dict[str, Any]:
        """Close open events, write the summary as the last line, close the file; returns the summary."""
        if self._file is None:
            return {}
        self.events(self.monitor.finish())
        summary = self.monitor.summary()
        self.write({"type": "summary", **summary})
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        return summary

    @property
    def closed(self) -> bool:
        return self._file is None


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a log (for tests and quick looks)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
