"""The bulk JointState decoder against rosbags' own deserializer, message by message."""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from hardware_logs.fastcdr import JOINT_STATE_TYPE, BulkDecoder, CdrLayoutError, parse_layout

TS = get_typestore(Stores.ROS2_HUMBLE)


def cdr(stamp_ns: int, names: list[str], pos: list[float], vel: list[float], eff: list[float], frame: str = "base",
        little_endian: bool = True) -> bytes:  # fmt: skip
    msg = TS.types[JOINT_STATE_TYPE](
        header=TS.types["std_msgs/msg/Header"](
            stamp=TS.types["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
            frame_id=frame,
        ),
        name=names,
        position=np.array(pos, dtype=np.float64),
        velocity=np.array(vel, dtype=np.float64),
        effort=np.array(eff, dtype=np.float64),
    )
    if little_endian:
        return bytes(TS.serialize_cdr(msg, JOINT_STATE_TYPE))
    return bytes(TS.serialize_cdr(msg, JOINT_STATE_TYPE, little_endian=False))


def deserialize(raw: bytes) -> object:
    return TS.deserialize_cdr(raw, JOINT_STATE_TYPE)


def rows_of(decoded: object, n: int) -> list[tuple]:
    """Per input row: (fast, names, stamp, position, velocity, effort) from the decoded groups."""
    out: list[tuple | None] = [None] * n
    for g in decoded.groups:  # type: ignore[attr-defined]
        for k, row in enumerate(g.rows.tolist()):
            out[row] = (g.fast, g.names, int(g.stamp_ns[k]), g.position[k].tolist(), g.velocity[k].tolist(),
                        g.effort[k].tolist())  # fmt: skip
    return out  # type: ignore[return-value]


def reference(raw: bytes) -> tuple:
    m = deserialize(raw)
    h = m.header  # type: ignore[attr-defined]
    return (tuple(m.name), h.stamp.sec * 10**9 + h.stamp.nanosec, list(m.position), list(m.velocity), list(m.effort))  # type: ignore[attr-defined]


NAMES = ["LF_HAA", "LF_HFE", "LF_KFE", "RF_WHEEL"]


@pytest.mark.parametrize(
    ("frame", "counts"),
    [("base", (4, 4, 4)), ("", (4, 4, 0)), ("odom_frame", (0, 4, 4)), ("x", (0, 0, 0)), ("abcdefg", (4, 0, 4))],
)
def test_layouts_decode_like_rosbags(frame: str, counts: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(1)
    raws = [
        cdr(10**9 * i + 123 * i, NAMES, *(rng.normal(size=c).tolist() for c in counts), frame=frame) for i in range(50)
    ]
    decoder = BulkDecoder(deserialize)
    got = rows_of(decoder.decode(raws), len(raws))
    assert decoder.fast_messages == 50 and decoder.full_messages == 0
    for raw, row in zip(raws, got, strict=True):
        assert row[0] is True and row[1:] == reference(raw)


def test_permuted_names_of_equal_length_are_not_decoded_with_the_old_layout() -> None:
    a = cdr(1, ["LF_HAA", "RF_HAA"], [0, 0], [1.0, 2.0], [3.0, 4.0])
    b = cdr(2, ["RF_HAA", "LF_HAA"], [0, 0], [5.0, 6.0], [7.0, 8.0])
    assert len(a) == len(b)
    decoder = BulkDecoder(deserialize)
    got = rows_of(decoder.decode([a, a, b, a, b]), 5)
    assert [r[1] for r in got] == [("LF_HAA", "RF_HAA")] * 2 + [
        ("RF_HAA", "LF_HAA"),
        ("LF_HAA", "RF_HAA"),
        ("RF_HAA", "LF_HAA"),
    ]
    assert got[2][4] == [5.0, 6.0]
    assert decoder.fast_messages == 5  # the second layout is learned, then used


def test_negative_stamp_and_special_values() -> None:
    raw = cdr(-(10**9) + 5, NAMES, [np.inf, -np.inf, 0.0, -0.0], [np.nan, 1e300, -1e-300, 6.0], [1, 2, 3, 4])
    got = rows_of(BulkDecoder(deserialize).decode([raw, raw]), 2)
    ref = reference(raw)
    for row in got:
        assert row[1:3] == ref[:2] and row[3][:2] == [np.inf, -np.inf]
        assert np.isnan(row[4][0]) and row[4][1:] == ref[3][1:]


def test_big_endian_falls_back_to_full_deserialization() -> None:
    raws = [cdr(i, NAMES, [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], little_endian=False) for i in range(3)]
    with pytest.raises(CdrLayoutError):
        parse_layout(raws[0])
    decoder = BulkDecoder(deserialize)
    got = rows_of(decoder.decode(raws), 3)
    assert decoder.full_messages == 3 and decoder.fast_messages == 0
    assert all(row[0] is False and row[1:] == reference(raw) for raw, row in zip(raws, got, strict=True))


def test_corrupt_message_is_reported_not_fatal() -> None:
    good = cdr(1, NAMES, [0] * 4, [1] * 4, [2] * 4)
    bad = bytearray(good)
    bad[24:28] = b"\xff\xff\xff\x7f"  # the name count
    decoder = BulkDecoder(deserialize)
    out = decoder.decode([good, bytes(bad), good, good[:-9]])
    assert sorted(row for row, _ in out.undecodable) == [1, 3]
    assert decoder.fast_messages == 2


def test_fast_and_full_decoders_agree_on_a_mixed_stream() -> None:
    rng = np.random.default_rng(7)
    raws = []
    for i in range(300):
        names = NAMES if i < 100 else NAMES[::-1] if i < 200 else NAMES[:2]
        k = len(names)
        raws.append(cdr(i * 2_500_000, names, rng.normal(size=k).tolist(), rng.normal(size=k).tolist(), []))
    fast = rows_of(BulkDecoder(deserialize).decode(raws), 300)
    full = rows_of(BulkDecoder(deserialize, fast=False).decode(raws), 300)
    assert [r[1:] for r in fast] == [r[1:] for r in full]
    assert all(r[0] for r in fast) and not any(r[0] for r in full)


def test_position_can_be_skipped() -> None:
    raw = cdr(1, NAMES, [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12])
    (g,) = BulkDecoder(deserialize, position=False).decode([raw, raw]).groups
    assert g.position.shape == (2, 0) and g.velocity[1].tolist() == [5, 6, 7, 8]
