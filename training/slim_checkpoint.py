"""Smaller copies of training checkpoints, for moving them between machines and for shipping.

A checkpoint of a run on C MuJoCo holds the whole simulation and every environment's observations
(``runner_state``), so that a resume on the same placement continues bit for bit. At 16,384 rough
environments that is about 100 MB, over what a lent GPU machine hands back (16 MiB a file).

- ``portable`` keeps what a resume on another device, backend or number of environments uses:
  networks, optimizer, algorithm state, generators, counters and terrain levels (spread over the
  new environments on resume); the episodes restart.
- ``policy`` drops the runner state altogether: what a shipped policy directory keeps.

    python -m training.slim_checkpoint runs/rough_np3o --last 4 --out /tmp/back      # portable
    python -m training.slim_checkpoint runs/x/model_1600.pt --policy --out policies/aow_rough_ppo
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from training.checkpoint import CheckpointError, load_checkpoint, portable_env_state, run_checkpoints, save_checkpoint

# Per-rank runner-state entries that belong to the saved episodes (the simulation's observations):
# meaningless once the simulation is not restored.
_EPISODE_KEYS = ("obs", "episode_return", "episode_length")


def portable(ckpt: dict[str, Any]) -> dict[str, Any]:
    """``ckpt`` without the saved simulation and episodes (a new dict; ``ckpt`` is not changed)."""
    out = dict(ckpt)
    state = ckpt.get("runner_state")
    if state:
        ranks = []
        for rank in state.get("ranks") or []:
            kept = {k: v for k, v in rank.items() if k not in _EPISODE_KEYS}
            if isinstance(kept.get("env"), dict):
                kept["env"] = portable_env_state(kept["env"])
            ranks.append(kept)
        out["runner_state"] = {**state, "ranks": ranks}
    return out


def policy(ckpt: dict[str, Any]) -> dict[str, Any]:
    """``ckpt`` without ``runner_state``: networks, optimizer and algorithm state (a new dict)."""
    return {k: v for k, v in ckpt.items() if k != "runner_state"}


def slim_files(sources: list[Path], out_dir: Path, policy_only: bool = False) -> list[Path]:
    """Write the slim copy of each checkpoint file into ``out_dir`` under its own name; refuses to
    write over a source (nothing is lost)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources:
        dst = out_dir / src.name
        if dst.exists() and os.path.samefile(dst, src):
            raise CheckpointError(f"{dst}: would overwrite its source; give another --out")
        ckpt = load_checkpoint(src)
        save_checkpoint(dst, policy(ckpt) if policy_only else portable(ckpt))
        written.append(dst)
    return written


def _sources(paths: list[Path], last: int | None) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            ckpts = [p for _, p in run_checkpoints(path)]
            if not ckpts:
                raise CheckpointError(f"{path}: no checkpoints (model_<iteration>.pt) in this run directory")
            found += ckpts[-last:] if last else ckpts
        elif path.is_file():
            found.append(path)
        else:
            raise CheckpointError(f"{path}: no such checkpoint file or run directory")
    return found


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.slim_checkpoint",
        description="Write smaller copies of checkpoints: without the saved simulation (portable: a resume "
        "on another device, backend or number of environments keeps the terrain levels) or, with --policy, "
        "without any runner state (a shipped policy).",
    )
    p.add_argument("paths", nargs="+", type=Path, help="checkpoint files (model_<it>.pt) or run directories")
    p.add_argument("--out", type=Path, required=True, help="directory for the copies (same file names)")
    p.add_argument("--last", type=int, default=None, help="of a run directory, only its last N checkpoints")
    p.add_argument("--policy", action="store_true", help="drop the runner state altogether")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.last is not None and args.last < 1:
        print(f"slim_checkpoint: error: --last must be at least 1, got {args.last}", file=sys.stderr)
        return 2
    try:
        written = slim_files(_sources(args.paths, args.last), args.out, policy_only=args.policy)
    except CheckpointError as e:
        print(f"slim_checkpoint: error: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(f"{path}  {path.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
