"""The training progress bar, measured against what actually ends the run.

A run without a time budget ends at its iteration target: the bar counts iterations, and tqdm's
rate gives the remaining time. A run bounded by time (``aow-train --max-minutes``, the demo's
``DEMO_MINUTES``) usually ends at its budget long before the target (the demo's target of
100,000 iterations is only a ceiling): counting iterations against that target would show 1 % and
a remaining time of days. Such a bar counts seconds instead, against the budget, or against the
estimated time to the iteration target when the target comes first, and says which bound it shows.
"""

from __future__ import annotations

from typing import IO, Any


def format_duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on (whole seconds: the bar's own resolution)."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def time_bound_s(
    time_budget_s: float, elapsed_s: float, iterations_done: int, iterations_left: int
) -> tuple[float, str]:
    """The seconds at which a time-bounded run will end, and which bound that is ("time budget" or
    "iteration limit"): the budget, unless the iterations left at the mean pace of those done so far
    end sooner."""
    if iterations_done > 0:
        to_target = elapsed_s + elapsed_s / iterations_done * iterations_left
        if to_target < time_budget_s:
            return to_target, "iteration limit"
    return time_budget_s, "time budget"


class TrainingProgress:
    """The bar of one :meth:`training.runner.Runner.learn` call (see the module docstring).

    ``total`` and ``n`` are the bar's bound and position: iterations without a time budget,
    seconds with one. ``bound`` names what the total stands for.
    """

    def __init__(
        self,
        description: str,
        start_iteration: int,
        target_iterations: int,
        time_budget_s: float | None = None,
        file: IO[str] | None = None,
    ):
        from tqdm import tqdm

        self.start_iteration = start_iteration
        self.target_iterations = target_iterations
        self.time_budget_s = time_budget_s
        self.iteration = start_iteration
        if time_budget_s is None:
            self.bound = "iteration limit"
            self.bar = tqdm(total=target_iterations, initial=start_iteration, desc=description, unit="it", file=file)
        else:
            self.bound = "time budget"
            self.bar = tqdm(
                total=round(time_budget_s),
                desc=description,
                file=file,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}",
            )
            self._show(0.0, {})

    @property
    def total(self) -> float:
        return self.bar.total

    @property
    def n(self) -> float:
        return self.bar.n

    def update(self, iteration: int, elapsed_s: float, figures: dict[str, str]) -> None:
        """After an iteration: ``iteration`` completed in total, ``elapsed_s`` since this call's start,
        ``figures`` (already rounded, e.g. reward) shown after the bar."""
        self.iteration = iteration
        if self.time_budget_s is None:
            self.bar.update(iteration - self.bar.n)
            self.bar.set_postfix(figures)
            return
        bound_s, self.bound = time_bound_s(
            self.time_budget_s, elapsed_s, iteration - self.start_iteration, self.target_iterations - iteration
        )
        if iteration >= self.target_iterations:  # the run is over: full, whatever the rounding of a short run
            self.bar.total = self.bar.n = max(1, round(elapsed_s))
            self._show(float(self.bar.total), figures)
            return
        self.bar.total = max(1, round(bound_s))
        self.bar.n = min(round(elapsed_s), self.bar.total)
        self._show(elapsed_s, figures)

    def _show(self, elapsed_s: float, figures: dict[str, Any]) -> None:
        left = max(0.0, self.bar.total - elapsed_s)
        iterations = f"iteration {self.iteration}"
        if self.bound == "iteration limit":
            iterations += f" of {self.target_iterations}"
        parts = [
            f"{format_duration(elapsed_s)} of {format_duration(self.bar.total)} ({self.bound}), "
            f"{format_duration(left)} left",
            iterations,
            *(f"{k} {v}" for k, v in figures.items()),
        ]
        self.bar.set_postfix_str(", ".join(parts), refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
