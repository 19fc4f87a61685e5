"""The robot contract: joint names, limits, gains, rates and height-scan grid of the AoW.

One YAML file (``config/aow_c.yaml``) is the single source of truth; this module loads it into
frozen dataclasses and validates it, so a wrong file fails at load with the offending field named
instead of producing a robot that moves wrongly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

SCHEMA_VERSION = 1
JOINT_KINDS = ("leg", "wheel")
HEIGHT_SCAN_ORDERS = ("x_major",)
ENV_VAR = "AOW_ROBOT_CONFIG"


class ContractError(ValueError):
    """The robot contract file is malformed; the message names the field."""


@dataclass(frozen=True)
class Joint:
    name: str
    kind: str
    default_position: float
    position_limits: tuple[float, float] | None  # None: continuous joint (wheels)
    velocity_limit: float
    torque_limit: float
    kp: float
    kd: float
    action_scale: float


@dataclass(frozen=True)
class Constraint:
    """A limit enforced by training costs and watched on the robot (tighter than actuators)."""

    name: str
    limit: float | None
    kinds: tuple[str, ...] = ()
    joints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rates:
    policy_hz: float
    physics_dt: float

    @property
    def policy_dt(self) -> float:
        return 1.0 / self.policy_hz

    @property
    def decimation(self) -> int:
        """Physics steps per policy step."""
        return round(self.policy_dt / self.physics_dt)


@dataclass(frozen=True)
class HeightScanGrid:
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    spacing: float
    order: str

    @property
    def nx(self) -> int:
        return round((self.x_range[1] - self.x_range[0]) / self.spacing) + 1

    @property
    def ny(self) -> int:
        return round((self.y_range[1] - self.y_range[0]) / self.spacing) + 1

    @property
    def num_points(self) -> int:
        return self.nx * self.ny

    @cached_property
    def points(self) -> np.ndarray:
        """(nx*ny, 2) grid points (x, y) in the yaw-aligned base frame, in flattening order.

        This is the one place the flattening order is defined: index = ix * ny + iy.
        """
        xs = self.x_range[0] + self.spacing * np.arange(self.nx)
        ys = self.y_range[0] + self.spacing * np.arange(self.ny)
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        pts = np.stack([gx.ravel(), gy.ravel()], axis=1)
        pts.setflags(write=False)
        return pts


@dataclass(frozen=True)
class CommandRanges:
    lin_vel_x: tuple[float, float]
    lin_vel_y: tuple[float, float]
    ang_vel_yaw: tuple[float, float]

    @property
    def low(self) -> np.ndarray:
        return np.array([self.lin_vel_x[0], self.lin_vel_y[0], self.ang_vel_yaw[0]])

    @property
    def high(self) -> np.ndarray:
        return np.array([self.lin_vel_x[1], self.lin_vel_y[1], self.ang_vel_yaw[1]])


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class Robot:
    name: str
    joints: tuple[Joint, ...]
    constraints: Mapping[str, Constraint]
    rates: Rates
    height_scan: HeightScanGrid
    commands: CommandRanges
    source: str = field(default="<dict>", compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- joint views -------------------------------------------------------------------
    @cached_property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    @cached_property
    def leg_joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints if j.kind == "leg")

    @cached_property
    def wheel_joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints if j.kind == "wheel")

    @cached_property
    def leg_indices(self) -> np.ndarray:
        return _readonly(np.array([i for i, j in enumerate(self.joints) if j.kind == "leg"]))

    @cached_property
    def wheel_indices(self) -> np.ndarray:
        return _readonly(np.array([i for i, j in enumerate(self.joints) if j.kind == "wheel"]))

    def joint(self, name: str) -> Joint:
        for j in self.joints:
            if j.name == name:
                return j
        raise KeyError(f"no joint named {name!r} in robot contract {self.name!r}")

    def index_of(self, names: Sequence[str]) -> np.ndarray:
        """Contract indices of the given joint names (matching by name, never by position)."""
        lookup = {n: i for i, n in enumerate(self.joint_names)}
        missing = [n for n in names if n not in lookup]
        if missing:
            raise KeyError(f"joints not in the robot contract: {missing}")
        return np.array([lookup[n] for n in names], dtype=np.int64)

    # ---- per-joint arrays in contract order ---------------------------------------------
    def _array(self, attr: str) -> np.ndarray:
        return _readonly(np.array([getattr(j, attr) for j in self.joints], dtype=np.float64))

    @cached_property
    def default_positions(self) -> np.ndarray:
        return self._array("default_position")

    @cached_property
    def velocity_limits(self) -> np.ndarray:
        return self._array("velocity_limit")

    @cached_property
    def torque_limits(self) -> np.ndarray:
        return self._array("torque_limit")

    @cached_property
    def kp(self) -> np.ndarray:
        return self._array("kp")

    @cached_property
    def kd(self) -> np.ndarray:
        return self._array("kd")

    @cached_property
    def action_scales(self) -> np.ndarray:
        return self._array("action_scale")

    @cached_property
    def position_lower(self) -> np.ndarray:
        """Lower position limits; -inf for continuous joints."""
        return _readonly(np.array([j.position_limits[0] if j.position_limits else -np.inf for j in self.joints]))

    @cached_property
    def position_upper(self) -> np.ndarray:
        return _readonly(np.array([j.position_limits[1] if j.position_limits else np.inf for j in self.joints]))

    def _constraint_limits(self, name: str) -> np.ndarray:
        c = self.constraints[name]
        limits = [c.limit if (j.kind in c.kinds or j.name in c.joints) else np.inf for j in self.joints]
        return _readonly(np.array(limits, dtype=np.float64))

    @cached_property
    def constraint_velocity_limits(self) -> np.ndarray:
        """Joint-speed constraint per joint (rad/s); +inf where the joint is not constrained."""
        return self._constraint_limits("joint_speed")

    @cached_property
    def constraint_torque_limits(self) -> np.ndarray:
        """Joint-torque constraint per joint (N·m); +inf where the joint is not constrained."""
        return self._constraint_limits("joint_torque")

    @cached_property
    def hip_joint_indices(self) -> np.ndarray:
        return _readonly(self.index_of(self.constraints["hip_position"].joints))

    # ---- identity ------------------------------------------------------------------------
    @cached_property
    def contract_hash(self) -> str:
        """sha256 of the canonical JSON of the contract's content (not of its formatting)."""
        canon = json.dumps(self.raw, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.raw))


# ---- loading and validation ----------------------------------------------------------------


def default_config_path() -> Path:
    """Where the contract lives: $AOW_ROBOT_CONFIG, the source tree, or the ROS share dir."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent / "config" / "aow_c.yaml"
    if here.is_file():
        return here
    try:  # installed by colcon: share/aow_policy/config
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory("aow_policy")) / "config" / "aow_c.yaml"
    except Exception:  # any failure means "not a ROS install"
        import sys

        return Path(sys.prefix) / "share" / "aow_policy" / "config" / "aow_c.yaml"


def load_robot(path: str | os.PathLike[str] | None = None) -> Robot:
    """Load and validate the robot contract (default: the package's ``config/aow_c.yaml``)."""
    p = Path(path) if path is not None else default_config_path()
    try:
        text = p.read_text()
    except OSError as e:
        raise ContractError(f"cannot read robot contract {p}: {e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ContractError(f"robot contract {p} is not valid YAML: {e}") from e
    return robot_from_dict(data, source=str(p))


def _keys(d: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> None:
    if not isinstance(d, Mapping):
        raise ContractError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = set(d) - required - optional
    if unknown:
        raise ContractError(f"{where}: unknown key(s) {sorted(unknown)}")
    missing = required - set(d)
    if missing:
        raise ContractError(f"{where}: missing key(s) {sorted(missing)}")


def _num(v: Any, where: str, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ContractError(f"{where}: expected a finite number, got {v!r}")
    if positive and v <= 0:
        raise ContractError(f"{where}: must be positive, got {v}")
    if nonneg and v < 0:
        raise ContractError(f"{where}: must not be negative, got {v}")
    return float(v)


def _range(v: Any, where: str) -> tuple[float, float]:
    if not isinstance(v, Sequence) or isinstance(v, str) or len(v) != 2:
        raise ContractError(f"{where}: expected [lower, upper], got {v!r}")
    lo, hi = _num(v[0], f"{where}[0]"), _num(v[1], f"{where}[1]")
    if lo > hi:
        raise ContractError(f"{where}: lower {lo} is greater than upper {hi}")
    return lo, hi


_JOINT_KEYS = {
    "name",
    "kind",
    "default_position",
    "position_limits",
    "velocity_limit",
    "torque_limit",
    "kp",
    "kd",
    "action_scale",
}
_LEGS = ("LF", "RF", "LH", "RH")
REQUIRED_JOINTS = tuple(f"{leg}_{j}" for leg in _LEGS for j in ("HAA", "HFE", "KFE")) + tuple(
    f"{leg}_WHEEL" for leg in _LEGS
)


def _joint(d: Any, i: int) -> Joint:
    where = f"joints[{i}]"
    _keys(d, where, _JOINT_KEYS)
    name = d["name"]
    if not isinstance(name, str) or not name:
        raise ContractError(f"{where}.name: expected a non-empty string, got {name!r}")
    where = f"joints[{i}] ({name})"
    if d["kind"] not in JOINT_KINDS:
        raise ContractError(f"{where}.kind: expected one of {JOINT_KINDS}, got {d['kind']!r}")
    limits = None
    if d["position_limits"] is not None:
        limits = _range(d["position_limits"], f"{where}.position_limits")
    elif d["kind"] == "leg":
        raise ContractError(f"{where}.position_limits: a leg joint needs position limits")
    default = _num(d["default_position"], f"{where}.default_position")
    if limits and not limits[0] <= default <= limits[1]:
        raise ContractError(f"{where}.default_position: {default} is outside position_limits {list(limits)}")
    kp = _num(d["kp"], f"{where}.kp", nonneg=True)
    kd = _num(d["kd"], f"{where}.kd", nonneg=True)
    if kp == 0 and kd == 0:
        raise ContractError(f"{where}: kp and kd are both zero (the joint would be limp)")
    return Joint(
        name=name,
        kind=d["kind"],
        default_position=default,
        position_limits=limits,
        velocity_limit=_num(d["velocity_limit"], f"{where}.velocity_limit", positive=True),
        torque_limit=_num(d["torque_limit"], f"{where}.torque_limit", positive=True),
        kp=kp,
        kd=kd,
        action_scale=_num(d["action_scale"], f"{where}.action_scale", positive=True),
    )


def robot_from_dict(data: Any, source: str = "<dict>") -> Robot:
    """Validate a parsed contract and build the Robot; errors name the offending field."""
    try:
        return _robot_from_dict(data, source)
    except ContractError as e:
        raise ContractError(f"{source}: {e}") from None


def _robot_from_dict(data: Any, source: str) -> Robot:
    _keys(data, "contract", {"schema_version", "name", "joints", "constraints", "rates", "height_scan", "commands"})
    if data["schema_version"] != SCHEMA_VERSION:
        raise ContractError(f"schema_version: expected {SCHEMA_VERSION}, got {data['schema_version']!r}")
    if not isinstance(data["joints"], list) or not data["joints"]:
        raise ContractError("joints: expected a non-empty list")
    joints = tuple(_joint(d, i) for i, d in enumerate(data["joints"]))
    names = [j.name for j in joints]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ContractError(f"joints: duplicate joint name(s) {dupes}")
    missing = [n for n in REQUIRED_JOINTS if n not in names]
    if missing:
        raise ContractError(f"joints: missing joint(s) {missing}")
    extra = [n for n in names if n not in REQUIRED_JOINTS]
    if extra:
        raise ContractError(f"joints: unknown joint(s) {extra}")

    cons: dict[str, Constraint] = {}
    _keys(data["constraints"], "constraints", {"joint_speed", "joint_torque", "hip_position"})
    for cname in ("joint_speed", "joint_torque"):
        c = data["constraints"][cname]
        _keys(c, f"constraints.{cname}", {"limit", "kinds"})
        kinds = tuple(c["kinds"])
        bad = [k for k in kinds if k not in JOINT_KINDS]
        if bad or not kinds:
            raise ContractError(f"constraints.{cname}.kinds: expected kinds from {JOINT_KINDS}, got {c['kinds']!r}")
        cons[cname] = Constraint(cname, _num(c["limit"], f"constraints.{cname}.limit", positive=True), kinds=kinds)
    hip = data["constraints"]["hip_position"]
    _keys(hip, "constraints.hip_position", {"joints"})
    hip_joints = tuple(hip["joints"])
    for n in hip_joints:
        if n not in names:
            raise ContractError(f"constraints.hip_position.joints: {n!r} is not a joint of the contract")
        if joints[names.index(n)].position_limits is None:
            raise ContractError(f"constraints.hip_position.joints: {n!r} has no position limits")
    cons["hip_position"] = Constraint("hip_position", None, joints=hip_joints)

    r = data["rates"]
    _keys(r, "rates", {"policy_hz", "physics_dt"})
    rates = Rates(
        policy_hz=_num(r["policy_hz"], "rates.policy_hz", positive=True),
        physics_dt=_num(r["physics_dt"], "rates.physics_dt", positive=True),
    )
    if rates.physics_dt > 0.005:
        raise ContractError(f"rates.physics_dt: must be 0.005 s or finer, got {rates.physics_dt}")
    if abs(rates.decimation * rates.physics_dt - rates.policy_dt) > 1e-9:
        raise ContractError(
            f"rates: policy period {rates.policy_dt} s is not a whole number of physics steps of {rates.physics_dt} s"
        )

    h = data["height_scan"]
    _keys(h, "height_scan", {"x_range", "y_range", "spacing", "order"})
    spacing = _num(h["spacing"], "height_scan.spacing", positive=True)
    grid = HeightScanGrid(
        _range(h["x_range"], "height_scan.x_range"), _range(h["y_range"], "height_scan.y_range"), spacing, h["order"]
    )
    if grid.order not in HEIGHT_SCAN_ORDERS:
        raise ContractError(f"height_scan.order: expected one of {HEIGHT_SCAN_ORDERS}, got {grid.order!r}")
    for axis, rng in (("x_range", grid.x_range), ("y_range", grid.y_range)):
        steps = (rng[1] - rng[0]) / spacing
        if abs(steps - round(steps)) > 1e-6:
            raise ContractError(f"height_scan.{axis}: {list(rng)} is not a whole number of spacings {spacing}")

    c = data["commands"]
    _keys(c, "commands", {"lin_vel_x", "lin_vel_y", "ang_vel_yaw"})
    commands = CommandRanges(*(_range(c[k], f"commands.{k}") for k in ("lin_vel_x", "lin_vel_y", "ang_vel_yaw")))

    return Robot(
        name=str(data["name"]),
        joints=joints,
        constraints=cons,
        rates=rates,
        height_scan=grid,
        commands=commands,
        source=source,
        raw=json.loads(json.dumps(data)),
    )
