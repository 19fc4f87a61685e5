"""What every storage back end of :mod:`hardware_logs.reader` shares: the batch of raw messages it
yields, the errors a damaged bag raises while it is read, and how one is described."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from rosbags.rosbag2 import ReaderError

DEFAULT_BATCH = 8_192  # arrays of a batch stay in the L2 cache; larger batches are slower


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
