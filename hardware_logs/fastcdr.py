"""Bulk decoding of sensor_msgs/msg/JointState from raw CDR bytes.

Deserializing a JointState message by message costs ~15 µs in Python; a long bag holds millions.
But a robot's joint-state stream almost never changes shape: the same frame id, the same joint
names, the same array lengths, so every message has the same byte length and its float64 arrays
sit at the same offsets. This module learns that layout once (a :class:`JointStateLayout`,
checked against rosbags' own deserializer) and then decodes a whole batch of messages of that
layout with a handful of numpy operations on one concatenated buffer:

* the messages are concatenated at a stride that is a multiple of 8 (zero padding between them),
  so the CDR payload of every message (it starts after the 4-byte encapsulation header, and CDR
  aligns relative to it) starts 4 bytes past a multiple of 8; seen from there the buffer is one
  (messages, words) uint64/float64 array whose word j is payload bytes [8j, 8j + 8);
* every message is checked, word by word under a byte mask, to carry exactly the template's
  structural bytes (encapsulation, frame id, joint names, array counts), so a message whose
  names are merely permuted (same length) is never decoded with the wrong layout;
* the stamps and the three arrays are column slices of that array.

Messages that match no learned layout are deserialized in full with rosbags (the fallback), and
their layout is learned for the following messages, so a stream whose names change mid-bag stays
on the fast path after the change.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
CDR_LE = b"\x00\x01"  # encapsulation kind: plain CDR, little endian
_HEADER = 4  # encapsulation header bytes; CDR alignment counts from the byte after it
MAX_LAYOUTS = 16  # a stream with more distinct layouts than this is decoded message by message


class CdrLayoutError(ValueError):
    """The bytes are not a little-endian CDR JointState this parser can lay out."""


@dataclass
class DecodedJointStates:
    """A batch of decoded messages (rows in message order).

    Arrays are (messages, len(names_of_row)); messages of different layouts are kept as separate
    groups, each with its own names, so the caller maps joints by name per group.
    """

    groups: list[DecodedGroup] = field(default_factory=list)
    undecodable: list[tuple[int, str]] = field(default_factory=list)  # (row, reason)


@dataclass
class DecodedGroup:
    rows: np.ndarray  # int64 row indices into the batch
    names: tuple[str, ...]
    stamp_ns: np.ndarray  # int64 header stamps
    position: np.ndarray  # (rows, joints) float64; (rows, 0) when the array is empty
    velocity: np.ndarray
    effort: np.ndarray
    fast: bool  # decoded by the vectorized path


@dataclass(frozen=True)
class JointStateLayout:
    """Byte layout shared by all messages with the same frame id, names and array lengths."""

    length: int
    frame_id: str
    names: tuple[str, ...]
    offsets: tuple[int | None, int | None, int | None]  # first float64 of position/velocity/effort
    counts: tuple[int, int, int]
    struct_words: np.ndarray  # indices of words that hold structural bytes
    struct_mask: np.ndarray  # uint64 byte masks of those words
    struct_value: np.ndarray  # masked template values of those words

    header: int  # the 4 encapsulation bytes as a little-endian uint32
    span_mask: np.ndarray  # masks of all words from the first to the last structural word
    span_value: np.ndarray

    @property
    def stride(self) -> int:
        """Bytes per message in a stacked buffer: a multiple of 8 that leaves 4 bytes of padding."""
        return -(-(self.length + _HEADER) // 8) * 8

    @property
    def words(self) -> int:
        """Payload words per row; they cover the whole message."""
        return self.stride // 8 - 1


def _align(pos: int, n: int) -> int:
    rel = pos - _HEADER
    return _HEADER + (-(-rel // n) * n)


def parse_layout(raw: bytes | memoryview) -> JointStateLayout:
    """Lay out one JointState message (little-endian CDR as written by rmw and rosbags).

    Sequences of float64 are aligned to 8 only when they are non-empty, as Fast-CDR and rosbags
    write them; a writer that pads differently produces a layout that fails the round-trip check
    in :class:`BulkDecoder` and is then decoded message by message.
    """
    data = bytes(raw)
    n = len(data)
    if n < 28 or data[:2] != CDR_LE:
        raise CdrLayoutError("not little-endian CDR")
    structural = bytearray(n)  # 1 where the byte must match the template (header checked apart)

    def u32(pos: int) -> int:
        if pos + 4 > n:
            raise CdrLayoutError("message ends inside a length field")
        return struct.unpack_from("<I", data, pos)[0]

    pos = 12  # after stamp.sec and stamp.nanosec
    flen = u32(pos)
    if flen == 0 or pos + 4 + flen > n:
        raise CdrLayoutError("bad frame_id length")
    frame_id = data[pos + 4 : pos + 4 + flen - 1].decode("utf-8", errors="strict")
    pos += 4 + flen
    pos = _align(pos, 4)
    count = u32(pos)
    if count > 100_000:
        raise CdrLayoutError("implausible joint count")
    pos += 4
    names = []
    for _ in range(count):
        pos = _align(pos, 4)
        slen = u32(pos)
        if slen == 0 or pos + 4 + slen > n:
            raise CdrLayoutError("bad joint name length")
        names.append(data[pos + 4 : pos + 4 + slen - 1].decode("utf-8", errors="strict"))
        pos += 4 + slen
    structural[12:pos] = b"\x01" * (pos - 12)
    offsets: list[int | None] = []
    counts: list[int] = []
    for _ in range(3):
        pos = _align(pos, 4)
        k = u32(pos)
        structural[pos : pos + 4] = b"\x01" * 4
        pos += 4
        if k:
            pos = _align(pos, 8)
            offsets.append(pos)
            pos += 8 * k
        else:
            offsets.append(None)
        counts.append(k)
        if pos > n:
            raise CdrLayoutError("message ends inside a float64 array")
    if n - pos >= 8:
        raise CdrLayoutError(f"{n - pos} unexpected trailing bytes")

    words = -(-(n + _HEADER) // 8) - 1
    payload = np.zeros(words * 8, np.uint8)
    payload[: n - _HEADER] = np.frombuffer(data, np.uint8)[_HEADER:]
    mask = np.zeros(words * 8, np.uint8)
    mask[: n - _HEADER] = np.frombuffer(bytes(structural[_HEADER:]), np.uint8) * 0xFF
    mask64 = mask.view("<u8")
    value64 = payload.view("<u8") & mask64
    struct_words = np.flatnonzero(mask64)
    return JointStateLayout(
        length=n,
        frame_id=frame_id,
        names=tuple(names),
        offsets=(offsets[0], offsets[1], offsets[2]),
        counts=(counts[0], counts[1], counts[2]),
        struct_words=struct_words,
        struct_mask=mask64[struct_words].copy(),
        struct_value=value64[struct_words].copy(),
        header=struct.unpack_from("<I", data, 0)[0],
        span_mask=mask64[struct_words[0] : struct_words[-1] + 1].copy(),
        span_value=value64[struct_words[0] : struct_words[-1] + 1].copy(),
    )


def stacked_stride(length: int) -> int:
    """Bytes per message of ``length`` bytes in a stacked buffer: a multiple of 8, at least 4 of padding."""
    return -(-(length + _HEADER) // 8) * 8


def stack(buffers: Sequence[bytes], length: int) -> bytes:
    """Messages of one length concatenated at the stacked stride (one copy)."""
    stride = stacked_stride(length)
    pad = b"\x00" * (stride - length)
    return pad.join(itertools.chain(buffers, (b"",)))


def word_view(stacked: bytes | memoryview, count: int, layout: JointStateLayout) -> tuple[np.ndarray, np.ndarray]:
    """(payload words (count, words) uint64, encapsulation headers (count,) uint32) of a stacked buffer."""
    stride = layout.stride
    if len(stacked) < count * stride:
        raise ValueError(f"stacked buffer holds {len(stacked)} bytes, {count} messages need {count * stride}")
    words = np.ndarray((count, layout.words), "<u8", buffer=stacked, offset=_HEADER, strides=(stride, 8))
    headers = np.ndarray((count,), "<u4", buffer=stacked, offset=0, strides=(stride,))
    return words, headers


def matches(words: np.ndarray, headers: np.ndarray, layout: JointStateLayout) -> np.ndarray:
    """Per message: the encapsulation header and all structural bytes equal the layout's."""
    ok = headers == layout.header
    full = layout.struct_mask == np.uint64(0xFFFFFFFFFFFFFFFF)
    # Whole structural words (frame id, names) are compared run by run, one equality pass each;
    # words shared with other bytes (array counts next to padding) are masked first.
    full_words = layout.struct_words[full]
    runs = np.split(np.arange(len(full_words)), np.flatnonzero(np.diff(full_words) != 1) + 1)
    for run in runs:
        if not len(run):
            continue
        first, last = int(full_words[run[0]]), int(full_words[run[-1]]) + 1
        ok &= (words[:, first:last] == layout.struct_value[full][run]).all(axis=1)
    for w, m, v in zip(
        layout.struct_words[~full].tolist(),
        layout.struct_mask[~full].tolist(),
        layout.struct_value[~full].tolist(),
        strict=True,
    ):
        ok &= (words[:, w] & np.uint64(m)) == np.uint64(v)
    return ok


def decode_stacked(
    words: np.ndarray, layout: JointStateLayout, wanted: tuple[bool, bool, bool] = (True, True, True)
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Stamps (ns) and the float64 arrays (position, velocity, effort) of matching messages.

    An array not ``wanted`` comes back with shape (messages, 0) whatever the layout holds.
    """
    stamp_word = words[:, 0]
    sec = (stamp_word & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    nsec = (stamp_word >> np.uint64(32)).astype(np.int64)
    stamp = sec * 1_000_000_000 + nsec
    floats = words.view("<f8")
    arrays = []
    for off, k, want in zip(layout.offsets, layout.counts, wanted, strict=True):
        if off is None or not want:
            arrays.append(np.empty((len(words), 0)))
        else:
            w = (off - _HEADER) // 8
            arrays.append(np.ascontiguousarray(floats[:, w : w + k]))
    return stamp, arrays


Deserialize = Callable[[bytes], object]


class BulkDecoder:
    """Decodes batches of raw JointState messages, fast where the layout is known.

    ``deserialize`` is the full deserializer (rosbags' ``typestore.deserialize_cdr`` bound to the
    JointState type); it decodes messages of unknown layout and verifies each newly learned layout
    on the message it was learned from. ``fast=False`` decodes every message with it (the
    reference the fast path is tested against).
    """

    def __init__(self, deserialize: Deserialize, fast: bool = True, position: bool = True) -> None:
        self._deserialize = deserialize
        self.fast = fast
        self._wanted = (position, True, True)
        self._layouts: dict[int, list[JointStateLayout]] = {}  # by message length
        self._rejected: set[bytes] = set()  # structural bytes of layouts that failed the check
        self.fast_messages = 0
        self.full_messages = 0

    def decode(self, buffers: Sequence[bytes]) -> DecodedJointStates:
        """Decode messages given one ``bytes`` each; rows of the result index ``buffers``."""
        out = DecodedJointStates()
        if not buffers:
            return out
        if not self.fast:
            self._decode_full(buffers, np.arange(len(buffers)), out)
            return out
        lengths = np.fromiter(map(len, buffers), dtype=np.int64, count=len(buffers))
        unique_lengths = np.unique(lengths)
        for length in unique_lengths.tolist():
            if len(unique_lengths) == 1:
                rows, group = np.arange(len(buffers)), buffers
            else:
                rows = np.flatnonzero(lengths == length)
                group = [buffers[i] for i in rows.tolist()]
            self._decode_stacked(stack(group, length), len(group), length, rows, out)
        return out

    def decode_stacked(self, stacked: bytes, count: int, length: int) -> DecodedJointStates:
        """Decode ``count`` messages of ``length`` bytes already concatenated at the stacked stride."""
        out = DecodedJointStates()
        rows = np.arange(count)
        if not self.fast:
            stride = -(-(length + _HEADER) // 8) * 8
            self._decode_full([stacked[i * stride : i * stride + length] for i in range(count)], rows, out)
        elif count:
            self._decode_stacked(stacked, count, length, rows, out)
        return out

    def _decode_stacked(
        self, stacked: bytes, count: int, length: int, rows: np.ndarray, out: DecodedJointStates
    ) -> None:
        stride = -(-(length + _HEADER) // 8) * 8
        if length < 28:  # too short for any JointState layout: let the deserializer say why
            self._decode_full([stacked[i * stride : i * stride + length] for i in range(count)], rows, out)
            return
        layouts = self._layouts.setdefault(length, [])
        pending = np.ones(count, dtype=bool)
        words = headers = None

        def message(i: int) -> bytes:
            return bytes(stacked[i * stride : i * stride + length])

        def apply(layout: JointStateLayout) -> None:
            nonlocal words, headers
            if words is None:
                words, headers = word_view(stacked, count, layout)
            hit = pending & matches(words, headers, layout)
            if hit.any():
                all_rows = bool(hit.all())
                stamp, (pos, vel, eff) = decode_stacked(words if all_rows else words[hit], layout, self._wanted)
                out.groups.append(
                    DecodedGroup(rows if all_rows else rows[hit], layout.names, stamp, pos, vel, eff, True)
                )
                self.fast_messages += int(hit.sum())
                pending[hit] = False

        for layout in list(layouts):
            apply(layout)
            if not pending.any():
                return
        attempts = 0
        while pending.any():
            first = int(np.argmax(pending))
            can_learn = attempts < 4 and sum(map(len, self._layouts.values())) < MAX_LAYOUTS
            attempts += 1
            learned = self._learn(message(first)) if can_learn else None
            if learned is None:
                # No usable layout: this message (or, once learning gives up, all the rest) in full.
                todo = [first] if can_learn else np.flatnonzero(pending).tolist()
                self._decode_full([message(i) for i in todo], rows[todo], out)
                pending[todo] = False
                continue
            layouts.insert(0, learned)  # most recent first: streams change layout, then stay
            apply(learned)

    def _learn(self, raw: bytes) -> JointStateLayout | None:
        try:
            layout = parse_layout(raw)
        except (CdrLayoutError, UnicodeDecodeError, struct.error):
            return None
        key = layout.struct_value.tobytes() + bytes(layout.names.__repr__(), "utf-8")
        if key in self._rejected:
            return None
        if not self._round_trip_ok(raw, layout):
            self._rejected.add(key)
            return None
        return layout

    def _round_trip_ok(self, raw: bytes, layout: JointStateLayout) -> bool:
        try:
            msg = self._deserialize(raw)
        except Exception:  # the full deserializer's verdict is what counts; any failure rejects
            return False
        words, headers = word_view(stack([raw], layout.length), 1, layout)
        if not matches(words, headers, layout)[0]:
            return False
        stamp, arrays = decode_stacked(words, layout)
        header = msg.header  # type: ignore[attr-defined]
        if int(stamp[0]) != header.stamp.sec * 1_000_000_000 + header.stamp.nanosec:
            return False
        if tuple(msg.name) != layout.names or header.frame_id != layout.frame_id:  # type: ignore[attr-defined]
            return False
        for ours, theirs in zip(arrays, (msg.position, msg.velocity, msg.effort), strict=True):  # type: ignore[attr-defined]
            theirs = np.asarray(theirs, dtype=np.float64)
            if ours.shape[1] != len(theirs) or ours[0].tobytes() != theirs.tobytes():
                return False
        return True

    def _decode_full(self, buffers: Sequence[bytes], rows: np.ndarray, out: DecodedJointStates) -> None:
        # Messages are grouped by names and array lengths so the caller gets few, large groups.
        groups: dict[tuple, tuple[list[int], list[int], list[list[np.ndarray]]]] = {}
        for raw, row in zip(buffers, rows.tolist(), strict=True):
            try:
                msg = self._deserialize(raw)
            except Exception as e:  # a corrupt message must not end the replay; it is reported
                out.undecodable.append((row, f"{type(e).__name__}: {e}"))
                continue
            header = msg.header  # type: ignore[attr-defined]
            arrays = [np.asarray(a, dtype=np.float64) for a in (msg.position, msg.velocity, msg.effort)]  # type: ignore[attr-defined]
            key = (tuple(msg.name), *(len(a) for a in arrays))  # type: ignore[attr-defined]
            g_rows, g_stamps, g_arrays = groups.setdefault(key, ([], [], [[], [], []]))
            g_rows.append(row)
            g_stamps.append(header.stamp.sec * 1_000_000_000 + header.stamp.nanosec)
            for acc, a in zip(g_arrays, arrays, strict=True):
                acc.append(a)
            self.full_messages += 1
        for key, (g_rows, g_stamps, g_arrays) in groups.items():
            stacked = [np.stack(acc).reshape(len(g_rows), k) for acc, k in zip(g_arrays, key[1:], strict=True)]
            out.groups.append(
                DecodedGroup(
                    np.array(g_rows, dtype=np.int64),
                    key[0],
                    np.array(g_stamps, dtype=np.int64),
                    stacked[0],
                    stacked[1],
                    stacked[2],
                    False,
                )
            )
