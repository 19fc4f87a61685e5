"""Read ahead: the next batch of a bag is read in a background thread while this one is analysed.

SQLite (apsw), zstd and lz4 release the GIL while they work, as do NumPy's reductions, so reading
and statistics overlap on a second core. The order of the items and the point where an error
surfaces are those of the plain iterator.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.05  # how often a blocked producer checks whether the consumer has gone


def prefetched(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Yield the items of ``items``, producing up to ``depth`` of them ahead in a thread.

    An exception raised by ``items`` is re-raised here after the items produced before it.
    Closing this generator early (break, an exception in the consumer) stops the producer and
    closes ``items`` in its thread before returning, so the source may be closed right after.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    slots: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(kind: str, value: object) -> bool:
        while not stop.is_set():
            try:
                slots.put((kind, value), timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put("item", item):
                    break
            else:
                put("end", None)
        except BaseException as error:
            put("error", error)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="aow-replay-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "item":
                yield value  # type: ignore[misc]
            elif kind == "error":
                raise value  # type: ignore[misc]
            else:
                return
    finally:
        stop.set()
        thread.join()
