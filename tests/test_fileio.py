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


def test_written_files_get_the_umask_permissions_not_mkstemps_private_ones(tmp_path) -> None:
    import os
    import stat

    from aow_policy.fileio import atomic_output, atomic_write_text

    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.md", "x")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        with atomic_output(tmp_path / "plot.png", suffix=".png") as tmp:
            assert tmp.suffix == ".png" and tmp.parent == tmp_path
            tmp.write_bytes(b"png")
        assert stat.S_IMODE((tmp_path / "plot.png").stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_a_failed_writer_leaves_neither_file_nor_temporary(tmp_path) -> None:
    import pytest

    from aow_policy.fileio import atomic_output

    (tmp_path / "keep.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_output(tmp_path / "keep.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert (tmp_path / "keep.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
