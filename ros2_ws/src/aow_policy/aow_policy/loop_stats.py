"""Control-loop timing: period jitter, compute time and overruns, for the nodes' diagnostics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LoopStats:
    """Control-loop timing: period jitter, compute time and overruns, over a ring of samples."""

    nominal_period: float
    window: int = 3000  # 60 s at 50 Hz
    overrun_factor: float = 1.5  # a period longer than this times nominal counts as an overrun
    periods: np.ndarray = field(init=False)
    computes: np.ndarray = field(init=False)
    cpu_computes: np.ndarray = field(init=False)  # thread CPU time: wall minus waiting for a core
    count: int = 0
    overruns: int = 0
    _last_start: float = math.nan
    _reported_overruns: int = 0

    def __post_init__(self) -> None:
        self.periods = np.full(self.window, np.nan)
        self.computes = np.full(self.window, np.nan)
        self.cpu_computes = np.full(self.window, np.nan)

    def record(self, start: float, end: float, cpu: float = math.nan) -> None:
        """One loop iteration that started at ``start`` and finished at ``end`` (monotonic s), having
        used ``cpu`` s of its thread's CPU time (a compute time far above it is preemption)."""
        i = self.count % self.window
        self.cpu_computes[i] = cpu
        period = start - self._last_start
        self.periods[i] = period
        compute = end - start
        self.computes[i] = compute
        if compute > self.nominal_period or period > self.overrun_factor * self.nominal_period:
            self.overruns += 1
        self._last_start = start
        self.count += 1

    def recent_overruns(self) -> int:
        """Overruns since the previous call."""
        recent = self.overruns - self._reported_overruns
        self._reported_overruns = self.overruns
        return recent

    def summary(self) -> dict[str, float]:
        n = min(self.count, self.window)
        periods = self.periods[:n][np.isfinite(self.periods[:n])]
        computes = self.computes[:n]
        out: dict[str, float] = {"iterations": float(self.count), "overruns": float(self.overruns)}
        if len(periods):
            error_p50, error_p99 = np.percentile(np.abs(periods - self.nominal_period), (50, 99))
            out |= {
                "period_mean_ms": 1e3 * float(periods.mean()),
                "period_jitter_ms": 1e3 * float(periods.std()),
                "period_max_ms": 1e3 * float(periods.max()),
                "period_error_p50_ms": 1e3 * float(error_p50),
                "period_error_p99_ms": 1e3 * float(error_p99),
            }
        if n:
            # one percentile call per array: this runs in the control loop's thread (diagnostics)
            compute_p50, compute_p99 = np.percentile(computes, (50, 99))
            out |= {
                "compute_mean_ms": 1e3 * float(computes.mean()),
                "compute_p50_ms": 1e3 * float(compute_p50),
                "compute_p99_ms": 1e3 * float(compute_p99),
                "compute_max_ms": 1e3 * float(computes.max()),
            }
            cpu = self.cpu_computes[:n][np.isfinite(self.cpu_computes[:n])]
            if len(cpu):
                cpu_p50, cpu_p99 = np.percentile(cpu, (50, 99))
                out |= {"compute_cpu_p50_ms": 1e3 * float(cpu_p50), "compute_cpu_p99_ms": 1e3 * float(cpu_p99)}
        return out
