"""Load a training checkpoint and rebuild its actor, refusing anything that does not add up.

Refused, each with a message naming the problem: a path that is not a checkpoint (or a truncated
one), missing or unknown top-level keys, missing or unknown network weights, weight shapes that
disagree with the observation layout or action count in the config, and non-finite weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from aow_policy.layout import LayoutError, ObservationLayout
from training.checkpoint import OPTIONAL_KEYS, REQUIRED_KEYS, CheckpointError, latest_checkpoint, load_checkpoint
from training.networks import Actor, ActorCritic, NetworkConfig, convert_legacy_cost_critics

ACTION_LAYOUT_KEYS = ("joint_names", "kinds", "scales", "offsets", "low", "high")


class ExportError(ValueError):
    """The export was refused or failed; the message says why. No output file was written."""


@dataclass
class PolicySource:
    """A checkpoint's actor and everything the contract needs from it."""

    path: Path
    actor: Actor
    policy_layout: ObservationLayout
    action_layout: dict[str, Any]
    config: dict[str, Any]
    network: NetworkConfig
    iteration: int
    robot_contract_hash: str
    env_config: dict[str, Any] | None = None  # the task config the run trained on, when recorded
    averaged_from: list[int] | None = None  # iterations whose weights were averaged (training.average_checkpoints)

    @property
    def obs_dim(self) -> int:
        return self.policy_layout.dim

    @property
    def num_actions(self) -> int:
        return len(self.action_layout["joint_names"])

    @property
    def task(self) -> str | None:
        return _name_of(self.config.get("task"))

    @property
    def algorithm(self) -> str | None:
        return _name_of(self.config.get("algo", self.config.get("algorithm")))


def _name_of(section: Any) -> str | None:
    """Config sections are either a bare name or a dataclass dict with a name field."""
    if isinstance(section, str):
        return section
    if isinstance(section, dict):
        for key in ("name", "task", "algo", "algorithm"):
            if isinstance(section.get(key), str):
                return section[key]
    return None


def resolve_checkpoint(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """(checkpoint file, whether it was picked as the latest in a run directory)."""
    path = Path(path)
    if path.is_dir():
        try:
            return latest_checkpoint(path), True
        except CheckpointError as e:
            raise ExportError(str(e)) from None
    if not path.exists():
        raise ExportError(f"{path}: no such checkpoint file or run directory")
    return path, False


def _network_config(config: dict[str, Any], path: Path) -> NetworkConfig:
    raw = config.get("network")
    if not isinstance(raw, dict):
        raise ExportError(f"{path}: config has no 'network' section (the NetworkConfig the actor was built with)")
    known = {f.name for f in fields(NetworkConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ExportError(f"{path}: config.network has unknown key(s) {unknown} (known: {sorted(known)})")
    cfg = NetworkConfig(**raw)
    try:
        cfg.validate()
    except ValueError as e:
        raise ExportError(f"{path}: config.{e}") from None
    return cfg


def _action_layout(data: dict[str, Any], path: Path) -> dict[str, Any]:
    layout = data["action_layout"]
    if not isinstance(layout, dict):
        raise ExportError(f"{path}: action_layout is {type(layout).__name__}, expected a mapping")
    missing = [k for k in ACTION_LAYOUT_KEYS if k not in layout]
    if missing:
        raise ExportError(f"{path}: action_layout lacks key(s) {missing}")
    n = len(layout["joint_names"])
    uneven = [k for k in ACTION_LAYOUT_KEYS if len(layout[k]) != n]
    if uneven:
        raise ExportError(f"{path}: action_layout entries {uneven} do not have one value per joint ({n} joints)")
    if data["num_actions"] != n:
        raise ExportError(f"{path}: num_actions is {data['num_actions']} but action_layout lists {n} joints")
    return layout


def _check_state_dict(model: ActorCritic, state: Any, path: Path, layout: ObservationLayout, num_actions: int) -> None:
    if not isinstance(state, dict):
        raise ExportError(f"{path}: 'model' is {type(state).__name__}, expected a state dict")
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unknown = [k for k in state if k not in expected]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing weight(s) {missing}")
        if unknown:
            parts.append(f"unknown weight(s) {unknown}")
        raise ExportError(f"{path}: the model state does not match the network in the config: {'; '.join(parts)}")
    shape_errors = [
        f"{k}: checkpoint {list(state[k].shape)}, config gives {list(v.shape)}"
        for k, v in expected.items()
        if not isinstance(state[k], torch.Tensor) or state[k].shape != v.shape
    ]
    if shape_errors:
        raise ExportError(
            f"{path}: weight shapes disagree with the config (observation size {layout.dim} from obs_layout, "
            f"{num_actions} actions): " + "; ".join(shape_errors)
        )
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise ExportError(f"{path}: non-finite (NaN or inf) values in weight(s) {bad}")


def _num_cost_critics(data: dict[str, Any], path: Path) -> int:
    """One cost critic per cost group, or none for algorithms without them (plain PPO)."""
    state = data["model"] if isinstance(data["model"], dict) else {}
    stacked = state.get("cost_critics.params")
    if isinstance(stacked, torch.Tensor) and stacked.dim() == 2:
        count = stacked.shape[0]  # one row of parameters per group
    else:  # checkpoints with one module per cost critic
        count = len({k.split(".")[1] for k in state if isinstance(k, str) and k.startswith("cost_critics.")})
    groups = len(data["cost_groups"])
    if count not in (0, groups):
        raise ExportError(
            f"{path}: the model holds {count} cost critic(s) but the checkpoint lists {groups} cost group(s)"
        )
    return count


def load_policy_source(path: str | os.PathLike[str]) -> PolicySource:
    """Load a checkpoint file (``weights_only=True``) and rebuild its deterministic actor."""
    path = Path(path)
    try:
        data = load_checkpoint(path)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    unknown = sorted(set(data) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise ExportError(
            f"{path}: unknown checkpoint key(s) {unknown} (this toolkit writes {list(REQUIRED_KEYS)} and optionally "
            f"{list(OPTIONAL_KEYS)})"
        )
    iteration = data["iteration"]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ExportError(f"{path}: iteration is {iteration!r}, expected a non-negative integer")
    config = data["config"]
    if not isinstance(config, dict):
        raise ExportError(f"{path}: config is {type(config).__name__}, expected a mapping")
    network = _network_config(config, path)
    obs_layout = data["obs_layout"]
    if not isinstance(obs_layout, dict) or not {"policy", "critic"} <= set(obs_layout):
        raise ExportError(f"{path}: obs_layout must hold 'policy' and 'critic' layouts")
    try:
        policy_layout = ObservationLayout.from_list(obs_layout["policy"])
        critic_layout = ObservationLayout.from_list(obs_layout["critic"], known_only=False)
    except LayoutError as e:
        raise ExportError(f"{path}: obs_layout: {e}") from None
    action_layout = _action_layout(data, path)
    if not isinstance(data["cost_groups"], dict):
        raise ExportError(f"{path}: cost_groups is {type(data['cost_groups']).__name__}, expected a mapping")
    model = ActorCritic(policy_layout, critic_layout, data["num_actions"], _num_cost_critics(data, path), network)
    state = dict(data["model"]) if isinstance(data["model"], dict) else data["model"]
    if isinstance(state, dict):
        convert_legacy_cost_critics(state, "cost_critics.")
    _check_state_dict(model, state, path, policy_layout, data["num_actions"])
    model.load_state_dict(state, strict=True)
    actor = model.actor.eval()
    for p in actor.parameters():
        p.requires_grad_(False)
    return PolicySource(
        path=path,
        actor=actor,
        policy_layout=policy_layout,
        action_layout=action_layout,
        config=config,
        network=network,
        iteration=iteration,
        robot_contract_hash=str(data["robot_contract_hash"]),
        env_config=data.get("env_config") if isinstance(data.get("env_config"), dict) else None,
        averaged_from=_averaged_from(data, path),
    )


def _averaged_from(data: dict[str, Any], path: Path) -> list[int] | None:
    value = data.get("averaged_from")
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) < 2
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        raise ExportError(f"{path}: averaged_from is {value!r}, expected a list of at least two iterations")
    return [int(i) for i in value]
