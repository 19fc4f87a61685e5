"""Recording to a rosbag2 directory with rosbags, all or nothing.

The bag is written under a temporary directory beside the target and renamed into place only
when it was closed cleanly; on any failure the temporary directory is removed, so no partial bag
is ever left under the requested name. Connections are added on a topic's first message, with
the message definitions from the typestore (mcap stores them in the file; grid_map_msgs must be
registered in the typestore first, see :func:`aow_policy.msg_defs.register_grid_map_types`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from rosbags.interfaces import Connection
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
VERSIONS = (8, 9)


class RecorderError(RuntimeError):
    """The bag cannot be written (target exists, bad option)."""


def seconds_to_ns(t: float) -> int:
    return round(t * 1e9)


class BagRecorder:
    """``with BagRecorder(path, typestore) as bag: bag.write(topic, msg, t)``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        typestore: Any,
        storage: str = "mcap",
        version: int = 9,
        compress: bool = False,
    ):
        self.path = Path(path)
        if storage not in STORAGES:
            raise RecorderError(f"storage must be one of {sorted(STORAGES)}, got {storage!r}")
        if version not in VERSIONS:
            raise RecorderError(f"rosbag2 version must be one of {VERSIONS}, got {version!r}")
        if compress and storage != "mcap":
            raise RecorderError("compression is only offered for mcap storage (zstd chunks)")
        if self.path.exists():
            raise RecorderError(f"{self.path} exists already; choose a new bag directory (nothing is overwritten)")
        if not self.path.name:
            raise RecorderError(f"{self.path}: not a usable bag directory name")
        self.typestore = typestore
        self.storage, self.version, self.compress = storage, version, compress
        self.counts: dict[str, int] = {}
        self._connections: dict[str, Connection] = {}
        self._writer: Writer | None = None
        self._tmpdir: Path | None = None

    def open(self) -> BagRecorder:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmpdir = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent))
        # The bag inside keeps the final name, so its files (name_0.mcap) match the directory.
        writer = Writer(self._tmpdir / self.path.name, version=self.version, storage_plugin=STORAGES[self.storage])
        if self.compress:
            writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        try:
            writer.open()
        except BaseException:
            self._discard()
            raise
        self._writer = writer
        return self

    def write(self, topic: str, msg: Any, t: float) -> None:
        """Serialize ``msg`` (a rosbags message) and write it at time ``t`` (s)."""
        if self._writer is None:
            raise RecorderError("the recorder is not open")
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._writer.add_connection(topic, msg.__msgtype__, typestore=self.typestore)
            self._connections[topic] = conn
            self.counts[topic] = 0
        data = self.typestore.serialize_cdr(msg, msg.__msgtype__)
        self._writer.write(conn, seconds_to_ns(t), data)
        self.counts[topic] += 1

    def close(self) -> Path:
        """Finish the bag and move it into place; returns its path."""
        if self._writer is None or self._tmpdir is None:
            raise RecorderError("the recorder is not open")
        writer, self._writer = self._writer, None
        try:
            writer.close()
            if self.path.exists():
                raise RecorderError(f"{self.path} appeared while recording; the bag was not moved there")
            os.replace(self._tmpdir / self.path.name, self.path)
        finally:
            self._discard()
        return self.path

    def abort(self) -> None:
        """Drop everything written so far."""
        writer, self._writer = self._writer, None
        if writer is not None:
            # the bag is discarded anyway; a second error would hide the first
            with contextlib.suppress(Exception):
                writer.close()
        self._discard()

    def _discard(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> BagRecorder:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
