"""Average the networks of several checkpoints of one run (weight averaging over a stretch).

A rough-terrain N-P3O line swings from one checkpoint to the next (on the terrain course 41 of 42
drives at one iteration, 11 of 42 fifty iterations later): each checkpoint is one point of a
noisy walk. Averaging the weights of the checkpoints of a stretch, as stochastic weight
averaging does for supervised learning (Izmailov et al. 2018) and Nikishin et al. (2018) did for
A2C and DDPG, picks the middle of the region the walk covered instead of one point of it. The
checkpoints must come from one line (one task, algorithm, network, robot contract and
observation and action layout): weights of unrelated networks do not average into a network.

What the average holds: the mean of every floating-point tensor of the model (actor, critic, cost
critics, observation normalizers, the action log-std); integer tensors (the mirror index maps)
must be equal and are kept. Everything else (optimizer and algorithm state, generators, config,
iteration) is the last checkpoint's, so a fork from the average (``--init-from``) starts from the
last one's optimizer; the runner state (the saved simulation) is dropped, as in a shipped policy.
``averaged_from`` lists the sources (path, iteration, SHA-256).

    python -m training.average runs/rough_kappa_np3o --first 1420 --last 1460 \
        --out runs/avg/model_1460.pt
    python -m training.average runs/x/model_1400.pt runs/x/model_1410.pt --out /tmp/avg.pt
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from training.checkpoint import CheckpointError, load_checkpoint, run_checkpoints, save_checkpoint
from training.slim_checkpoint import policy

# What must agree between the checkpoints for their weights to average into one network.
_SAME_LINE_KEYS = ("obs_layout", "action_layout", "num_actions", "cost_groups", "robot_contract_hash")
_SAME_CONFIG_KEYS = ("task", "algo", "network")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_same_line(first: dict[str, Any], other: dict[str, Any], where: str) -> None:
    for key in _SAME_LINE_KEYS:
        if first.get(key) != other.get(key):
            raise CheckpointError(f"{where}: its {key} differs from the first checkpoint's (not one line)")
    for key in _SAME_CONFIG_KEYS:
        if first["config"].get(key) != other["config"].get(key):
            raise CheckpointError(
                f"{where}: config {key} {other['config'].get(key)!r} differs from the first checkpoint's "
                f"{first['config'].get(key)!r} (not one line)"
            )
    a, b = first["model"], other["model"]
    if set(a) != set(b):
        raise CheckpointError(
            f"{where}: its model tensors differ from the first checkpoint's: {sorted(set(a) ^ set(b))}"
        )
    for name, tensor in a.items():
        if tuple(tensor.shape) != tuple(b[name].shape):
            raise CheckpointError(
                f"{where}: model tensor {name} has shape {tuple(b[name].shape)}, "
                f"the first checkpoint's {tuple(tensor.shape)}"
            )


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """The averaged checkpoint (module docstring) of ``paths``, in iteration order."""
    import torch

    if len(paths) < 2:
        raise CheckpointError(f"averaging needs at least two checkpoints, got {len(paths)}")
    ckpts = [load_checkpoint(p) for p in paths]
    order = sorted(range(len(paths)), key=lambda i: ckpts[i]["iteration"])
    paths, ckpts = [paths[i] for i in order], [ckpts[i] for i in order]
    for path, ckpt in zip(paths[1:], ckpts[1:], strict=True):
        _check_same_line(ckpts[0], ckpt, str(path))
    model: dict[str, Any] = {}
    for name, tensor in ckpts[-1]["model"].items():
        values = [c["model"][name] for c in ckpts]
        if tensor.is_floating_point():
            model[name] = torch.stack([v.to(torch.float64) for v in values]).mean(dim=0).to(tensor.dtype)
        else:
            for path, v in zip(paths, values, strict=True):
                if not torch.equal(v, tensor):
                    raise CheckpointError(f"{path}: integer tensor {name} differs from the last checkpoint's")
            model[name] = tensor.clone()
    out = policy(ckpts[-1])
    out["model"] = model
    out["averaged_from"] = [
        {"path": str(p), "iteration": int(c["iteration"]), "sha256": _sha256(p)}
        for p, c in zip(paths, ckpts, strict=True)
    ]
    return out


def select_checkpoints(sources: list[Path], first: int | None, last: int | None) -> list[Path]:
    """Checkpoint files from files and run directories; of a run directory the ones with
    ``first <= iteration <= last``."""
    found: list[Path] = []
    for src in sources:
        if src.is_dir():
            chosen = [
                p for it, p in run_checkpoints(src) if (first is None or it >= first) and (last is None or it <= last)
            ]
            if not chosen:
                raise CheckpointError(f"{src}: no checkpoints (model_<it>.pt) between iterations {first} and {last}")
            found += chosen
        elif src.is_file():
            found.append(src)
        else:
            raise CheckpointError(f"{src}: no such checkpoint file or run directory")
    return found


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.average",
        description="Average the networks of several checkpoints of one training line into one checkpoint "
        "(optimizer, algorithm state and iteration: the last one's; no runner state).",
    )
    p.add_argument("sources", nargs="+", type=Path, help="checkpoint files (model_<it>.pt) or run directories")
    p.add_argument("--first", type=int, default=None, help="of a run directory: from this iteration on")
    p.add_argument("--last", type=int, default=None, help="of a run directory: up to this iteration")
    p.add_argument("--out", type=Path, required=True, help="the averaged checkpoint to write (must not exist)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.out.exists():
            raise CheckpointError(f"{args.out}: exists; averaging writes a new file only")
        paths = select_checkpoints(args.sources, args.first, args.last)
        averaged = average_checkpoints(paths)
    except CheckpointError as e:
        print(f"training.average: error: {e}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(args.out, averaged)
    its = [s["iteration"] for s in averaged["averaged_from"]]
    print(f"{args.out}: the average of {len(its)} checkpoints (iterations {', '.join(map(str, its))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
