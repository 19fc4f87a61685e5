"""Observation vectors assembled from the policy's own layout (term names -> builders).

The policy contract lists its observation terms by name (with joints by name); each name maps to
a builder here, so a policy with another layout, joint subset or scaling needs no code change,
and a policy asking for a term this runtime cannot build is refused when it is loaded.
Every term is ``clip(raw, -clip, clip) * scale`` of the raw value described in
:data:`aow_policy.layout.KNOWN_OBS_TERMS`. Buffers are preallocated: :meth:`build` allocates nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aow_policy.layout import KNOWN_OBS_TERMS, ObservationLayout, ObsTerm
from aow_policy.robot import Robot


class ObservationError(ValueError):
    """The observation layout cannot be built on this robot; the message names the term."""


@dataclass
class RobotInputs:
    """The latest robot state in contract joint order, as the observation builders read it."""

    num_joints: int
    num_actions: int
    num_scan_points: int
    joint_position: np.ndarray = field(init=False)
    joint_velocity: np.ndarray = field(init=False)
    base_position: np.ndarray = field(init=False)
    base_linear_velocity: np.ndarray = field(init=False)  # base frame
    base_angular_velocity: np.ndarray = field(init=False)  # base frame
    projected_gravity: np.ndarray = field(init=False)
    command: np.ndarray = field(init=False)  # (vx, vy, yaw rate)
    last_action: np.ndarray = field(init=False)  # raw (clipped, unscaled) previous action
    heights: np.ndarray = field(init=False)  # terrain height at each scan point (map frame)

    def __post_init__(self) -> None:
        self.joint_position = np.zeros(self.num_joints)
        self.joint_velocity = np.zeros(self.num_joints)
        self.base_position = np.zeros(3)
        self.base_linear_velocity = np.zeros(3)
        self.base_angular_velocity = np.zeros(3)
        self.projected_gravity = np.array([0.0, 0.0, -1.0])
        self.command = np.zeros(3)
        self.last_action = np.zeros(self.num_actions)
        self.heights = np.zeros(self.num_scan_points)


TermWriter = Callable[[RobotInputs, np.ndarray], None]
TermFactory = Callable[[ObsTerm, Robot, int], TermWriter]


def _fixed(size: int, attr: str) -> TermFactory:
    def factory(term: ObsTerm, robot: Robot, num_actions: int) -> TermWriter:
        if term.size != size:
            raise ObservationError(f"observation term {term.name!r}: size {term.size}, this term has {size} values")

        def write(inputs: RobotInputs, out: np.ndarray) -> None:
            np.copyto(out, getattr(inputs, attr))

        return write

    return factory


def _joint_indices(term: ObsTerm, robot: Robot) -> np.ndarray:
    names = term.joints or robot.joint_names
    if len(names) != term.size:
        raise ObservationError(
            f"observation term {term.name!r}: size {term.size} but it lists no joints and the robot has "
            f"{len(robot.joint_names)}"
        )
    try:
        return robot.index_of(names)
    except KeyError as e:
        raise ObservationError(f"observation term {term.name!r}: {e.args[0]}") from None


def _joint_pos(term: ObsTerm, robot: Robot, num_actions: int) -> TermWriter:
    idx = _joint_indices(term, robot)
    default = robot.default_positions[idx].copy()

    def write(inputs: RobotInputs, out: np.ndarray) -> None:
        inputs.joint_position.take(idx, out=out, mode="clip")
        np.subtract(out, default, out=out)

    return write


def _joint_vel(term: ObsTerm, robot: Robot, num_actions: int) -> TermWriter:
    idx = _joint_indices(term, robot)

    def write(inputs: RobotInputs, out: np.ndarray) -> None:
        inputs.joint_velocity.take(idx, out=out, mode="clip")

    return write


def _last_action(term: ObsTerm, robot: Robot, num_actions: int) -> TermWriter:
    if term.size != num_actions:
        raise ObservationError(f"observation term 'last_action': size {term.size} for {num_actions} actions")

    def write(inputs: RobotInputs, out: np.ndarray) -> None:
        np.copyto(out, inputs.last_action)

    return write


def _height_scan(term: ObsTerm, robot: Robot, num_actions: int) -> TermWriter:
    if term.size != robot.height_scan.num_points:
        raise ObservationError(
            f"observation term 'height_scan': size {term.size}, the robot's grid has {robot.height_scan.num_points}"
        )
    if "height_offset" not in term.params:
        raise ObservationError("observation term 'height_scan': params.height_offset is missing")
    offset = float(term.params["height_offset"])

    def write(inputs: RobotInputs, out: np.ndarray) -> None:
        # base_z - height_offset - terrain height
        np.subtract(inputs.base_position[2] - offset, inputs.heights, out=out)

    return write


TERM_BUILDERS: dict[str, TermFactory] = {
    "base_lin_vel": _fixed(3, "base_linear_velocity"),
    "base_ang_vel": _fixed(3, "base_angular_velocity"),
    "projected_gravity": _fixed(3, "projected_gravity"),
    "velocity_commands": _fixed(3, "command"),
    "joint_pos": _joint_pos,
    "joint_vel": _joint_vel,
    "last_action": _last_action,
    "height_scan": _height_scan,
}
assert set(TERM_BUILDERS) == set(KNOWN_OBS_TERMS), "every known term needs a runtime builder"


class ObservationBuilder:
    """Builds the float32 observation vector of a layout from :class:`RobotInputs`.

    Each term writes its raw value into its slice of one float64 work vector; clip and scale are
    then applied to the whole vector at once (three numpy calls), writing the float32 result.
    """

    def __init__(self, layout: ObservationLayout, robot: Robot, num_actions: int):
        self.layout = layout
        dim = layout.dim
        self._work = np.zeros(dim)
        self.observation = np.zeros(dim, dtype=np.float32)
        self._low = np.full(dim, -np.inf)
        self._high = np.full(dim, np.inf)
        self._scale = np.ones(dim)
        self._steps: list[tuple[TermWriter, np.ndarray]] = []
        for term in layout.terms:
            factory = TERM_BUILDERS.get(term.name)
            if factory is None:
                raise ObservationError(
                    f"observation term {term.name!r} has no builder in this runtime (known: {sorted(TERM_BUILDERS)})"
                )
            self._steps.append((factory(term, robot, num_actions), self._work[term.slice]))
            if term.clip is not None:
                self._low[term.slice], self._high[term.slice] = -term.clip, term.clip
            self._scale[term.slice] = term.scale
        self.needs_height_scan = layout.has("height_scan")

    def build(self, inputs: RobotInputs) -> np.ndarray:
        """The observation (internal float32 buffer, overwritten by the next call)."""
        work = self._work
        for writer, out in self._steps:
            writer(inputs, out)
        np.maximum(work, self._low, out=work)
        np.minimum(work, self._high, out=work)
        np.multiply(work, self._scale, out=work)
        np.copyto(self.observation, work, casting="same_kind")
        return self.observation
