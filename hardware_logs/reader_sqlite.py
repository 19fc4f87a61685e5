"""The sqlite3 back end of :mod:`hardware_logs.reader`: rosbags' sqlite3 storage opened without
counting its messages, batches read by one aggregated query each, and a damaged ``.db3`` read row
by row up to and past its damage (:class:`SqliteBatches`, a part of ``BagSource``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from rosbags.interfaces import Connection, ConnectionExtRosbag2, MessageDefinition, MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2.metadata import parse_qos
from rosbags.rosbag2.reader import DirectoryReader
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader

from hardware_logs.fastcdr import stacked_stride
from hardware_logs.reader_common import STORAGE_ERRORS, BagError, RawBatch, _describe


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


class SqliteBatches:
    """The sqlite3 reading of ``BagSource`` (its attributes: path, topic, batch size, connections)."""

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
