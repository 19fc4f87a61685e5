"""Atomic file writes: a reader (or a crash) never sees a half-written file under the final name.

Files get the permissions a plain ``open(path, "w")`` would give (0666 less the umask), not
``mkstemp``'s private 0600: reports, policies and checkpoints are meant to be shared.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def default_file_mode() -> int:
    """0666 less the process umask (read without changing it where /proc tells it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_output(path: str | os.PathLike[str], mode: int | None = None, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that wants a file name (savefig,
    onnx.save, torch.save); on success it is synced and renamed to ``path``, on failure removed.
    ``suffix`` lets writers that pick a format from the extension see the right one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, default_file_mode() if mode is None else mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it into place."""
    with atomic_output(path, mode) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), mode)
