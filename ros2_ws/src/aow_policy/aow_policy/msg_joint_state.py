"""sensor_msgs/JointState -> arrays in a fixed joint order, matched by name.

A JointState may list the joints in any order and carry extra joints; a joint of the contract that
is missing makes the message refused (:class:`MissingJointsError`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aow_policy.msg_common import MessageError, as_array

try:  # C gathers of float64 buffers (aow_policy/_control.c); optional: the numpy path is the same
    from aow_policy import _control as _native
except ImportError:
    _native = None

_FLOAT64 = np.dtype(np.float64)


class MissingJointsError(MessageError):
    """A JointState lacks joints of the contract."""

    def __init__(self, missing: Sequence[str]):
        self.missing = tuple(missing)
        super().__init__(f"JointState is missing joint(s) {list(self.missing)}")


@dataclass
class JointStateArrays:
    """Joint values in the reader's joint order. Empty message fields give NaN."""

    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    has_velocity: bool
    has_effort: bool
    stamp: float


class JointStateReader:
    """Reads JointState messages into preallocated arrays in a fixed joint order, by name.

    The name -> index mapping of each distinct message name list is computed once and cached,
    so reading a message in the control loop costs three gathers and no new arrays.
    """

    _MAX_CACHED_LAYOUTS = 16

    def __init__(self, joint_names: Sequence[str], read_effort: bool = True):
        """``read_effort=False`` skips the effort field (the controller does not use it)."""
        self.joint_names = tuple(joint_names)
        self.read_effort = read_effort
        n = len(self.joint_names)
        self.values = np.full((3, n), np.nan)  # rows: position, velocity, effort
        self.position, self.velocity, self.effort = self.values
        self.has_velocity = False
        self.has_effort = False
        self.stamp = math.nan
        self._layouts: dict[tuple[str, ...], tuple[np.ndarray, int]] = {}
        # the last name list (a copy) and its layout: consecutive messages usually list the same names
        self._last_names: list[str] | None = None
        self._last_layout: tuple[np.ndarray, int] = (np.empty(0, dtype=np.intp), 0)

    def _layout(self, names: Any) -> tuple[np.ndarray, int]:
        key = tuple(names)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        lookup: dict[str, int] = {}
        for i, name in enumerate(key):
            if name in lookup:
                raise MessageError(f"JointState lists joint {name!r} twice")
            lookup[name] = i
        missing = [n for n in self.joint_names if n not in lookup]
        if missing:
            raise MissingJointsError(missing)
        if len(self._layouts) >= self._MAX_CACHED_LAYOUTS:
            self._layouts.clear()
        layout = (np.array([lookup[n] for n in self.joint_names], dtype=np.intp), len(key))
        self._layouts[key] = layout
        return layout

    def read(self, msg: Any) -> None:
        """Fill ``position``, ``velocity``, ``effort`` from ``msg``; raises MessageError if refused.

        Refused: a missing or duplicated joint, or a position/velocity/effort field whose length
        is neither 0 nor the number of names. Position is required; velocity and effort may be
        empty (then NaN, with ``has_velocity`` / ``has_effort`` False).
        """
        names = msg.name
        # list == list compares the (usually identical) string objects: cheaper than hashing a tuple
        if type(names) is list and names == self._last_names:
            index, count = self._last_layout
        else:
            index, count = self._layout(names)
            self._last_names = list(names) if type(names) is list else None
            self._last_layout = (index, count)
        if _native is not None:
            read = _native.gather_joint_state(
                msg.position, msg.velocity, msg.effort if self.read_effort else None, index, count, self.values
            )
            if 0 <= read < 4:
                self.has_velocity = bool(read & 1)
                if self.read_effort:
                    self.has_effort = bool(read & 2)
                stamp = msg.header.stamp
                self.stamp = stamp.sec + stamp.nanosec * 1e-9
                return
            # a field of the wrong length: the general path below words the error; not float64
            # buffers (e.g. lists): it converts them
        position = msg.position
        if type(position) is not np.ndarray or position.dtype is not _FLOAT64:
            position = as_array(position)
        if len(position) != count:
            raise MessageError(f"JointState.position has {len(position)} values for {count} names")
        position.take(index, out=self.position, mode="clip")  # "raise" would allocate; index is valid
        velocity = msg.velocity
        if type(velocity) is np.ndarray and velocity.dtype is _FLOAT64 and len(velocity) == count:
            velocity.take(index, out=self.velocity, mode="clip")  # the common case, without a call
            self.has_velocity = True
        else:
            self.has_velocity = self._optional(velocity, "velocity", index, count, self.velocity)
        if self.read_effort:
            self.has_effort = self._optional(msg.effort, "effort", index, count, self.effort)
        stamp = msg.header.stamp
        self.stamp = stamp.sec + stamp.nanosec * 1e-9

    @staticmethod
    def _optional(values: Any, field_name: str, index: np.ndarray, count: int, out: np.ndarray) -> bool:
        values = as_array(values)
        if len(values) == count:
            values.take(index, out=out, mode="clip")
            return True
        if len(values) == 0:
            out.fill(np.nan)
            return False
        raise MessageError(f"JointState.{field_name} has {len(values)} values for {count} names")

    def arrays(self) -> JointStateArrays:
        """A copy of the last read values."""
        return JointStateArrays(
            self.position.copy(),
            self.velocity.copy(),
            self.effort.copy(),
            self.has_velocity,
            self.has_effort,
            self.stamp,
        )


def joint_state_to_arrays(msg: Any, joint_names: Sequence[str]) -> JointStateArrays:
    """One JointState -> arrays in ``joint_names`` order (by name); raises MessageError if refused."""
    reader = JointStateReader(joint_names)
    reader.read(msg)
    return reader.arrays()
