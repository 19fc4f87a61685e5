"""``python -m training.episode_ends CHECKPOINT``: what ends a policy's episodes, per sub-terrain kind.

A rough-terrain curriculum moves a robot down a row whenever its episode fails, so the kind of
terrain whose level stalls is the one to read, and the termination that ends its episodes is
what to change. This runs a checkpoint's policy on its own task (its config, domain randomization
included) with the robots placed at the checkpoint's own terrain levels, for ``--seconds``, and
counts per sub-terrain kind the episodes that ended and why (time-out, orientation, body contact,
the joint-speed trip, a simulator failure; a robot can meet several at once); for the trip, which
joints passed the bound and whether their wheel was in the air (swing) or on the ground. The
policy acts deterministically (its mean, as deployed) unless ``--sample`` (as in training).

Example::

    python -m training.episode_ends runs/rough_progress_np3o --robots 240 --seconds 20 --json ends.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import torch

from training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from training.command_tracking import actor_from_checkpoint
from training.runner_checkpoints import spread_terrain_levels


def count_episode_ends(
    source: str | Path, robots: int = 240, seconds: float = 20.0, sample: bool = False, seed: int = 7
) -> dict[str, Any]:
    """Per sub-terrain kind: episodes ended, by cause, and the tripping joints (swing / stance)."""
    from training.envs import make_env

    path = Path(source)
    path = latest_checkpoint(path) if path.is_dir() else path
    ckpt = load_checkpoint(path)
    actor, config, iteration = actor_from_checkpoint(ckpt)
    env = make_env(config["task"], robots, seed=seed, **(config.get("env_overrides") or {}))
    try:
        if env.curriculum is None:
            raise CheckpointError(f"{path}: task {config['task']!r} has no terrain curriculum (no sub-terrain kinds)")
        ranks = (ckpt.get("runner_state") or {}).get("ranks") or []
        saved = (ranks[0].get("env") or {}).get("terrain_levels") if ranks else None
        if saved is not None:  # the checkpoint's own level distribution, over this many robots
            env.curriculum.levels[:] = spread_terrain_levels(torch.as_tensor(saved), robots).to(env.device)
        kind_of_env = [env.terrain.types[int(j)] for j in env.curriculum.types]  # fixed per robot
        joint_names = list(env.joint_names)
        feet = list(env.sim.scene.foot_names)
        foot_of = [next((i for i, f in enumerate(feet) if f[:2] == name[:2]), None) for name in joint_names]
        generator = torch.Generator().manual_seed(seed)
        obs = env.reset()
        episodes: Counter[str] = Counter()
        causes: dict[str, Counter[str]] = defaultdict(Counter)
        tripped: dict[str, Counter[str]] = defaultdict(Counter)
        for _ in range(round(seconds / env.dt)):
            with torch.no_grad():
                if sample:
                    dist = actor.distribution(obs["policy"])
                    actions = dist.mean + dist.stddev * torch.randn(dist.mean.shape, generator=generator)
                else:
                    actions = actor(obs["policy"])
            obs, _, _, dones, _ = env.step(actions)
            for i in dones.nonzero().squeeze(-1).tolist():
                kind = kind_of_env[i]
                episodes[kind] += 1
                for cause, hit in env.ends.items():
                    if bool(hit[i]):
                        causes[kind][cause] += 1
                if "joint_speed_trip" in env.ends and bool(env.ends["joint_speed_trip"][i]):
                    for j in env.tripped_joints[i].nonzero().squeeze(-1).tolist():
                        contacts, foot = env.trip_foot_contacts, foot_of[j]
                        phase = (
                            "" if contacts is None or foot is None else (" stance" if contacts[i, foot] else " swing")
                        )
                        tripped[kind][joint_names[j] + phase] += 1
    finally:
        env.close()
    return {
        "info": {
            "source": str(path),
            "task": config["task"],
            "algo": config.get("algo"),
            "iteration": iteration,
            "robots": robots,
            "seconds": seconds,
            "sampled": sample,
            "seed": seed,
        },
        "episodes": dict(episodes),
        "causes": {k: dict(v) for k, v in causes.items()},
        "tripped_joints": {k: dict(sorted(v.items())) for k, v in tripped.items()},
    }


def format_table(result: dict[str, Any]) -> str:
    """One row per sub-terrain kind: episodes, failed, then each cause."""
    names = sorted({c for v in result["causes"].values() for c in v} - {"time_out"})
    rows = ["| kind | episodes | failed | " + " | ".join(names) + " |", "| --- " * (3 + len(names)) + "|"]
    for kind, n in sorted(result["episodes"].items()):
        c = result["causes"].get(kind, {})
        failed = n - c.get("time_out", 0)
        rows.append(f"| {kind} | {n} | {failed} | " + " | ".join(str(c.get(x, 0)) for x in names) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.episode_ends",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="checkpoint (model_N.pt) or run directory (its latest) of a rough-terrain run")
    p.add_argument("--robots", type=int, default=240, help="robots (default %(default)s)")
    p.add_argument("--seconds", type=float, default=20.0, help="simulated seconds (default %(default)s)")
    p.add_argument("--sample", action="store_true", help="sample the actions as in training (default: the mean)")
    p.add_argument("--seed", type=int, default=7, help="environment and sampling seed (default %(default)s)")
    p.add_argument("--json", type=Path, help="also write the counts to this JSON file")
    args = p.parse_args(argv)
    if args.robots < 1 or not args.seconds > 0:
        print("training.episode_ends: error: --robots and --seconds must be positive", file=sys.stderr)
        return 2
    try:
        result = count_episode_ends(args.source, args.robots, args.seconds, args.sample, args.seed)
    except (CheckpointError, FileNotFoundError) as e:
        print(f"training.episode_ends: error: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
