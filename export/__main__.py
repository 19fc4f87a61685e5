"""``python -m export``: same as ``aow-export``."""

from export.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
