"""Checkpoint files: written atomically, read with ``torch.load(weights_only=True)``.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (no pickled
objects), so loading one never runs code. Layout of the dict (format version 1):

- ``format``: "aow-checkpoint", ``version``: 1
- ``iteration``: int, the number of completed learning iterations
- ``config``: the run's typed config as plain data (``dataclasses.asdict``), including
  ``task``, ``algo``, ``network`` (a :class:`training.networks.NetworkConfig` as dict)
- ``obs_layout``: {"policy": [...], "critic": [...]}: :meth:`ObservationLayout.to_list`
- ``action_layout``: {"joint_names": [...], "kinds": [...], "scales": [...], "offsets": [...],
  "low": [...], "high": [...]}: action i drives joint_names[i]; target = offset + scale * action,
  clipped to [low, high] (leg: position around the default pose; wheel: velocity)
- ``num_actions``: int, ``cost_groups``: {group name: [cost term names]}
- ``model``: ``ActorCritic.state_dict()``
- ``optimizer``: the optimizer's state_dict
- ``algo_state``: algorithm state (penalty weights, Lagrange multipliers, their optimizers)
- ``rng``: random generator states as tensors
- ``robot_contract_hash``: the robot contract the run trained against

Optional keys the runner adds (:data:`OPTIONAL_KEYS`): ``cost_names`` (cost term names),
``env_config`` (the task config as plain data) and ``runner_state`` (per-rank generators,
environment state, episode sums: what an exact resume needs); ``averaged_from`` (the iterations
whose models :mod:`training.average_checkpoints` averaged into this one).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aow_policy.fileio import atomic_output

FORMAT = "aow-checkpoint"
VERSION = 1
REQUIRED_KEYS = (
    "format",
    "version",
    "iteration",
    "config",
    "obs_layout",
    "action_layout",
    "num_actions",
    "cost_groups",
    "model",
    "optimizer",
    "algo_state",
    "rng",
    "robot_contract_hash",
)
OPTIONAL_KEYS = ("cost_names", "env_config", "runner_state", "averaged_from")
# Config fields two checkpoints of one run share (a fork or resume may change the others).
SAME_RUN_FIELDS = ("task", "algo", "num_envs", "backend")


class CheckpointError(ValueError):
    """The file is not a usable checkpoint; the message says why."""


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write atomically: a crash mid-write never leaves a truncated checkpoint under ``path``."""
    payload = {"format": FORMAT, "version": VERSION, **payload}
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint payload lacks key(s) {missing}")
    import torch  # here, not at import: listing a run's checkpoints (aow-status) needs no torch

    path = Path(path)
    with atomic_output(path) as tmp:
        torch.save(payload, tmp)
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and check a checkpoint; refuses truncated, foreign and incomplete files clearly."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an AoW checkpoint (no format marker {FORMAT!r})")
    if data.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {data.get('version')!r}, this toolkit reads {VERSION}")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks key(s) {missing}")
    return data


def portable_env_state(state: dict[str, Any]) -> dict[str, Any]:
    """The part of an environment's saved state that carries over to another device, backend or
    number of environments: its generator, counters and terrain levels, not the whole simulation
    (``exact``), which only the same placement can restore."""
    return {k: v for k, v in state.items() if k != "exact"}


def run_checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(iteration, path) of every checkpoint in a run directory (``model_<iteration>.pt``), in order."""
    found = []
    for p in Path(run_dir).glob("model_*.pt"):
        try:
            found.append((int(p.stem.split("_", 1)[1]), p))
        except ValueError:
            continue
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path:
    """The checkpoint with the highest iteration in a run directory (``model_<iteration>.pt``)."""
    found = run_checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"{run_dir}: no checkpoints (model_<iteration>.pt) in this run directory")
    return found[-1][1]
