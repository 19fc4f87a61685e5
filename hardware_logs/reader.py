"""Reading rosbag2 recordings with rosbags, in large raw batches.

Supports a bag directory (metadata.yaml plus sqlite3 or mcap files), a lone ``.mcap`` or ``.db3``
file, Humble and Jazzy bags, and bags without embedded message definitions (the typestore then
comes from the bag's ``ros_distro``, or Humble).

Raw message bytes are read in batches of many messages, because the decoder works on batches:

* sqlite3: one query over rosbags' read-only connection to the storage file;
* mcap: rosbags' chunk index gives each chunk's message index for the topic, so a chunk is
  decompressed (with rosbags' checksum-checking ``decompress``) and its messages are sliced out
  at the indexed offsets, without per-record parsing; a chunk that fails its checksum is skipped
  and reported, the rest of the bag is still read;
* anything else, or a layout these shortcuts do not expect, goes through rosbags' ordinary
  ``Reader.messages`` generator (the same bytes, more slowly).

A truncated mcap file (no footer or summary) is still read up to the damage with rosbags' own
linear scan. Errors in the middle of a bag end the batches early with a warning: what was read
so far is kept and the result is marked partial. Bags are opened read-only and never written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Connection, MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2.storage_mcap import McapReader
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from hardware_logs.fastcdr import JOINT_STATE_TYPE
from hardware_logs.reader_common import DEFAULT_BATCH, STORAGE_ERRORS, BagError, RawBatch, _describe
from hardware_logs.reader_mcap import McapBatches
from hardware_logs.reader_sqlite import SqliteBatches, _UncountedReader

DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"
DISTRO_STORES = {"humble": Stores.ROS2_HUMBLE, "iron": Stores.ROS2_IRON, "jazzy": Stores.ROS2_JAZZY}


@dataclass
class BagInfo:
    path: Path
    storage: str
    ros_distro: str | None
    topics: dict[str, tuple[str, int]]  # name -> (type, message count)
    topic_messages: int
    duration_ns: int = 0
    recovered: bool = False  # opened by the truncated-mcap scan


def _storage_id(path: Path) -> str:
    if path.is_dir():
        if any(path.glob("*.mcap")):
            return "mcap"
        return "sqlite3"
    return {".mcap": "mcap", ".db3": "sqlite3"}.get(path.suffix, path.suffix or "unknown")


class BagSource(SqliteBatches, McapBatches):
    """One bag opened for reading; use as a context manager."""

    def __init__(
        self,
        path: str | Path,
        topic: str,
        diagnostics_topic: str | None = "/diagnostics",
        distro: str | None = None,
        batch_size: int = DEFAULT_BATCH,
        bulk: bool = True,
    ) -> None:
        self.path = Path(path)
        self.topic = topic
        self.diagnostics_topic = diagnostics_topic
        self.distro = distro
        self.batch_size = batch_size
        self.bulk = bulk
        self.warnings: list[str] = []
        self.partial = False
        self.messages_read = 0
        self._reader: Reader | None = None
        self._recovery: McapReader | None = None
        self._sqlite_recovery: Any = None  # apsw connection to a damaged .db3
        self._stopped: BaseException | None = None
        self._connections: list[Connection] = []
        self.info: BagInfo

    # ---- opening -----------------------------------------------------------------------------
    def __enter__(self) -> BagSource:
        if not self.path.exists():
            raise BagError(f"{self.path}: no such bag (expected a bag directory, a .mcap or a .db3 file)")
        reader = _UncountedReader(self.path) if self._readable_kind() else None
        if reader is None:
            raise BagError(f"{self.path}: not a rosbag2 recording (no metadata.yaml, not a .mcap or .db3 file)")
        try:
            reader.open()
            self._reader = reader
            connections = list(reader.connections)
            distro = reader.storage.metadata.ros_distro if hasattr(reader.storage, "metadata") else None
        except ReaderError as e:
            connections, distro = self._open_recovery(e)
        except STORAGE_ERRORS as e:
            raise BagError(f"{self.path}: cannot open the bag ({_describe(e)})") from e
        self._all_connections = connections
        topics: dict[str, tuple[str, int]] = {}
        for c in connections:
            msgtype, count = topics.get(c.topic, (c.msgtype, 0))
            topics[c.topic] = (msgtype, count + c.msgcount)
        self._connections = [c for c in connections if c.topic == self.topic]
        self.info = BagInfo(
            path=self.path,
            storage=_storage_id(self.path),
            ros_distro=distro if distro not in (None, "", "rosbags") else None,
            topics=topics,
            topic_messages=sum(c.msgcount for c in self._connections),
            duration_ns=self._reader.duration if self._reader is not None else 0,
            recovered=self._recovery is not None,
        )
        if not self._connections:
            present = ", ".join(f"{t} ({ty})" for t, (ty, _) in sorted(topics.items())) or "none"
            self.close()
            raise BagError(f"{self.path}: topic {self.topic!r} is not in the bag; topics present: {present}")
        bad = sorted({c.msgtype for c in self._connections if c.msgtype != JOINT_STATE_TYPE})
        if bad:
            self.close()
            raise BagError(f"{self.path}: topic {self.topic!r} carries {bad}, expected {JOINT_STATE_TYPE}")
        return self

    def _readable_kind(self) -> bool:
        if self.path.is_dir():
            return (self.path / "metadata.yaml").is_file()
        return self.path.suffix in (".mcap", ".db3")

    def close(self) -> None:
        if self._sqlite_recovery is not None:
            db, self._sqlite_recovery = self._sqlite_recovery, None
            db.close()
        if self._reader is not None:
            reader, self._reader = self._reader, None
            reader.close()
        if self._recovery is not None:
            rec, self._recovery = self._recovery, None
            if rec.bio is not None:
                rec.bio.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn(self, text: str, partial: bool = True) -> None:
        # Called from the read-ahead thread and the analysis alike: list.append is atomic and
        # partial only ever becomes True, so no update is lost.
        self.warnings.append(text)
        if partial:
            self.partial = True

    # ---- types -------------------------------------------------------------------------------
    def typestore(self) -> Typestore:
        """Types from the bag's own definitions where it has them, else the distro's store."""
        defs = {c.msgtype: c.msgdef for c in self._all_connections if c.msgdef.format != MessageDefinitionFormat.NONE}
        distro = (self.distro or self.info.ros_distro or "humble").lower()
        base = get_typestore(DISTRO_STORES.get(distro, Stores.ROS2_HUMBLE))
        if not defs:
            return base
        store = get_typestore(Stores.EMPTY)
        try:
            for msgtype, msgdef in defs.items():
                if msgdef.format == MessageDefinitionFormat.MSG:
                    store.register(get_types_from_msg(msgdef.data, msgtype))
                else:
                    sep = "=" * 80 + "\n"
                    texts = [d.split("\n", 1)[1] for d in msgdef.data.split(sep)[1:]] or [msgdef.data]
                    for idl in texts:
                        store.register(get_types_from_idl(idl))
            store.types[JOINT_STATE_TYPE]
        except Exception as e:  # an odd embedded definition: the distro's types still decode JointState
            self._warn(f"embedded message definitions unusable ({_describe(e)}); using the {distro} types", False)
            return base
        return store

    def deserializer(self, msgtype: str) -> Callable[[bytes], Any]:
        store = self.typestore()
        return lambda raw: store.deserialize_cdr(raw, msgtype)

    # ---- diagnostics -------------------------------------------------------------------------
    def diagnostics(self) -> Iterator[tuple[int, Any]]:
        """(bag time, DiagnosticArray) in bag order; nothing if the bag has no such topic."""
        if not self.diagnostics_topic:
            return
        conns = [
            c for c in self._all_connections if c.topic == self.diagnostics_topic and c.msgtype == DIAGNOSTICS_TYPE
        ]
        if not conns:
            return
        deserialize = self.deserializer(DIAGNOSTICS_TYPE)
        try:
            for _, t, raw in self._generic(conns):
                try:
                    yield t, deserialize(raw)
                except Exception as e:  # one bad diagnostics message is reported, not fatal
                    self._warn(f"undecodable {self.diagnostics_topic} message at bag time {t}: {_describe(e)}")
        except STORAGE_ERRORS as e:
            self._warn(f"reading {self.diagnostics_topic} stopped early: {_describe(e)}")

    # ---- any topics --------------------------------------------------------------------------
    def messages(self, topics: Iterator[str] | list[str] | tuple[str, ...]) -> Iterator[tuple[str, int, bytes]]:
        """(topic, bag time ns, raw CDR) of the named topics in bag order (the video reads several at once).

        Topics not in the bag are left out; a storage error ends the messages with a warning.
        """
        wanted = set(topics)
        conns = [c for c in self._all_connections if c.topic in wanted]
        if not conns:
            return
        try:
            for conn, t, raw in self._generic(conns):
                yield conn.topic, t, raw
        except STORAGE_ERRORS as e:
            self._warn(f"reading {sorted(wanted)} stopped early: {_describe(e)}")

    # ---- joint states ------------------------------------------------------------------------
    def batches(self) -> Iterator[RawBatch]:
        """Raw JointState messages of the topic in bag-time order, in batches."""
        try:
            yield from self._batches()
        except STORAGE_ERRORS as e:
            self._stopped = e
        if self._stopped is not None:
            total = f" of {self.info.topic_messages}" if self.info.topic_messages else ""
            self._warn(
                f"bag is truncated or corrupted: reading stopped after {self.messages_read}{total} "
                f"{self.topic} messages ({_describe(self._stopped)})"
            )

    def _guarded(self, source: Iterator[Any]) -> Iterator[Any]:
        """Items until the storage fails; the failure is kept, so the items before it still count."""
        try:
            yield from source
        except STORAGE_ERRORS as e:
            self._stopped = e

    def _batches(self) -> Iterator[RawBatch]:
        if self._sqlite_recovery is not None:
            yield from self._sqlite_recovery_batches()
            return
        storages = self._storages()
        if self.bulk and storages is not None:
            for storage in storages:
                if isinstance(storage, Sqlite3Reader) and getattr(storage, "dbconn", None) is not None:
                    yield from self._sqlite_batches(storage)
                elif isinstance(storage, McapReader) and self._mcap_indexed(storage):
                    yield from self._mcap_batches(storage)
                else:
                    yield from self._generic_batches(storage)
        else:
            yield from self._generic_batches(None)

    def _storages(self) -> list[Any] | None:
        if self._reader is None:
            return None
        storage = self._reader.storage
        if self._reader.compression_mode:  # message-compressed bags: let rosbags decompress
            return None
        return list(getattr(storage, "storages", [storage]))

    def _emit(self, times: list[int] | np.ndarray, data: list[bytes]) -> RawBatch:
        self.messages_read += len(data)
        return RawBatch(np.asarray(times, dtype=np.int64), data)

    def _generic(self, conns: list[Connection]) -> Iterator[tuple[Connection, int, bytes]]:
        if self._reader is not None:
            yield from self._reader.messages(connections=conns)
        elif self._recovery is not None:
            yield from self._recovery.messages_scan(conns)

    def _generic_batches(self, storage: Any | None) -> Iterator[RawBatch]:
        if storage is None:
            source = self._guarded(self._generic(self._connections))
        else:
            ids = {(c.topic, c.msgtype) for c in self._connections}
            conns = [c for c in storage.connections if (c.topic, c.msgtype) in ids]
            source = self._guarded(storage.messages(conns)) if conns else iter(())
        while True:
            rows = list(itertools.islice(source, self.batch_size))
            if not rows:
                return
            _, times, data = zip(*rows, strict=True)
            yield self._emit(list(times), list(data))
