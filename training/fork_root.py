"""A fork root from a policy-only checkpoint and a resume checkpoint of the same line.

Shipped policies and ``sim2sim.follow``'s copies keep networks, optimizer and algorithm state but no
runner state (``training.slim_checkpoint --policy``). ``aow-train --fork`` from such a file
restarts the terrain curriculum at its first levels, a different task from the one the policy was
trained on. This writes the policy's checkpoint with the *portable* runner state (generators,
counters, terrain levels; no saved simulation, so the fork's episodes restart) of another
checkpoint of the same run, typically its committed resume checkpoint:

    python -m training.fork_root policies/aow_rough_ppo/model_1618.pt \\
        policies/runs/rough_track1600_ppo/model_1685.pt --out runs/roots/ppo_1618/model_1618.pt --reseed 1

``--reseed S`` replaces the sampling generators and the global torch generator state by fresh
ones seeded from S, so that two forks of one root take different episodes and minibatches (with
the same generators they would repeat each other).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from training.checkpoint import SAME_RUN_FIELDS, CheckpointError, load_checkpoint, save_checkpoint
from training.slim_checkpoint import policy, portable

GLOBAL_STATE_OFFSET = 1_000_001  # past every rank's two generator seeds (2 i and 2 i + 1)


def _generator_state(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed).get_state()


def fork_root(policy_ckpt: dict[str, Any], state_ckpt: dict[str, Any], reseed: int | None = None) -> dict[str, Any]:
    """``policy_ckpt``'s networks, optimizer, algorithm state and iteration with ``state_ckpt``'s
    portable runner state (a new dict; neither input is changed). Refuses checkpoints of
    different tasks, algorithms, backends or numbers of environments."""
    if not state_ckpt.get("runner_state"):
        raise CheckpointError("the state checkpoint holds no runner state (it is itself a policy-only copy)")
    a, b = policy_ckpt.get("config") or {}, state_ckpt.get("config") or {}
    differ = [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in SAME_RUN_FIELDS if a.get(k) != b.get(k)]
    if differ:
        raise CheckpointError("the two checkpoints are not of one run (" + "; ".join(differ) + ")")
    runner_state = portable(state_ckpt)["runner_state"]
    if reseed is not None:
        ranks = []
        for i, rank in enumerate(runner_state["ranks"]):
            rank = dict(rank)
            rank["generator"] = _generator_state(reseed * 1_000_003 + 2 * i)
            if isinstance(rank.get("env"), dict) and "generator" in rank["env"]:
                rank["env"] = {**rank["env"], "generator": _generator_state(reseed * 1_000_003 + 2 * i + 1)}
            ranks.append(rank)
        runner_state = {**runner_state, "ranks": ranks}
    out = policy(policy_ckpt)
    out["runner_state"] = runner_state
    if reseed is not None and "rng" in out:
        # A resume reads the ranks' generators from runner_state; "rng" repeats them in a saved
        # checkpoint, kept consistent here. The global torch state (which a resume restores too:
        # what torch draws outside the generators, e.g. minibatch order) is reseeded with them.
        out["rng"] = {
            **out["rng"],
            "torch": _generator_state(reseed * 1_000_003 + GLOBAL_STATE_OFFSET),
            "generators": [r["generator"] for r in runner_state["ranks"]],
        }
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.fork_root",
        description="Write a fork root: a policy-only checkpoint with the terrain levels, counters and "
        "generators of another checkpoint of its run (episodes restart), for aow-train --fork.",
    )
    p.add_argument("policy", type=Path, help="policy-only checkpoint (networks, optimizer, algorithm state)")
    p.add_argument("state", type=Path, help="checkpoint of the same run whose runner state to take")
    p.add_argument("--out", type=Path, required=True, help="file to write (model_<iteration>.pt is customary)")
    p.add_argument("--reseed", type=int, default=None, help="fresh sampling generators from this seed")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.out.exists() and args.out.resolve() in (args.policy.resolve(), args.state.resolve()):
            raise CheckpointError(f"{args.out}: would overwrite an input; give another --out")
        root = fork_root(load_checkpoint(args.policy), load_checkpoint(args.state), reseed=args.reseed)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(args.out, root)
    except CheckpointError as e:
        print(f"fork_root: error: {e}", file=sys.stderr)
        return 1
    levels = (root["runner_state"]["ranks"][0].get("env") or {}).get("terrain_levels")
    mean = f", terrain levels mean {float(levels.float().mean()):.2f}" if levels is not None else ""
    print(f"{args.out}: iteration {root['iteration']}{mean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
