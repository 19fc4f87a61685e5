"""The policy contract: what an exported policy's input and output vectors mean.

``aow-export`` writes one dict into the ONNX ``metadata_props`` (key :data:`METADATA_KEY`, as
JSON) and into a sidecar ``policy.yaml``; this module parses and validates that dict and
compares it with a robot contract, so a policy trained for another joint order, control period
or height-scan grid is refused before it drives a joint. Schema (version 1)::

    schema_version: 1
    robot: {name, contract_hash}
    control: {policy_dt, physics_dt}
    actions: [{joint, kind, mode, scale, offset, low, high}, ...]   # action order
    action_clip: float | null          # raw action clip before scaling
    observation: {dim, terms: ObservationLayout.to_list()}
    height_scan: {x_range, y_range, spacing, order, num_points, nx, ny} | null
    constraint_limits: {joint_speed, joint_torque}
    training: {task, algorithm, iteration, config_hash, source_commit, obs_normalization, ...}
    export: {time_utc, opset, verified_max_abs_diff, ...}

Command for action i: ``clip(offset + scale * clip(action, -action_clip, action_clip), low, high)``;
leg joints are position targets around the default pose, wheels velocity targets.
Depends on numpy and pyyaml only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from aow_policy.layout import LayoutError, ObservationLayout
from aow_policy.robot import Robot

SCHEMA_VERSION = 1
METADATA_KEY = "aow_policy_contract"
ACTION_MODES = {"leg": "position", "wheel": "velocity"}
CONSTRAINT_NAMES = ("joint_speed", "joint_torque")
# Numbers pass through float32 tensors in training; anything closer than this is the same value.
TOLERANCE = 1e-6


class PolicyContractError(ValueError):
    """A policy contract is malformed or does not fit the robot; the message names each problem."""


@dataclass(frozen=True)
class ActionTerm:
    joint: str
    kind: str
    mode: str
    scale: float
    offset: float
    low: float
    high: float


@dataclass(frozen=True)
class PolicyContract:
    """A validated contract; ``raw`` is the dict exactly as stored."""

    raw: Mapping[str, Any]
    robot_name: str
    robot_contract_hash: str
    policy_dt: float
    physics_dt: float
    actions: tuple[ActionTerm, ...]
    action_clip: float | None
    observation: ObservationLayout
    height_scan: Mapping[str, Any] | None
    constraint_limits: Mapping[str, float]

    @property
    def obs_dim(self) -> int:
        return self.observation.dim

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Joints driven by the actions, in action order."""
        return tuple(a.joint for a in self.actions)

    def _column(self, attr: str) -> np.ndarray:
        return np.array([getattr(a, attr) for a in self.actions], dtype=np.float64)

    @property
    def action_scales(self) -> np.ndarray:
        return self._column("scale")

    @property
    def action_offsets(self) -> np.ndarray:
        return self._column("offset")

    @property
    def action_low(self) -> np.ndarray:
        return self._column("low")

    @property
    def action_high(self) -> np.ndarray:
        return self._column("high")

    def commands(self, actions: np.ndarray) -> np.ndarray:
        """Joint targets (positions for legs, velocities for wheels) in action order."""
        a = np.asarray(actions, dtype=np.float64)
        if self.action_clip is not None:
            a = np.clip(a, -self.action_clip, self.action_clip)
        return np.clip(self.action_offsets + self.action_scales * a, self.action_low, self.action_high)


# ---- parsing -----------------------------------------------------------------------------------


def _mapping(d: Any, where: str, required: Sequence[str], extensible: bool = False) -> Mapping[str, Any]:
    """Check keys; ``extensible`` sections (training, export) may carry extra informative keys."""
    if not isinstance(d, Mapping):
        raise PolicyContractError(f"{where}: expected a mapping, got {type(d).__name__}")
    missing = [k for k in required if k not in d]
    if missing:
        raise PolicyContractError(f"{where}: missing key(s) {missing}")
    unknown = sorted(set(d) - set(required))
    if unknown and not extensible:
        raise PolicyContractError(f"{where}: unknown key(s) {unknown}")
    return d


def _number(v: Any, where: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise PolicyContractError(f"{where}: expected a finite number, got {v!r}")
    if positive and v <= 0:
        raise PolicyContractError(f"{where}: must be positive, got {v!r}")
    return float(v)


def _pair(v: Any, where: str) -> tuple[float, float]:
    if not isinstance(v, Sequence) or isinstance(v, str) or len(v) != 2:
        raise PolicyContractError(f"{where}: expected [lower, upper], got {v!r}")
    lo, hi = _number(v[0], f"{where}[0]"), _number(v[1], f"{where}[1]")
    if lo > hi:
        raise PolicyContractError(f"{where}: lower {lo} is greater than upper {hi}")
    return lo, hi


def _string(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise PolicyContractError(f"{where}: expected a non-empty string, got {v!r}")
    return v


def _action(d: Any, i: int) -> ActionTerm:
    where = f"actions[{i}]"
    _mapping(d, where, ("joint", "kind", "mode", "scale", "offset", "low", "high"))
    joint = _string(d["joint"], f"{where}.joint")
    where = f"actions[{i}] ({joint})"
    kind = d["kind"]
    if kind not in ACTION_MODES:
        raise PolicyContractError(f"{where}.kind: expected one of {sorted(ACTION_MODES)}, got {kind!r}")
    if d["mode"] != ACTION_MODES[kind]:
        raise PolicyContractError(f"{where}.mode: a {kind} action is a {ACTION_MODES[kind]} target, got {d['mode']!r}")
    low, high = _pair([d["low"], d["high"]], f"{where}.[low, high]")
    return ActionTerm(
        joint=joint,
        kind=kind,
        mode=d["mode"],
        scale=_number(d["scale"], f"{where}.scale", positive=True),
        offset=_number(d["offset"], f"{where}.offset"),
        low=low,
        high=high,
    )


def _height_scan(d: Any, layout: ObservationLayout) -> Mapping[str, Any] | None:
    if d is None:
        if layout.has("height_scan"):
            raise PolicyContractError("height_scan: null, but the observation has a height_scan term")
        return None
    _mapping(d, "height_scan", ("x_range", "y_range", "spacing", "order", "num_points", "nx", "ny"))
    x_range, y_range = _pair(d["x_range"], "height_scan.x_range"), _pair(d["y_range"], "height_scan.y_range")
    spacing = _number(d["spacing"], "height_scan.spacing", positive=True)
    if d["order"] != "x_major":
        raise PolicyContractError(f"height_scan.order: expected 'x_major' (index = ix * ny + iy), got {d['order']!r}")
    nx = round((x_range[1] - x_range[0]) / spacing) + 1
    ny = round((y_range[1] - y_range[0]) / spacing) + 1
    if (d["nx"], d["ny"], d["num_points"]) != (nx, ny, nx * ny):
        raise PolicyContractError(
            f"height_scan: nx={d['nx']}, ny={d['ny']}, num_points={d['num_points']} but the ranges and spacing "
            f"give {nx} x {ny} = {nx * ny}"
        )
    if not layout.has("height_scan"):
        raise PolicyContractError("height_scan: a grid is given, but the observation has no height_scan term")
    if layout.term("height_scan").size != nx * ny:
        raise PolicyContractError(
            f"observation term height_scan has {layout.term('height_scan').size} values but the grid has {nx * ny}"
        )
    return d


def parse_contract(data: Any) -> PolicyContract:
    """Validate a contract dict (e.g. from JSON metadata or policy.yaml); errors name the field."""
    top = ("schema_version", "robot", "control", "actions", "action_clip", "observation", "height_scan")
    top += ("constraint_limits", "training", "export")
    _mapping(data, "policy contract", top)
    if data["schema_version"] != SCHEMA_VERSION:
        raise PolicyContractError(
            f"schema_version: this runtime reads version {SCHEMA_VERSION}, got {data['schema_version']!r}"
        )
    robot = _mapping(data["robot"], "robot", ("name", "contract_hash"))
    control = _mapping(data["control"], "control", ("policy_dt", "physics_dt"))
    policy_dt = _number(control["policy_dt"], "control.policy_dt", positive=True)
    physics_dt = _number(control["physics_dt"], "control.physics_dt", positive=True)

    if not isinstance(data["actions"], list) or not data["actions"]:
        raise PolicyContractError("actions: expected a non-empty list")
    actions = tuple(_action(d, i) for i, d in enumerate(data["actions"]))
    names = [a.joint for a in actions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PolicyContractError(f"actions: joint(s) {dupes} driven by more than one action")
    clip = data["action_clip"]
    action_clip = None if clip is None else _number(clip, "action_clip", positive=True)

    obs = _mapping(data["observation"], "observation", ("dim", "terms"))
    if not isinstance(obs["terms"], list):
        raise PolicyContractError("observation.terms: expected a list of terms")
    try:
        layout = ObservationLayout.from_list(obs["terms"])
    except LayoutError as e:
        raise PolicyContractError(f"observation.terms: {e}") from None
    if obs["dim"] != layout.dim:
        raise PolicyContractError(f"observation.dim: {obs['dim']!r} but the terms add up to {layout.dim}")
    if layout.has("last_action") and layout.term("last_action").size != len(actions):
        raise PolicyContractError(
            f"observation term last_action has {layout.term('last_action').size} values for {len(actions)} actions"
        )

    limits = _mapping(data["constraint_limits"], "constraint_limits", CONSTRAINT_NAMES)
    _mapping(data["training"], "training", ("task", "algorithm", "iteration", "config_hash"), extensible=True)
    _mapping(data["export"], "export", ("time_utc", "opset", "verified_max_abs_diff"), extensible=True)
    return PolicyContract(
        raw=data,
        robot_name=_string(robot["name"], "robot.name"),
        robot_contract_hash=_string(robot["contract_hash"], "robot.contract_hash"),
        policy_dt=policy_dt,
        physics_dt=physics_dt,
        actions=actions,
        action_clip=action_clip,
        observation=layout,
        height_scan=_height_scan(data["height_scan"], layout),
        constraint_limits={k: _number(limits[k], f"constraint_limits.{k}", positive=True) for k in CONSTRAINT_NAMES},
    )


# ---- the robot's side ---------------------------------------------------------------------------


def robot_action_term(robot: Robot, joint_name: str) -> ActionTerm:
    """The action term the robot contract implies for a joint (scale, default pose, limits)."""
    j = robot.joint(joint_name)
    if j.kind == "leg":
        low, high = j.position_limits
        return ActionTerm(j.name, j.kind, ACTION_MODES[j.kind], j.action_scale, j.default_position, low, high)
    return ActionTerm(j.name, j.kind, ACTION_MODES[j.kind], j.action_scale, 0.0, -j.velocity_limit, j.velocity_limit)


def robot_height_scan(robot: Robot) -> dict[str, Any]:
    g = robot.height_scan
    return {
        "x_range": list(g.x_range),
        "y_range": list(g.y_range),
        "spacing": g.spacing,
        "order": g.order,
        "num_points": g.num_points,
        "nx": g.nx,
        "ny": g.ny,
    }


def robot_constraint_limits(robot: Robot) -> dict[str, float]:
    return {name: robot.constraints[name].limit for name in CONSTRAINT_NAMES}


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) > TOLERANCE * max(1.0, abs(a), abs(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b, strict=True))
    return a != b


def _joint_order_differences(policy: Sequence[str], robot: Sequence[str]) -> list[str]:
    missing = [n for n in robot if n not in policy]
    unknown = [n for n in policy if n not in robot]
    out = []
    if missing:
        out.append(f"joint names: the robot's joint(s) {missing} are not driven by the policy")
    if unknown:
        out.append(f"joint names: the policy drives joint(s) {unknown} that the robot does not have")
    if not out and list(policy) != list(robot):
        moved = [f"{i}: policy {p}, robot {r}" for i, (p, r) in enumerate(zip(policy, robot, strict=True)) if p != r]
        out.append(f"joint order differs at action index {'; '.join(moved)}")
    return out


def contract_differences(contract: PolicyContract, robot: Robot) -> list[str]:
    """Every way the policy does not fit the robot contract, one human-readable line each."""
    diffs: list[str] = []
    if contract.robot_name != robot.name:
        diffs.append(f"robot name: policy {contract.robot_name!r}, robot {robot.name!r}")
    if contract.robot_contract_hash != robot.contract_hash:
        diffs.append(
            f"contract hash: policy trained against {contract.robot_contract_hash[:16]}…, "
            f"robot contract is {robot.contract_hash[:16]}…"
        )
    diffs += _joint_order_differences(contract.joint_names, robot.joint_names)
    for a in contract.actions:
        if a.joint not in robot.joint_names:
            continue
        expected = robot_action_term(robot, a.joint)
        for field in ("kind", "mode", "scale", "offset", "low", "high"):
            if _differs(getattr(a, field), getattr(expected, field)):
                diffs.append(
                    f"action {a.joint}.{field}: policy {getattr(a, field)!r}, robot {getattr(expected, field)!r}"
                )
    for t in contract.observation.terms:
        unknown = [j for j in t.joints if j not in robot.joint_names]
        if unknown:
            diffs.append(f"observation term {t.name}: joint(s) {unknown} are not in the robot contract")
    for name, value in (("policy_dt", robot.rates.policy_dt), ("physics_dt", robot.rates.physics_dt)):
        if _differs(getattr(contract, name), value):
            diffs.append(f"control period {name}: policy {getattr(contract, name)!r} s, robot {value!r} s")
    if contract.height_scan is not None:
        grid = robot_height_scan(robot)
        for key, value in grid.items():
            if _differs(contract.height_scan[key], value):
                diffs.append(f"height-scan grid {key}: policy {contract.height_scan[key]!r}, robot {value!r}")
    for name, value in robot_constraint_limits(robot).items():
        if _differs(contract.constraint_limits[name], value):
            diffs.append(
                f"constraint limit {name}: policy trained with {contract.constraint_limits[name]!r}, robot {value!r}"
            )
    return diffs


def check_fits_robot(contract: PolicyContract, robot: Robot, source: str = "policy") -> None:
    """Raise :class:`PolicyContractError` listing every difference, if there is any."""
    diffs = contract_differences(contract, robot)
    if diffs:
        lines = "\n  - ".join(diffs)
        raise PolicyContractError(
            f"{source} does not fit robot contract {robot.source} ({len(diffs)} difference(s)):\n  - {lines}"
        )


# ---- storage ------------------------------------------------------------------------------------


def contract_to_json(data: Mapping[str, Any]) -> str:
    """The ONNX metadata value; ``allow_nan=False`` because JSON has no inf or NaN."""
    return json.dumps(data, allow_nan=False, separators=(",", ":"))


def contract_to_yaml(data: Mapping[str, Any]) -> str:
    header = "# AoW policy contract (the same dict as the ONNX metadata key 'aow_policy_contract')\n"
    # Flow style for collections of scalars keeps one action or observation term per line.
    plain = json.loads(contract_to_json(data))
    return header + yaml.safe_dump(plain, sort_keys=False, width=200, default_flow_style=None)


def sidecar_path(onnx_path: str | os.PathLike[str]) -> Path:
    """policy.onnx -> policy.yaml"""
    return Path(onnx_path).with_suffix(".yaml")


def read_sidecar(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise PolicyContractError(f"cannot read policy contract {path}: {e}") from None
    if not isinstance(data, dict):
        raise PolicyContractError(f"{path}: expected a policy contract mapping, got {type(data).__name__}")
    return data
