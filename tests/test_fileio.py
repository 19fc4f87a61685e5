"""Atomic writes leave either the old file or the complete new one, never a partial or temp file."""

from __future__ import annotations

from pathlib import Path

import pytest

from aow_policy.fileio import atomic_write_bytes, atomic_write_text


def test_writes_and_replaces(tmp_path: Path):
    p = atomic_write_text(tmp_path / "sub" / "a.json", "one")
    assert p.read_text() == "one"
    atomic_write_bytes(p, b"two", mode=0o644)
    assert p.read_bytes() == b"two" and (p.stat().st_mode & 0o777) == 0o644
    assert sorted(x.name for x in p.parent.iterdir()) == ["a.json"]


def test_failure_keeps_the_old_file_and_no_temp(tmp_path: Path):
    p = atomic_write_text(tmp_path / "a.txt", "old")
    with pytest.raises(TypeError):
        atomic_write_bytes(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["a.txt"]
