"""Build the policy contract (schema in :mod:`aow_policy.policy_contract`) for a checkpoint."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from aow_policy.policy_contract import (
    ACTION_MODES,
    SCHEMA_VERSION,
    robot_constraint_limits,
    robot_height_scan,
)
from aow_policy.robot import Robot
from export.checkpoint_source import ExportError, PolicySource


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the run config (key order and formatting do not matter)."""
    canon = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()


def source_commit(config: dict[str, Any]) -> str | None:
    """The commit the run recorded, else the commit of the toolkit doing the export, else None."""
    for key in ("source_commit", "git_commit", "commit"):
        if isinstance(config.get(key), str) and config[key]:
            return config[key]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def action_entries(source: PolicySource) -> list[dict[str, Any]]:
    layout = source.action_layout
    entries = []
    for i, joint in enumerate(layout["joint_names"]):
        kind = layout["kinds"][i]
        if kind not in ACTION_MODES:
            raise ExportError(f"{source.path}: action_layout.kinds[{i}] ({joint}) is {kind!r}, expected leg or wheel")
        entries.append(
            {
                "joint": str(joint),
                "kind": kind,
                "mode": ACTION_MODES[kind],
                "scale": float(layout["scales"][i]),
                "offset": float(layout["offsets"][i]),
                "low": float(layout["low"][i]),
                "high": float(layout["high"][i]),
            }
        )
    return entries


def trained_leg_actuator(env_config: dict[str, Any] | None) -> str:
    """The leg drive model of the task config a run trained on ("pd" when not recorded: every run
    before the DC-motor model existed simulated PD drives)."""
    return str(((env_config or {}).get("sim") or {}).get("leg_actuator") or "pd")


def action_clip(source: PolicySource) -> float | None:
    """The raw action clip applied before scaling: from the action layout or the task config."""
    clip = source.action_layout.get("clip")
    if clip is None and source.env_config is not None:
        clip = (source.env_config.get("actions") or {}).get("clip")
    return None if clip is None else float(clip)


def build_contract(
    source: PolicySource,
    robot: Robot,
    opset: int,
    verified_max_abs_diff: float,
    verified_observations: dict[str, int],
    exporter: str,
) -> dict[str, Any]:
    layout = source.policy_layout
    height_scan = None
    if layout.has("height_scan"):
        height_scan = robot_height_scan(robot)
        if layout.term("height_scan").size != height_scan["num_points"]:
            raise ExportError(
                f"{source.path}: observation term height_scan has {layout.term('height_scan').size} values but the "
                f"robot's grid has {height_scan['num_points']}"
            )
    clip = action_clip(source)
    return {
        "schema_version": SCHEMA_VERSION,
        "robot": {"name": robot.name, "contract_hash": source.robot_contract_hash},
        "control": {"policy_dt": robot.rates.policy_dt, "physics_dt": robot.rates.physics_dt},
        "actions": action_entries(source),
        "action_clip": clip,
        "observation": {"dim": layout.dim, "terms": layout.to_list()},
        "height_scan": height_scan,
        "constraint_limits": robot_constraint_limits(robot),
        "training": {
            "task": source.task,
            "algorithm": source.algorithm,
            "iteration": source.iteration,
            "config_hash": config_hash(source.config),
            "source_commit": source_commit(source.config),
            "obs_normalization": bool(source.network.normalize_obs),
            "checkpoint": source.path.name,
            # How the run simulated its leg drives (sim2sim runs the policy on the same by default).
            "leg_actuator": trained_leg_actuator(source.env_config),
            # A weight-averaged policy (training.average_checkpoints) names the iterations it is the mean of.
            **({"averaged_from": list(source.averaged_from)} if source.averaged_from else {}),
        },
        "export": {
            "time_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "opset": opset,
            "verified_max_abs_diff": verified_max_abs_diff,
            "verified_observations": dict(verified_observations),
            "exporter": exporter,
        },
    }
