"""geometry_msgs/Twist -> the policy's velocity command (vx, vy, yaw rate), clipped to the contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def twist_to_command(
    msg: Any, low: Sequence[float], high: Sequence[float], out: np.ndarray | None = None
) -> np.ndarray:
    """geometry_msgs/Twist -> (vx, vy, yaw rate) clipped to [low, high] (the contract's ranges).

    NaN stays NaN (it is not a number to clip; callers treat it as a fault).
    """
    if out is None:
        out = np.empty(3)
    values = (msg.linear.x, msg.linear.y, msg.angular.z)
    for i in range(3):
        v = float(values[i])
        if v < low[i]:
            v = float(low[i])
        elif v > high[i]:
            v = float(high[i])
        out[i] = v  # NaN fails both comparisons and passes through
    return out
