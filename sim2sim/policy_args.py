"""``[NAME=]PATH`` command-line items, read the same way by every sim-to-sim tool."""

from __future__ import annotations

from pathlib import Path


def named_path_items(items: list[str], *, directories: bool = False) -> list[tuple[str, Path]]:
    """``(name, path)`` for each ``[NAME=]PATH`` item, in the order given, names not yet checked
    for repeats (a tool that renames, as ``sim2sim.screen`` appends the iteration, checks them
    after). The name defaults to the file's stem (or the directory's name where ``directories``
    allows them). A missing path and an empty name are errors that name the item."""
    named: list[tuple[str, Path]] = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).stem or Path(item).resolve().name, item
        if not name or not path:
            raise ValueError(f"{item!r}: expected PATH or NAME=PATH")
        target = Path(path)
        if directories and not target.exists():
            raise ValueError(f"{name}: no file or directory {path}")
        if not directories and not target.is_file():
            raise ValueError(f"{name}: no file {path}")
        named.append((name, target))
    return named


def parse_named_paths(items: list[str], *, directories: bool = False) -> dict[str, Path]:
    """Names and paths from ``[NAME=]PATH`` items, in the order given (see
    :func:`named_path_items`). A name given twice is an error: two policies under one name
    would otherwise silently become one row of a table.
    """
    policies: dict[str, Path] = {}
    for name, target in named_path_items(items, directories=directories):
        if name in policies:
            raise ValueError(f"the name {name!r} is given twice: name them, NAME=PATH")
        policies[name] = target
    return policies
