"""What every message conversion shares: the error type, sequence views, time stamps.

Incoming messages are read by field names only, so an rclpy message object and a rosbags
dataclass convert alike; sequences may be ``array.array`` (rclpy), numpy arrays (rosbags) or
lists (:func:`as_array` views each without copying where it can).
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np


class MessageError(ValueError):
    """A message cannot be converted; the text says which field is wrong."""


# ---- small helpers ---------------------------------------------------------------------------

_TYPECODES = {np.dtype(np.float64): "d", np.dtype(np.float32): "f"}


def as_array(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """A numpy view of a message sequence without copying where the element type matches."""
    dtype = np.dtype(dtype)
    if isinstance(values, np.ndarray):
        return values if values.dtype == dtype else values.astype(dtype)
    if isinstance(values, array.array):
        if len(values) == 0:
            return np.empty(0, dtype)
        if _TYPECODES.get(dtype) == values.typecode:
            return np.frombuffer(values, dtype=dtype)
    return np.asarray(values, dtype=dtype)


def stamp_to_seconds(stamp: Any) -> float:
    """builtin_interfaces/Time -> seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def seconds_to_sec_nanosec(t: float) -> tuple[int, int]:
    """Seconds -> (sec, nanosec) with 0 <= nanosec < 1e9 (negative times round toward -inf)."""
    total_ns = round(t * 1e9)
    return total_ns // 1_000_000_000, total_ns % 1_000_000_000
