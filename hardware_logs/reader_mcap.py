"""The mcap back end of :mod:`hardware_logs.reader`: a chunk's messages sliced out at the offsets
of rosbags' chunk index (no per-record parsing), stacked for the decoder, and a damaged or
truncated mcap file opened by rosbags' linear scan (:class:`McapBatches`, a part of ``BagSource``)."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
from rosbags.interfaces import Connection
from rosbags.rosbag2 import ReaderError
from rosbags.rosbag2.storage_mcap import McapReader, decompress, read_sized

from hardware_logs.fastcdr import stacked_stride
from hardware_logs.reader_common import STORAGE_ERRORS, BagError, RawBatch, _describe

_MCAP_MESSAGE_OP = 0x05
_MCAP_INDEX_OP = 0x07


class McapBatches:
    """The mcap reading of ``BagSource`` (its attributes: path, topic, batch size, connections)."""

    def _open_recovery(self, error: ReaderError) -> tuple[list[Connection], str | None]:
        """Open a damaged mcap file with rosbags' linear scan, keeping what can be read."""
        db3 = sorted(self.path.glob("*.db3")) if self.path.is_dir() else [self.path]
        if db3 and db3[0].suffix == ".db3":
            return self._open_sqlite_recovery(db3, error)
        files = sorted(self.path.glob("*.mcap")) if self.path.is_dir() else [self.path]
        if self.path.suffix != ".mcap" and not (self.path.is_dir() and files):
            raise BagError(f"{self.path}: cannot open the bag ({_describe(error)})") from error
        if len(files) != 1:
            raise BagError(f"{self.path}: cannot open the bag ({_describe(error)})") from error
        mcap = McapReader(files[0])
        bio = files[0].open("rb")
        mcap.bio = bio
        try:
            if bio.read(8) != b"\x89MCAP0\r\n" or bio.read(1) != b"\x01":
                raise BagError(f"{self.path}: not an mcap file ({_describe(error)})")
            read_sized(bio)
            mcap.data_start = bio.tell()
            mcap.data_end = files[0].stat().st_size
            try:
                mcap.meta_scan()
            except STORAGE_ERRORS as scan_error:
                self._warn(f"bag is truncated or corrupted ({_describe(error)}); read up to the damage: {scan_error}")
            else:
                self._warn(f"bag has no valid index ({_describe(error)}); read by a linear scan")
        except BaseException:
            bio.close()
            raise
        self._recovery = mcap
        return list(mcap.connections), None

    def _mcap_indexed(self, storage: McapReader) -> bool:
        """The chunk index covers the topic and its chunks do not overlap in time."""
        ids = {c.id for c in storage.connections if c.topic == self.topic}
        chunks = [c for c in storage.chunks if any(c.channel_count.get(i, 0) for i in ids)]
        if not chunks:
            return False
        ordered = sorted(chunks, key=lambda c: c.message_start_time)
        return all(a.message_end_time <= b.message_start_time for a, b in itertools.pairwise(ordered))

    def _mcap_batches(self, storage: McapReader) -> Iterator[RawBatch]:
        ids = {c.id for c in storage.connections if c.topic == self.topic}
        chunks = sorted(
            (c for c in storage.chunks if any(c.channel_count.get(i, 0) for i in ids)),
            key=lambda c: c.message_start_time,
        )
        bio = storage.bio
        assert bio is not None
        batcher = _StackedBatcher(self.batch_size)
        for chunk in chunks:
            try:
                chunk_times, raw, starts, lengths = self._read_chunk(bio, chunk, ids)
            except STORAGE_ERRORS as e:
                skipped = sum(chunk.channel_count.get(i, 0) for i in ids)
                self._warn(
                    f"corrupted mcap chunk at file offset {chunk.chunk_start_offset} skipped "
                    f"({skipped} {self.topic} messages lost): {_describe(e)}"
                )
                continue
            for batch in batcher.add(chunk_times, raw, starts, lengths):
                self.messages_read += len(batch)
                yield batch
        for batch in batcher.flush():
            self.messages_read += len(batch)
            yield batch

    def _read_chunk(self, bio: Any, chunk: Any, ids: set[int]) -> tuple[np.ndarray, bytes, np.ndarray, np.ndarray]:
        """(log times, decompressed chunk, data offsets, data lengths) of the topic's messages in log time order."""
        offsets: list[np.ndarray] = []
        for cid in ids:
            index_at = chunk.message_index_offsets.get(cid)
            if index_at is None:
                continue
            bio.seek(index_at)
            head = bio.read(15)
            if len(head) != 15 or head[0] != _MCAP_INDEX_OP:
                raise ReaderError(f"bad message index record at offset {index_at}")
            size = struct.unpack_from("<I", head, 11)[0]
            entries = bio.read(size)
            if len(entries) != size or size % 16:
                raise ReaderError(f"truncated message index at offset {index_at}")
            offsets.append(np.frombuffer(entries, "<u8").reshape(-1, 2))
        index = np.concatenate(offsets) if len(offsets) > 1 else offsets[0]
        index = index[np.argsort(index[:, 0], kind="stable")]  # log time order, as rosbags yields them

        bio.seek(chunk.chunk_start_offset + 9 + 24)
        crc = struct.unpack("<I", bio.read(4))[0]
        bio.seek(chunk.chunk_start_offset + 9 + 40 + len(chunk.compression))
        compressed = bio.read(chunk.compressed_size)
        if len(compressed) != chunk.compressed_size:
            raise ReaderError(f"chunk at offset {chunk.chunk_start_offset} is truncated")
        raw = decompress(compressed, chunk.compression, chunk.uncompressed_size, crc)
        buf = np.frombuffer(raw, np.uint8)
        at = index[:, 1].astype(np.int64)
        if at.size and (at.max() + 31 > buf.size or (buf[at] != _MCAP_MESSAGE_OP).any()):
            raise ReaderError("message index does not point at message records")
        record_len = buf[at[:, None] + np.arange(1, 9)].copy().view("<u8").ravel().astype(np.int64)
        starts = at + 31
        ends = at + 9 + record_len
        if (record_len < 22).any() or ends.max(initial=0) > buf.size:
            raise ReaderError("message record overruns its chunk")
        return index[:, 0].astype(np.int64), raw, starts, ends - starts


class _StackedBatcher:
    """Collects messages sliced out of decompressed mcap chunks into batches for the decoder.

    Runs of messages of one length go, a strided copy per run of evenly spaced records, into one
    stacked buffer (no Python object per message); a chunk whose messages differ in length is
    passed on as one ``bytes`` per message.
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = max(1, batch_size)
        self._length = -1
        self._buffer = np.zeros((0, 0), np.uint8)
        self._times: list[np.ndarray] = []
        self._count = 0

    def add(self, times: np.ndarray, raw: bytes, starts: np.ndarray, lengths: np.ndarray) -> Iterator[RawBatch]:
        if not len(starts):
            return
        length = int(lengths[0])
        if (lengths != length).any():
            yield from self.flush()
            slices = [raw[a : a + n] for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
            yield RawBatch(times, slices)
            return
        if length != self._length:
            yield from self.flush()
            self._length = length
        source = np.frombuffer(raw, np.uint8)
        done = 0
        while done < len(starts):
            if self._count == 0:
                self._buffer = np.zeros((self.batch_size, stacked_stride(length)), np.uint8)
            take = min(len(starts) - done, self.batch_size - self._count)
            self._copy(source, starts[done : done + take], length)
            self._times.append(times[done : done + take])
            done += take
            if self._count == self.batch_size:
                yield from self.flush()
                self._length = length

    def _copy(self, source: np.ndarray, starts: np.ndarray, length: int) -> None:
        # Records of one channel follow each other at a constant step: one strided copy per run.
        breaks = np.flatnonzero(np.diff(starts) != (starts[1] - starts[0] if len(starts) > 1 else 0)) + 1
        for a, b in itertools.pairwise([0, *breaks.tolist(), len(starts)]):
            step = int(starts[a + 1] - starts[a]) if b - a > 1 else length
            if step < length:  # overlapping records: copy message by message
                for k in range(a, b):
                    self._buffer[self._count + k - a, :length] = source[starts[k] : starts[k] + length]
            else:
                run = np.lib.stride_tricks.as_strided(
                    source[starts[a] :], shape=(b - a, length), strides=(step, 1), writeable=False
                )
                self._buffer[self._count : self._count + b - a, :length] = run
            self._count += b - a

    def flush(self) -> Iterator[RawBatch]:
        if self._count:
            stacked = self._buffer[: self._count].reshape(-1)
            yield RawBatch(np.concatenate(self._times), None, stacked, self._length)
        self._times, self._count, self._length = [], 0, -1
