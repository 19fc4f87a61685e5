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
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from rosbags.interfaces import Connection, ConnectionExtRosbag2, MessageDefinition, MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2.metadata import parse_qos
from rosbags.rosbag2.reader import DirectoryReader
from rosbags.rosbag2.storage_mcap import McapReader, decompress, read_sized
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from hardware_logs.fastcdr import JOINT_STATE_TYPE, stacked_stride

DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"
DISTRO_STORES = {"humble": Stores.ROS2_HUMBLE, "iron": Stores.ROS2_IRON, "jazzy": Stores.ROS2_JAZZY}
DEFAULT_BATCH = 8_192  # arrays of a batch stay in the L2 cache; larger batches are slower
_MCAP_MESSAGE_OP = 0x05
_MCAP_INDEX_OP = 0x07


class BagError(Exception):
    """The bag cannot be analysed at all (missing, unreadable, or without the topic)."""


@dataclass
class RawBatch:
    """Messages as one ``bytes`` each (``data``), or all of one ``length`` in one ``stacked`` buffer.

    ``stacked`` holds the messages at :func:`~hardware_logs.fastcdr.stacked_stride` (zero padding
    after each), the form :meth:`BulkDecoder.decode_stacked` takes.
    """

    bag_time_ns: np.ndarray  # int64, receive time recorded by the bag
    data: list[bytes] | None = None
    stacked: bytes | np.ndarray | None = None
    length: int = 0

    def __len__(self) -> int:
        return len(self.bag_time_ns)


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


def _describe(exc: BaseException) -> str:
    text = " ".join(str(a) for a in exc.args) if exc.args else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _storage_errors() -> tuple[type[BaseException], ...]:
    """Errors a damaged bag raises while it is read (rosbags, sqlite via apsw, zstd/lz4, struct)."""
    errors: list[type[BaseException]] = [ReaderError, struct.error, EOFError, OSError, ValueError, KeyError]
    try:
        import apsw

        errors.append(apsw.Error)
    except ImportError:  # pragma: no cover - rosbags depends on apsw
        pass
    return tuple(errors)


STORAGE_ERRORS = _storage_errors()


class _UncountedSqlite3Reader(Sqlite3Reader):
    """rosbags' sqlite3 storage, opened without counting messages (a scan of the whole table).

    Used only inside a bag directory, whose metadata.yaml carries the message counts and times
    (rosbags' directory reader takes them from there). Topics and message definitions are read
    from the file as rosbags reads them; a schema older than 2 is opened by rosbags itself.
    """

    def _open(self) -> None:
        db = self.dbconn
        assert db is not None
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = {row[1] for row in db.execute("PRAGMA table_info(topics)")}
        if not {"messages", "topics"} <= tables or "offered_qos_profiles" not in columns:
            super()._open()
            return
        schema = 2
        if "schema" in tables:
            schema = next(iter(db.execute("SELECT schema_version FROM schema")), (-1,))[0]
        definitions: dict[str, MessageDefinition] = {}
        if schema >= 4:
            formats = {"ros2msg": MessageDefinitionFormat.MSG, "ros2idl": MessageDefinitionFormat.IDL}
            rows = db.execute("SELECT topic_type, encoding, encoded_message_definition FROM message_definitions")
            for msgtype, encoding, text in rows:
                definitions.setdefault(msgtype, MessageDefinition(formats[encoding], text))
        digest = "type_description_hash" if schema >= 4 else "''"
        query = f"SELECT id, name, type, serialization_format, offered_qos_profiles, {digest} FROM topics ORDER BY id"
        none = MessageDefinition(MessageDefinitionFormat.NONE, "")
        self.schema = schema
        self.connections = [
            Connection(
                cid,
                topic,
                msgtype,
                definitions.get(msgtype, none),
                digest,
                0,
                ConnectionExtRosbag2(fmt, parse_qos(qos)),
                self,
            )
            for cid, topic, msgtype, fmt, qos, digest in db.execute(query)
        ]


class _UncountedDirectoryReader(DirectoryReader):
    STORAGE_PLUGINS: ClassVar[Mapping[str, Any]] = {
        **DirectoryReader.STORAGE_PLUGINS,
        "sqlite3": _UncountedSqlite3Reader,
    }


class _UncountedReader(Reader):
    """rosbags' Reader; a bag directory's sqlite3 files are opened without counting their messages."""

    STORAGE_PLUGINS: ClassVar[Mapping[str, Any]] = {**Reader.STORAGE_PLUGINS, "dir": _UncountedDirectoryReader}


class BagSource:
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

    def _open_sqlite_recovery(self, files: list[Path], error: ReaderError) -> tuple[list[Connection], str | None]:
        """Open a damaged .db3 directly (read-only) and list its topics, if that much is intact."""
        import apsw

        if len(files) != 1:
            raise BagError(f"{self.path}: cannot open the bag ({_describe(error)})") from error
        try:
            db = apsw.Connection(f"file:{files[0]}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            rows = list(db.execute("SELECT id, name, type, serialization_format FROM topics ORDER BY id"))
        except apsw.Error as e:
            raise BagError(f"{self.path}: cannot open the bag ({_describe(error)}; {_describe(e)})") from error
        self._sqlite_recovery = db
        self._warn(f"bag is truncated or corrupted ({_describe(error)}); reading the intact messages in storage order")
        none = MessageDefinition(MessageDefinitionFormat.NONE, "")
        conns = [
            Connection(cid, name, ty, none, "", 0, ConnectionExtRosbag2(fmt, []), None) for cid, name, ty, fmt in rows
        ]
        return conns, None

    def _sqlite_recovery_batches(self) -> Iterator[RawBatch]:
        """Rows in rowid order; past a damaged page, probe ever further ahead for intact rows."""
        import apsw

        db = self._sqlite_recovery
        ids = sorted({c.id for c in self._connections})
        where = f"topic_id IN ({','.join('?' * len(ids))})"
        last = 0
        while True:
            times: list[int] = []
            data: list[bytes] = []
            try:
                cursor = db.execute(
                    f"SELECT id, timestamp, data FROM messages WHERE {where} AND id > ? ORDER BY id", [*ids, last]
                )
                for rowid, t, raw in cursor:
                    last = rowid
                    times.append(t)
                    data.append(raw)
                    if len(data) >= self.batch_size:
                        yield self._emit(times, data)
                        times, data = [], []
                if data:
                    yield self._emit(times, data)
                return
            except apsw.Error as e:
                if data:
                    yield self._emit(times, data)
                damaged_at = last
                for step in (1, 16, 256, 4096, 65536, 1 << 20):
                    try:
                        if list(db.execute("SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT 1", [last + step])):
                            last += step
                            break
                    except apsw.Error:
                        continue
                else:
                    self._warn(f"damaged storage after row {damaged_at}: reading stopped ({_describe(e)})")
                    return
                self._warn(f"damaged storage after row {damaged_at}: rows up to {last} skipped ({_describe(e)})")

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

    def _sqlite_batches(self, storage: Sqlite3Reader) -> Iterator[RawBatch]:
        ids = sorted({c.id for c in storage.connections if c.topic == self.topic})
        if not ids:
            return
        where = f"topic_id IN ({','.join('?' * len(ids))})"
        query = f"SELECT timestamp, data FROM messages WHERE {where} ORDER BY timestamp"
        # Rows in rosbags' order (the timestamp index: ties in rowid order), a batch per query, each
        # aggregated inside SQLite into one blob of the messages at the decoder's stacked stride and
        # one text of their timestamps: no Python object per message. A batch resumes at the last
        # timestamp seen, skipping the rows of that timestamp already read.
        page = (
            f"SELECT timestamp, data FROM messages WHERE {where} AND timestamp >= ? "
            f"ORDER BY timestamp LIMIT {int(self.batch_size)} OFFSET ?"
        )
        probe = (
            f"SELECT length(data) FROM messages WHERE {where} AND timestamp >= ? ORDER BY timestamp LIMIT 1 OFFSET ?"
        )
        aggregate = (
            "SELECT count(*), min(length(data)), max(length(data)), group_concat(timestamp, ','), "
            f"CAST(group_concat(data, ?) AS BLOB) FROM ({page})"
        )
        dbconn = storage.dbconn
        done = 0
        after, skip = -(2**63), 0
        length = None
        try:
            while True:
                if length is None:
                    first = list(dbconn.execute(probe, [*ids, after, skip]))
                    if not first:
                        return
                    length = int(first[0][0])
                pad = bytes(stacked_stride(length) - length)
                count, shortest, longest, times_text, blob = next(dbconn.execute(aggregate, [pad, *ids, after, skip]))
                if not count:
                    return
                if shortest != longest:  # lengths vary inside the batch: one Python bytes per message
                    rows = list(dbconn.execute(page, [*ids, after, skip]))
                    times = np.array([t for t, _ in rows], np.int64)
                    batch = RawBatch(times, [raw for _, raw in rows])
                    length = None
                elif longest != length:  # the stream's message length changed: aggregate again
                    length = int(longest)
                    continue
                else:
                    times = np.fromstring(times_text, dtype=np.int64, sep=",")
                    consistent = len(times) == count and len(blob) == count * (len(pad) + length) - len(pad)
                    if not consistent or (count > 1 and bool((times[1:] < times[:-1]).any())):
                        raise ReaderError("SQLite aggregated a batch out of order or incompletely")
                    batch = RawBatch(times, None, blob + pad, length)
                last = int(times[-1])
                skip = (
                    skip + int(np.count_nonzero(times == last))
                    if last == after
                    else int(np.count_nonzero(times == last))
                )
                after = last
                done += count
                self.messages_read += count
                yield batch
        except STORAGE_ERRORS:
            # Where the storage fails, the rows are fetched one by one (after the last complete
            # batch) up to the failure.
            yield from self._sqlite_rows_until_failure(storage, query, ids, done)

    def _sqlite_rows_until_failure(
        self, storage: Sqlite3Reader, query: str, ids: list[int], skip: int
    ) -> Iterator[RawBatch]:
        times: list[int] = []
        data: list[bytes] = []
        for t, raw in self._guarded(itertools.islice(storage.dbconn.execute(query, ids), skip, None)):
            times.append(t)
            data.append(raw)
        if data:
            yield self._emit(times, data)

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
