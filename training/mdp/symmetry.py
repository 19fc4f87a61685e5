"""Left-right mirror symmetry of the robot's observations and actions (issue 23, lever 1b).

The robot is symmetric about its sagittal (x-z) plane, so a motion to the left mirrored is a
motion to the right: what the policy does on a mirrored observation should be its action
mirrored. The mirror is a signed permutation of each vector, built from names, never from
positions in the vector:

- joints: the left joint takes its right counterpart's value (``LF_HAA`` <-> ``RF_HAA``); the
  sign follows the joint's axis. A reflection in the x-z plane turns a rotation about axis
  ``a = (ax, ay, az)`` into one about ``(-ax, ay, -az)``, so with the same axis on both sides
  (ANYbotics' convention: HAA +x, HFE/KFE +y, the wheels +y) HAA angles change sign and HFE,
  KFE and wheel angles do not;
- base vectors: linear velocity and gravity (x, -y, z); angular velocity (-x, y, -z); the
  command (vx, -vy, -yaw rate);
- height scan: the point at (x, y) takes the value of the point at (x, -y).

``mirror(mirror(v)) == v`` for every vector (tested), and a physically mirrored robot state
produces the mirrored observation (tested against the simulator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from aow_policy.layout import ObservationLayout
from training.sim import anymal_c

_SIDES = {"L": "R", "R": "L"}
# Sign of each base-frame vector term under the reflection y -> -y.
_BASE_TERM_SIGNS: Mapping[str, tuple[float, float, float]] = {
    "base_lin_vel": (1.0, -1.0, 1.0),
    "projected_gravity": (1.0, -1.0, 1.0),
    "base_ang_vel": (-1.0, 1.0, -1.0),  # an axial vector: flips where a polar one does not
    "velocity_commands": (1.0, -1.0, -1.0),  # vx, vy, yaw rate
}


def joint_axes() -> dict[str, tuple[float, float, float]]:
    """Rotation axis of each joint role of the simulated robot (``training.sim.anymal_c``)."""
    leg = anymal_c.LF_LEG  # every leg has the same axes (``anymal_c.mirrored`` keeps them)
    return {"HAA": leg.haa_axis, "HFE": leg.hfe_axis, "KFE": leg.kfe_axis, "WHEEL": anymal_c.WHEEL_AXIS}


def mirrored_joint_name(name: str) -> str:
    """``LF_HAA`` -> ``RF_HAA``: the joint on the other side (the first letter is the side)."""
    if not name or name[0] not in _SIDES:
        raise ValueError(f"joint {name!r}: cannot tell its side (names start with L or R, e.g. LF_HAA)")
    return _SIDES[name[0]] + name[1:]


def joint_mirror_sign(name: str, axes: Mapping[str, Sequence[float]] | None = None) -> float:
    """+1 or -1: the factor between a joint's value and its mirrored counterpart's (see module doc)."""
    axes = joint_axes() if axes is None else axes
    role = name.rsplit("_", 1)[-1]
    if role not in axes:
        raise ValueError(f"joint {name!r}: no axis known for its role {role!r} (known: {sorted(axes)})")
    a = np.asarray(axes[role], dtype=float)
    reflected = np.array([-a[0], a[1], -a[2]])
    if np.allclose(reflected, a):
        return 1.0
    if np.allclose(reflected, -a):
        return -1.0
    raise ValueError(f"joint {name!r}: axis {tuple(a)} is neither along nor across the mirror plane's normal")


@dataclass(frozen=True)
class Mirror:
    """``out[..., i] = sign[i] * x[..., index[i]]``: a signed permutation of the last dimension."""

    index: torch.Tensor  # long [D]
    sign: torch.Tensor  # float [D]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(-1, self.index) * self.sign

    def to(self, device: torch.device | str) -> Mirror:
        return Mirror(self.index.to(device), self.sign.to(device))

    @staticmethod
    def from_lists(index: Sequence[int], sign: Sequence[float]) -> Mirror:
        idx = torch.tensor(list(index), dtype=torch.long)
        if sorted(idx.tolist()) != list(range(len(idx))):
            raise ValueError("a mirror must be a permutation: every entry taken exactly once")
        return Mirror(idx, torch.tensor(list(sign), dtype=torch.float32))


def _joint_parts(joint_names: Sequence[str]) -> tuple[list[int], list[float]]:
    names = list(joint_names)
    index, sign = [], []
    for name in names:
        other = mirrored_joint_name(name)
        if other not in names:
            raise ValueError(f"joint {name!r} has no mirrored counterpart {other!r} among {names}")
        index.append(names.index(other))
        sign.append(joint_mirror_sign(name))
    return index, sign


def joint_mirror(joint_names: Sequence[str]) -> Mirror:
    """The mirror of a vector with one entry per joint of ``joint_names`` (e.g. the actions)."""
    return Mirror.from_lists(*_joint_parts(joint_names))


def scan_mirror_index(points: np.ndarray) -> list[int]:
    """For each height-scan point (x, y), the index of the point at (x, -y)."""
    points = np.asarray(points, dtype=float)
    index = []
    for x, y in points:
        match = np.flatnonzero(np.isclose(points[:, 0], x) & np.isclose(points[:, 1], -y))
        if len(match) != 1:
            raise ValueError(
                f"height scan: the grid has no point mirroring ({x:.3f}, {y:.3f}); it must be symmetric in y"
            )
        index.append(int(match[0]))
    return index


def observation_mirror(
    layout: ObservationLayout, action_joint_names: Sequence[str], scan_points: np.ndarray | None = None
) -> Mirror:
    """The mirror of an observation of ``layout``: joint terms by their joint names
    (``last_action`` by ``action_joint_names``), base terms by their signs, the height scan by
    its grid ``scan_points``. A term it does not know is refused (a wrong mirror would train a
    wrong policy without a sign of it)."""
    index: list[int] = []
    sign: list[float] = []
    for term in layout.terms:
        if term.name in _BASE_TERM_SIGNS:
            idx, sgn = [0, 1, 2], list(_BASE_TERM_SIGNS[term.name])
        elif term.name in ("joint_pos", "joint_vel") or term.name == "last_action":
            joints = term.joints if term.name != "last_action" else tuple(action_joint_names)
            if len(joints) != term.size:
                raise ValueError(f"observation term {term.name!r}: {term.size} entries but {len(joints)} joint names")
            idx, sgn = _joint_parts(joints)
        elif term.name == "height_scan":
            if scan_points is None or len(scan_points) != term.size:
                raise ValueError(f"observation term 'height_scan': needs its {term.size} grid points to mirror")
            idx, sgn = scan_mirror_index(scan_points), [1.0] * term.size
        else:
            raise ValueError(f"observation term {term.name!r}: no mirror known for it")
        if len(idx) != term.size:
            raise ValueError(f"observation term {term.name!r}: expected {len(idx)} entries, the layout has {term.size}")
        index += [term.offset + i for i in idx]
        sign += sgn
    return Mirror.from_lists(index, sign)


@dataclass(frozen=True)
class RobotMirror:
    """The mirrors a training run needs: observations (policy and critic) and actions."""

    observations: Mirror
    actions: Mirror

    def to(self, device: torch.device | str) -> RobotMirror:
        return RobotMirror(self.observations.to(device), self.actions.to(device))


def robot_mirror(env: object) -> RobotMirror:
    """The mirrors of a :class:`training.envs.LocomotionEnv` (its policy observation layout,
    action joints and height-scan grid)."""
    layout = env.obs_spec["policy"]  # type: ignore[attr-defined]
    points = env.scan_points.cpu().numpy() if layout.has("height_scan") else None  # type: ignore[attr-defined]
    joints = list(env.joint_names)  # type: ignore[attr-defined]
    return RobotMirror(observation_mirror(layout, joints, points), joint_mirror(joints))
