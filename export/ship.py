"""Ship one checkpoint of a training run as a policy directory (``policies/aow_rough_np3o``...).

    python -m export.ship runs/rough_sharp_np3o 1100 policies/aow_rough_np3o \
        --old-evaluation-to policies/runs/rough_sharp_np3o

Writes into the policy directory: ``model_<it>.pt`` without the runner state (the networks,
optimizer and algorithm state: what ``--init-from`` or a fork needs), the run's ``config.yaml``,
``metrics.jsonl`` (the directory's earlier records, from before the run's first iteration, then the
run's up to the shipped one: a line reached fork by fork keeps its whole history),
``policy.onnx`` with its contract (exported and verified against PyTorch) and
``training_curves.png``. The previous checkpoint is removed; its evaluation (``evaluation*.md`` /
``.json``, which no longer describe the directory's policy) is moved to ``--old-evaluation-to``
under ``sim2sim_<old it>_shipped_<name>``, and without that option nothing is written at all.
Evaluate the new policy afterwards with ``python -m sim2sim.evaluate``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from training.checkpoint import CheckpointError, load_checkpoint, run_checkpoints, save_checkpoint
from training.run_files import read_jsonl
from training.slim_checkpoint import policy


class ShipError(ValueError):
    """The run, iteration or policy directory does not allow shipping; the message says why."""


def _evaluations(dst: Path) -> list[Path]:
    return sorted(p for p in dst.glob("evaluation*") if p.suffix in (".md", ".json"))


def _joined_metrics(dst: Path, run_dir: Path, iteration: int) -> list[dict]:
    mine = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["iteration"] < iteration]
    first = mine[0]["iteration"] if mine else iteration
    earlier = [r for r in read_jsonl(dst / "metrics.jsonl") if r["iteration"] < first]
    return earlier + mine


def ship(
    run_dir: Path,
    iteration: int,
    dst: Path,
    old_evaluation_to: Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Ship ``run_dir``'s checkpoint of ``iteration`` into ``dst``; returns the written ONNX file.
    Checks everything before changing anything."""
    from export.pipeline import export_policy

    src = run_dir / f"model_{iteration}.pt"
    if not src.is_file():
        have = [it for it, _ in run_checkpoints(run_dir)]
        raise ShipError(f"{src}: no such checkpoint (the run's last ones: {have[-8:]})")
    if not (run_dir / "config.yaml").is_file():
        raise ShipError(f"{run_dir}: no config.yaml")
    ckpt = load_checkpoint(src)
    old = [p for _, p in run_checkpoints(dst) if p.name != src.name] if dst.is_dir() else []
    evaluations = _evaluations(dst) if dst.is_dir() else []
    if evaluations and old_evaluation_to is None:
        names = ", ".join(p.name for p in evaluations)
        raise ShipError(
            f"{dst} holds the evaluation of the policy it replaces ({names}); --old-evaluation-to DIR keeps it"
        )
    metrics = _joined_metrics(dst, run_dir, iteration)
    dst.mkdir(parents=True, exist_ok=True)
    staging = dst / ".ship"  # exported and verified here before anything in the directory changes
    shutil.rmtree(staging, ignore_errors=True)
    exported = export_policy(src, staging / "policy.onnx", log=log)
    if evaluations:
        old_it = "_".join(p.stem.split("_", 1)[1] for p in old) or "old"
        old_evaluation_to.mkdir(parents=True, exist_ok=True)
        for p in evaluations:
            target = old_evaluation_to / f"sim2sim_{old_it}_shipped_{p.name}"
            shutil.move(p, target)
            log(f"moved {p} -> {target}")
    for p in old:
        p.unlink()
        log(f"removed {p}")
    save_checkpoint(dst / src.name, policy(ckpt))
    shutil.copyfile(run_dir / "config.yaml", dst / "config.yaml")
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    final = dst / "policy.onnx"
    exported.onnx_path.replace(final)
    exported.yaml_path.replace(dst / exported.yaml_path.name)
    staging.rmdir()
    from training.curves import plot_runs

    plot_runs({dst.name: metrics}, dst / "training_curves.png")  # the records just joined, not re-read
    log(f"shipped {src} as {dst} ({len(metrics)} metric records)")
    return final


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m export.ship", description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("run_dir", type=Path, help="the training run (its model_<it>.pt, config.yaml, metrics.jsonl)")
    p.add_argument("iteration", type=int, help="the checkpoint to ship (model_<iteration>.pt)")
    p.add_argument("policy_dir", type=Path, help="the policy directory to write (e.g. policies/aow_rough_np3o)")
    p.add_argument(
        "--old-evaluation-to",
        type=Path,
        default=None,
        help="where the replaced policy's evaluation*.md/json go (required when the directory has one)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from export.checkpoint_source import ExportError

    try:
        ship(args.run_dir, args.iteration, args.policy_dir, args.old_evaluation_to)
    except (ShipError, CheckpointError, ExportError) as e:
        print(f"export.ship: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
