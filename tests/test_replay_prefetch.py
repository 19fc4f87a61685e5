"""The read-ahead thread of aow-replay: same items, same order, errors where they happened,
and no thread left behind when the consumer stops early."""

from __future__ import annotations

import threading
import time

import pytest

from hardware_logs.prefetch import prefetched


def test_items_come_in_order_and_complete() -> None:
    assert list(prefetched(iter(range(1000)), depth=3)) == list(range(1000))
    assert list(prefetched(iter([]))) == []


def test_error_surfaces_after_the_items_before_it() -> None:
    def source():
        yield 1
        yield 2
        raise OSError("disk went away")

    seen = []
    with pytest.raises(OSError, match="disk went away"):
        for item in prefetched(source()):
            seen.append(item)
    assert seen == [1, 2]


def test_producer_runs_ahead_in_another_thread() -> None:
    producer_threads = set()

    def source():
        for i in range(3):
            producer_threads.add(threading.current_thread().name)
            yield i

    it = prefetched(source(), depth=2)
    assert next(it) == 0
    deadline = time.monotonic() + 5
    while len(producer_threads) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.current_thread().name not in producer_threads
    assert list(it) == [1, 2]


def test_early_stop_closes_the_source_in_its_thread() -> None:
    closed = threading.Event()

    def source():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    before = threading.active_count()
    for item in prefetched(source(), depth=2):
        if item == 5:
            break
    # The generator is closed by the loop's exit (CPython refcounting) and joins its thread.
    assert closed.is_set()
    assert threading.active_count() == before


def test_consumer_error_stops_producer() -> None:
    closed = threading.Event()

    def source():
        try:
            yield from range(10**9)
        finally:
            closed.set()

    gen = prefetched(source(), depth=1)
    with pytest.raises(RuntimeError):
        for item in gen:
            if item == 3:
                raise RuntimeError("analysis failed")
    gen.close()
    assert closed.is_set()


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        next(prefetched(iter([1]), depth=0))
