"""Decoding the controller's two high-rate inputs, sensor_msgs/JointState and nav_msgs/Odometry,
straight from their serialized (CDR) bytes.

Why: Humble's rclpy turns each message into Python objects through the generated ``__init__``
and property setters of every nested message: about 150 µs for an Odometry on the 2-core test
machine, most of the controller's time per period once it took its inputs itself. These decoders
read the same bytes with ``struct`` and ``numpy.frombuffer`` in a few microseconds and return
plain objects with the message's attribute names (``msg.header.stamp.sec``,
``msg.pose.pose.position.x``, ``msg.position`` as float64 arrays), which is all the controller
core reads. Only plain little-endian CDR (encapsulation 0x0001, what every ROS 2 RMW sends on
x86 and ARM) is decoded; anything else raises :class:`CdrError` and the caller deserializes
with rclpy instead. Layouts follow the OMG CDR rules that ROS 2 uses (alignment counted from the
byte after the 4-byte encapsulation header; strings as uint32 length including the NUL).
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import numpy as np

CDR_LITTLE_ENDIAN = b"\x00\x01"
_ENCAPSULATION = 4


class CdrError(ValueError):
    """Bytes this decoder does not handle (other encapsulation, truncated, inconsistent counts)."""


_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")
# Odometry after child_frame_id: pose (position 3, orientation 4, covariance 36), twist (linear 3,
# angular 3, covariance 36): 85 float64 at one 8-aligned offset
_ODOMETRY_BODY = struct.Struct("<85d")


def _check_encapsulation(data: bytes | memoryview) -> None:
    if len(data) < _ENCAPSULATION or bytes(data[:2]) != CDR_LITTLE_ENDIAN:
        raise CdrError(f"not little-endian plain CDR (encapsulation {bytes(data[:2]).hex() or 'missing'})")


def _aligned(offset: int, size: int) -> int:
    """``offset`` (into the whole buffer) moved up to CDR alignment ``size`` (counted after the header)."""
    return offset + (-(offset - _ENCAPSULATION) % size)


def _string(data: bytes | memoryview, offset: int) -> tuple[str, int]:
    """(the string at 4-aligned ``offset``, the offset after it)."""
    offset = _aligned(offset, 4)
    (length,) = _U32.unpack_from(data, offset)
    end = offset + 4 + length
    if end > len(data):
        raise CdrError(f"string of {length} bytes past the end of a {len(data)}-byte message")
    return (bytes(data[offset + 4 : end - 1]).decode("utf-8") if length else ""), end


def _header(data: bytes | memoryview) -> tuple[SimpleNamespace, int]:
    sec, nanosec = _STAMP.unpack_from(data, _ENCAPSULATION)
    frame_id, offset = _string(data, _ENCAPSULATION + 8)
    return SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec), frame_id=frame_id), offset


def _float64_sequence(data: bytes | memoryview, offset: int) -> tuple[np.ndarray, int]:
    offset = _aligned(offset, 4)
    (count,) = _U32.unpack_from(data, offset)
    offset += 4
    if count == 0:
        return np.zeros(0), offset
    offset = _aligned(offset, 8)
    end = offset + 8 * count
    if end > len(data):
        raise CdrError(f"{count} float64 past the end of a {len(data)}-byte message")
    return np.frombuffer(data, "<f8", count, offset).copy(), end  # a copy: the buffer is reused


def decode_joint_state(data: bytes | memoryview) -> Any:
    """sensor_msgs/msg/JointState: header, name (list of str), position/velocity/effort (float64 arrays)."""
    return JointStateDecoder()(data)


class JointStateDecoder:
    """:func:`decode_joint_state` that remembers the last name list: a robot sends the same names in
    every message, so when the bytes of the name section are those of the previous message (one
    comparison) the list is reused instead of decoding 16 strings again."""

    def __init__(self) -> None:
        self._names_bytes = b""
        self._names: list[str] = []

    def __call__(self, data: bytes | memoryview) -> Any:
        _check_encapsulation(data)
        try:
            header, offset = _header(data)
            offset = _aligned(offset, 4)
            (count,) = _U32.unpack_from(data, offset)
            offset += 4
            if count > len(data):
                raise CdrError(f"{count} joint names in a message of {len(data)} bytes")
            known = len(self._names_bytes)
            if count == len(self._names) and bytes(data[offset : offset + known]) == self._names_bytes:
                names, offset = self._names, offset + known
            else:
                start, names = offset, []
                for _ in range(count):
                    name, offset = _string(data, offset)
                    names.append(name)
                self._names_bytes, self._names = bytes(data[start:offset]), names
            position, offset = _float64_sequence(data, offset)
            velocity, offset = _float64_sequence(data, offset)
            effort, offset = _float64_sequence(data, offset)
        except struct.error as e:
            raise CdrError(f"JointState truncated: {e}") from None
        # names: a copy, so a consumer may keep or change it
        return SimpleNamespace(header=header, name=list(names), position=position, velocity=velocity, effort=effort)


def decode_odometry(data: bytes | memoryview) -> Any:
    """nav_msgs/msg/Odometry: header, child_frame_id, pose (PoseWithCovariance), twist (TwistWithCovariance)."""
    _check_encapsulation(data)
    try:
        header, offset = _header(data)
        child, offset = _string(data, offset)
        v = _ODOMETRY_BODY.unpack_from(data, _aligned(offset, 8))
    except struct.error as e:
        raise CdrError(f"Odometry truncated: {e}") from None
    pose = SimpleNamespace(
        position=SimpleNamespace(x=v[0], y=v[1], z=v[2]), orientation=SimpleNamespace(x=v[3], y=v[4], z=v[5], w=v[6])
    )
    twist = SimpleNamespace(
        linear=SimpleNamespace(x=v[43], y=v[44], z=v[45]), angular=SimpleNamespace(x=v[46], y=v[47], z=v[48])
    )
    return SimpleNamespace(
        header=header,
        child_frame_id=child,
        pose=SimpleNamespace(pose=pose, covariance=np.array(v[7:43])),
        twist=SimpleNamespace(twist=twist, covariance=np.array(v[49:85])),
    )


DECODERS = {"sensor_msgs/msg/JointState": decode_joint_state, "nav_msgs/msg/Odometry": decode_odometry}
