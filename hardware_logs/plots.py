"""Plots of a replay: joint traces with the limit band and violations shaded, and histograms.

A bag can hold hours at 1 kHz, so the traces are not kept sample by sample: :class:`Envelope`
keeps the minimum and maximum of each joint per time bucket, starting at one policy period and
doubling the bucket width whenever the bucket count passes its cap, so memory stays bounded and
every violation remains visible (a bucket is shaded when its extreme is beyond the limit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hardware_logs.stats import HIST_BINS, QuantityResult

MAX_BUCKETS = 4000


class Envelope:
    """Per-bucket min and max of each joint's value over elapsed time, with bounded memory."""

    def __init__(self, joints: int, width_s: float, max_buckets: int = MAX_BUCKETS) -> None:
        self.width_s = width_s
        self.max_buckets = max_buckets
        self.bucket = np.zeros(0, np.int64)
        self.low = np.zeros((0, joints))
        self.high = np.zeros((0, joints))

    @staticmethod
    def initial_width(policy_dt: float, expected_duration_s: float, max_buckets: int = MAX_BUCKETS) -> float:
        """A policy period doubled until the expected duration fits in half the buckets.

        Starting near the final width saves most of the re-bucketing work on long bags.
        """
        width = policy_dt
        while expected_duration_s / width > max_buckets / 2:
            width *= 2
        return width

    def update(self, elapsed: np.ndarray, values: np.ndarray) -> None:
        """Values are NaN where a joint has no sample."""
        if not len(elapsed):
            return
        bucket = np.floor(elapsed / self.width_s).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        # fmin/fmax skip NaN (missing or NaN samples); a bucket without any sample stays NaN.
        self._append(bucket[starts], np.fmin.reduceat(values, starts), np.fmax.reduceat(values, starts))
        while len(self.bucket) > self.max_buckets:
            self._coarsen()

    def _append(self, bucket: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        if len(self.bucket) and bucket[0] == self.bucket[-1]:
            self.low[-1] = np.fmin(self.low[-1], low[0])
            self.high[-1] = np.fmax(self.high[-1], high[0])
            bucket, low, high = bucket[1:], low[1:], high[1:]
        self.bucket = np.concatenate([self.bucket, bucket])
        self.low = np.concatenate([self.low, low])
        self.high = np.concatenate([self.high, high])

    def _coarsen(self) -> None:
        self.width_s *= 2
        bucket = self.bucket // 2
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        self.bucket = bucket[starts]
        self.low = np.fmin.reduceat(self.low, starts)
        self.high = np.fmax.reduceat(self.high, starts)

    @property
    def time_s(self) -> np.ndarray:
        return self.bucket * self.width_s


def _grid(n: int) -> tuple[int, int]:
    cols = 4 if n > 6 else min(n, 3)
    return -(-n // cols), cols


def plot_traces(
    path: Path,
    envelope: Envelope,
    result: QuantityResult,
    title: str,
) -> None:
    """One panel per joint: min/max envelope, the allowed band, buckets over the limit shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = result.joint_names
    rows, cols = _grid(len(names))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.4 * rows), sharex=True, squeeze=False)
    t = envelope.time_s
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.axis("off")
            continue
        low, high = envelope.low[:, k], envelope.high[:, k]
        seen = np.isfinite(low)
        limit = result.limits[k]
        ax.fill_between(t, np.where(seen, low, np.nan), np.where(seen, high, np.nan), step="post", lw=0.6, color="C0")
        if np.isfinite(limit):
            ax.axhspan(-limit, limit, color="C2", alpha=0.12, lw=0)
            ax.axhline(limit, color="C2", lw=0.8)
            ax.axhline(-limit, color="C2", lw=0.8)
            over = seen & (np.maximum(np.abs(low), np.abs(high)) > limit)
            if over.any():
                ax.fill_between(
                    t, 0, 1, where=over, step="post", color="C3", alpha=0.35, transform=ax.get_xaxis_transform(), lw=0
                )
        ax.set_title(f"{names[k]}  ({result.samples_over[k]} over)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("elapsed time [s]", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.08, top=0.9, wspace=0.25, hspace=0.45)
    _save(fig, path)


def plot_histograms(path: Path, result: QuantityResult, title: str) -> None:
    """One panel per joint: histogram of |value| (log counts) with the limit marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = result.joint_names
    rows, cols = _grid(len(names))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.4 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.axis("off")
            continue
        edges = np.linspace(0.0, result.hist_max[k], HIST_BINS + 1)
        counts = result.hist[k, :HIST_BINS]
        ax.stairs(counts, edges, fill=True, color="C0")
        beyond = result.hist[k, HIST_BINS]
        if np.isfinite(result.limits[k]):
            ax.axvline(result.limits[k], color="C3", lw=1.0, label="limit")
        if counts.any():
            ax.set_yscale("log")
        label = f"{names[k]}" + (f"  (+{beyond} beyond)" if beyond else "")
        ax.set_title(label, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.08, top=0.9, wspace=0.25, hspace=0.45)
    _save(fig, path)


def _save(fig: object, path: Path) -> None:
    import os

    import matplotlib.pyplot as plt

    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    os.replace(tmp, path)
