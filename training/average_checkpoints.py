"""One policy from the mean of several checkpoints of one run (weight averaging).

The rough lines' checkpoints swing by 15-25 course drives of 42 between neighbours a few
iterations apart. Averaging the weights of consecutive checkpoints (Izmailov et al. 2018,
stochastic weight averaging; Nikishin et al. 2018 for RL) asks whether the middle of a stretch
crosses more reliably than its luckiest point. PPO's steps are small (a KL target of 0.01 per
update), so neighbouring checkpoints lie in one basin and their mean is itself a policy of the
run. Measured so far it is not better than its members (docs/locomotion.md, sessions 21 and 28:
PPO 1605-1640 125 of 132 drives against its member 1618's 128; N-P3O 1306-1352 40 of 48 against
1352's 45), so a shipped policy is still one checkpoint; this writes the averages that test it:

    python -m training.average_checkpoints runs/rough_avg_np3o --from 1306 --to 1352 \\
        --out runs/avg/model_1352.pt
    python -m training.average_checkpoints A/model_1240.pt A/model_1250.pt --out runs/avg/model_1250.pt

Every floating-point entry of the model is averaged (weights, the action log-std, the observation
normalizers' mean and variance); integer entries (the mirror maps) must agree. The result keeps
the newest checkpoint's iteration, optimizer and algorithm state, so it exports, screens and
forks like any other checkpoint, drops the runner state (it belongs to none of the averaged
episodes) and records the averaged iterations under ``averaged_from``; an export writes them into
the contract.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from training.checkpoint import SAME_RUN_FIELDS, CheckpointError, load_checkpoint, run_checkpoints, save_checkpoint
from training.slim_checkpoint import policy

# What must agree between the checkpoints for their weights to be of one run and one network.
_SAME_CONFIG = (*SAME_RUN_FIELDS, "network")


def average(ckpts: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of ``ckpts``' models in the newest one's checkpoint (a new dict; inputs unchanged)."""
    import torch

    if len(ckpts) < 2:
        raise CheckpointError(f"averaging needs at least two checkpoints, got {len(ckpts)}")
    ckpts = sorted(ckpts, key=lambda c: int(c["iteration"]))
    iterations = [int(c["iteration"]) for c in ckpts]
    if len(set(iterations)) != len(iterations):
        raise CheckpointError(f"the same iteration appears twice among {iterations}")
    first_config = ckpts[0].get("config") or {}
    for ckpt, it in zip(ckpts[1:], iterations[1:], strict=True):
        config = ckpt.get("config") or {}
        differ = [k for k in _SAME_CONFIG if config.get(k) != first_config.get(k)]
        if differ:
            raise CheckpointError(
                f"iteration {it} is not of the run of iteration {iterations[0]} ({', '.join(differ)} differ)"
            )
        if ckpt.get("robot_contract_hash") != ckpts[0].get("robot_contract_hash"):
            raise CheckpointError(
                f"iteration {it} trained against another robot contract than iteration {iterations[0]}"
            )
    models = [c["model"] for c in ckpts]
    keys = list(models[0])
    for model, it in zip(models[1:], iterations[1:], strict=True):
        if set(model) != set(keys):
            extra = sorted(set(model) ^ set(keys))
            raise CheckpointError(f"iteration {it}'s model has other entries than iteration {iterations[0]}'s: {extra}")
    mean_model: dict[str, Any] = {}
    for key in keys:
        values = [m[key] for m in models]
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise CheckpointError(f"model entry {key} has different shapes {sorted(shapes)}")
        if values[0].is_floating_point():
            mean_model[key] = torch.stack([v.double() for v in values]).mean(0).to(values[0].dtype)
        else:
            if not all(torch.equal(v, values[0]) for v in values[1:]):
                raise CheckpointError(f"model entry {key} (integer) differs between the checkpoints")
            mean_model[key] = values[0].clone()
    out = policy(ckpts[-1])
    out["model"] = mean_model
    out["averaged_from"] = iterations
    return out


def select(run_dir: Path, first: int | None, last: int | None, every: int = 1) -> list[Path]:
    """The run's checkpoints with first <= iteration <= last, every ``every``-th of them."""
    found = [
        (it, p) for it, p in run_checkpoints(run_dir) if (first is None or it >= first) and (last is None or it <= last)
    ]
    if not found:
        raise CheckpointError(f"{run_dir}: no checkpoints between iterations {first} and {last}")
    return [p for _, p in found[::every]]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.average_checkpoints",
        description="Write one checkpoint whose model is the mean of several checkpoints of one run (weight "
        "averaging); it exports, screens and forks like any checkpoint and records the iterations it averages.",
    )
    p.add_argument("paths", nargs="+", type=Path, help="checkpoint files, or one run directory with --from/--to")
    p.add_argument("--from", dest="first", type=int, default=None, help="of a run directory: first iteration")
    p.add_argument("--to", dest="last", type=int, default=None, help="of a run directory: last iteration")
    p.add_argument("--every", type=int, default=1, help="of a run directory: every N-th checkpoint (default 1)")
    p.add_argument("--out", type=Path, required=True, help="file to write (model_<iteration>.pt is customary)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.every < 1:
            raise CheckpointError(f"--every must be at least 1, got {args.every}")
        if len(args.paths) == 1 and args.paths[0].is_dir():
            sources = select(args.paths[0], args.first, args.last, args.every)
        elif any(p.is_dir() for p in args.paths) or args.first is not None or args.last is not None:
            raise CheckpointError("give either one run directory (with --from/--to) or checkpoint files")
        else:
            sources = list(args.paths)
        if any(args.out.exists() and args.out.resolve() == s.resolve() for s in sources):
            raise CheckpointError(f"{args.out}: would overwrite one of the averaged checkpoints; give another --out")
        averaged = average([load_checkpoint(s) for s in sources])
    except CheckpointError as e:
        print(f"average_checkpoints: error: {e}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(args.out, averaged)
    its = averaged["averaged_from"]
    print(f"{args.out}: the mean of {len(its)} checkpoints, iterations {its[0]}-{its[-1]} ({', '.join(map(str, its))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
