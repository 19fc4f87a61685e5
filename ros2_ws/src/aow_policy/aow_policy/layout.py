"""Observation and action layouts: how a policy's input vector is assembled and its output read.

Training writes these (from the task config), export stores them in the ONNX metadata, and the
runtime rebuilds observations from them, so one policy's layout travels with the policy instead
of living in people's heads. Terms are identified by name; joint terms list their joints by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Observation terms the toolkit knows how to build, both in simulation and on the robot.
# name -> meaning (raw value, before clip and scale)
KNOWN_OBS_TERMS: dict[str, str] = {
    "base_lin_vel": "base linear velocity in the base frame (m/s), 3",
    "base_ang_vel": "base angular velocity in the base frame (rad/s), 3",
    "projected_gravity": "unit gravity vector in the base frame, 3",
    "velocity_commands": "commanded (vx, vy, yaw rate) in the base frame, 3",
    "joint_pos": "joint position minus default position (rad), one per listed joint",
    "joint_vel": "joint velocity (rad/s), one per listed joint",
    "last_action": "the policy's previous raw action, one per action",
    "height_scan": "base_z - height_offset - terrain height at each grid point (m), grid points",
}


class LayoutError(ValueError):
    """A layout is malformed or unknown; the message names the term and field."""


@dataclass(frozen=True)
class ObsTerm:
    """One slice of the observation vector: value = clip(raw, -clip, clip) * scale."""

    name: str
    size: int
    offset: int
    scale: float = 1.0
    clip: float | None = None
    joints: tuple[str, ...] = ()  # joint terms: which joints, in this order, matched by name
    params: Mapping[str, float] = field(default_factory=dict)  # e.g. height_scan: height_offset

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["joints"] = list(self.joints)
        d["params"] = dict(self.params)
        return d


@dataclass(frozen=True)
class ObservationLayout:
    """Ordered observation terms; offsets are contiguous from 0."""

    terms: tuple[ObsTerm, ...]

    @property
    def dim(self) -> int:
        return sum(t.size for t in self.terms)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms)

    def term(self, name: str) -> ObsTerm:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"observation layout has no term {name!r} (terms: {list(self.names)})")

    def has(self, name: str) -> bool:
        return name in self.names

    def to_list(self) -> list[dict[str, Any]]:
        return [t.to_dict() for t in self.terms]

    @classmethod
    def build(cls, specs: Iterable[Mapping[str, Any]]) -> ObservationLayout:
        """Build from term specs without offsets (they are assigned in order)."""
        terms, offset = [], 0
        for spec in specs:
            spec = dict(spec)
            spec.pop("offset", None)
            terms.append(_term(spec, offset))
            offset += terms[-1].size
        return cls(tuple(terms))

    @classmethod
    def from_list(cls, items: Sequence[Mapping[str, Any]], known_only: bool = True) -> ObservationLayout:
        """Parse a stored layout; refuses unknown terms and non-contiguous offsets."""
        terms, offset = [], 0
        for i, item in enumerate(items):
            if "offset" not in item:
                raise LayoutError(f"observation term {i} ({item.get('name')!r}): missing 'offset'")
            if item["offset"] != offset:
                raise LayoutError(
                    f"observation term {i} ({item.get('name')!r}): offset {item['offset']} but the previous "
                    f"terms end at {offset}"
                )
            terms.append(_term(dict(item), offset))
            if known_only and terms[-1].name not in KNOWN_OBS_TERMS:
                raise LayoutError(f"observation term {terms[-1].name!r} is unknown (known: {sorted(KNOWN_OBS_TERMS)})")
            offset += terms[-1].size
        return cls(tuple(terms))


_TERM_KEYS = {"name", "size", "scale", "clip", "joints", "params"}


def _term(spec: dict[str, Any], offset: int) -> ObsTerm:
    spec.pop("offset", None)
    name = spec.get("name")
    unknown = set(spec) - _TERM_KEYS
    if unknown:
        raise LayoutError(f"observation term {name!r}: unknown key(s) {sorted(unknown)}")
    if not isinstance(name, str) or not name:
        raise LayoutError(f"observation term at offset {offset}: 'name' must be a non-empty string")
    size = spec.get("size")
    if not isinstance(size, int) or size <= 0:
        raise LayoutError(f"observation term {name!r}: 'size' must be a positive integer, got {size!r}")
    joints = tuple(spec.get("joints") or ())
    if joints and len(joints) != size:
        raise LayoutError(f"observation term {name!r}: {len(joints)} joints listed but size is {size}")
    clip = spec.get("clip")
    if clip is not None and not clip > 0:
        raise LayoutError(f"observation term {name!r}: 'clip' must be positive or null, got {clip!r}")
    return ObsTerm(
        name=name,
        size=size,
        offset=offset,
        scale=float(spec.get("scale", 1.0)),
        clip=None if clip is None else float(clip),
        joints=joints,
        params={k: float(v) for k, v in (spec.get("params") or {}).items()},
    )
