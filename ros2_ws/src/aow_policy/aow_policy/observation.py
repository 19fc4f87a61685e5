"""Observation vectors assembled from the policy's own layout (term names -> builders).

The policy contract lists its observation terms by name (with joints by name); each name maps to
a builder here, so a policy with another layout, joint subset or scaling needs no code change,
and a policy asking for a term this runtime cannot build is refused when it is loaded.
Every term is ``clip(raw, -clip, clip) * scale`` of the raw value described in
:data:`aow_policy.layout.KNOWN_OBS_TERMS`.

All raw inputs live in one flat vector (:class:`RobotInputs` exposes named views of it), and every
known term's raw value is affine in those inputs: ``raw = sign * inputs[index] + bias`` (e.g.
``joint_pos``: q - default; ``height_scan``: (base_z - height_offset) - h). A builder compiles a
layout into one gather index, one sign and one bias vector at load, so :meth:`build` is seven
numpy calls whatever the layout, and allocates nothing; or, where the C kernels of
:mod:`aow_policy._control` are built, one call of the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aow_policy.layout import KNOWN_OBS_TERMS, ObservationLayout, ObsTerm
from aow_policy.robot import Robot

try:  # the C kernels (aow_policy/_control.c); optional: the NumPy path does the same arithmetic
    from aow_policy import _control as native_control
except ImportError:  # built without a C compiler
    native_control = None


class ObservationError(ValueError):
    """The observation layout cannot be built on this robot; the message names the term."""


class RobotInputs:
    """The latest robot state in contract joint order: named views of one flat vector."""

    FIELDS = (
        ("joint_position", "joints"),
        ("joint_velocity", "joints"),
        ("base_position", 3),
        ("base_linear_velocity", 3),  # base frame
        ("base_angular_velocity", 3),  # base frame
        ("projected_gravity", 3),
        ("command", 3),  # (vx, vy, yaw rate)
        ("last_action", "actions"),  # raw (clipped, unscaled) previous action
        ("heights", "scan"),  # terrain height at each scan point (map frame)
    )

    def __init__(self, num_joints: int, num_actions: int, num_scan_points: int):
        self.num_joints, self.num_actions, self.num_scan_points = num_joints, num_actions, num_scan_points
        sizes = {"joints": num_joints, "actions": num_actions, "scan": num_scan_points}
        self.offsets: dict[str, slice] = {}
        start = 0
        for name, size in self.FIELDS:
            n = sizes[size] if isinstance(size, str) else size
            self.offsets[name] = slice(start, start + n)
            start += n
        self.vector = np.zeros(start)
        for name, sl in self.offsets.items():
            setattr(self, name, self.vector[sl])  # views: writing into them writes the vector
        self.projected_gravity[2] = -1.0

    def index(self, name: str) -> np.ndarray:
        sl = self.offsets[name]
        return np.arange(sl.start, sl.stop)


@dataclass(frozen=True)
class TermPlan:
    """raw = sign * inputs.vector[index] + bias (+ base_z where ``add_base_z``)."""

    index: np.ndarray
    sign: float
    bias: np.ndarray
    add_base_z: bool = False


TermFactory = Callable[[ObsTerm, Robot, RobotInputs], TermPlan]


def _fixed(size: int, field: str) -> TermFactory:
    def factory(term: ObsTerm, robot: Robot, inputs: RobotInputs) -> TermPlan:
        if term.size != size:
            raise ObservationError(f"observation term {term.name!r}: size {term.size}, this term has {size} values")
        return TermPlan(inputs.index(field), 1.0, np.zeros(size))

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


def _joint_pos(term: ObsTerm, robot: Robot, inputs: RobotInputs) -> TermPlan:
    idx = _joint_indices(term, robot)
    return TermPlan(inputs.index("joint_position")[idx], 1.0, -robot.default_positions[idx])


def _joint_vel(term: ObsTerm, robot: Robot, inputs: RobotInputs) -> TermPlan:
    idx = _joint_indices(term, robot)
    return TermPlan(inputs.index("joint_velocity")[idx], 1.0, np.zeros(term.size))


def _last_action(term: ObsTerm, robot: Robot, inputs: RobotInputs) -> TermPlan:
    if term.size != inputs.num_actions:
        raise ObservationError(f"observation term 'last_action': size {term.size} for {inputs.num_actions} actions")
    return TermPlan(inputs.index("last_action"), 1.0, np.zeros(term.size))


def _height_scan(term: ObsTerm, robot: Robot, inputs: RobotInputs) -> TermPlan:
    if term.size != robot.height_scan.num_points:
        raise ObservationError(
            f"observation term 'height_scan': size {term.size}, the robot's grid has {robot.height_scan.num_points}"
        )
    if "height_offset" not in term.params:
        raise ObservationError("observation term 'height_scan': params.height_offset is missing")
    # base_z - height_offset - terrain height
    offset = float(term.params["height_offset"])
    return TermPlan(inputs.index("heights"), -1.0, np.full(term.size, -offset), add_base_z=True)


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

    With ``value = clip(raw, -c, c) * s`` and ``raw = sign * x + bias`` the whole vector is
    ``clip(sign * s * x + bias * s, lo, hi)`` with ``[lo, hi] = sorted(-c * s, c * s)``.
    """

    def __init__(self, layout: ObservationLayout, robot: Robot, num_actions: int, native: bool | None = None):
        """``native``: build in C (:mod:`aow_policy._control`); None: where it is built."""
        if native and native_control is None:
            raise ValueError("native observation requested, but aow_policy._control is not built (needs a C compiler)")
        self.native = native_control is not None if native is None else bool(native)
        self._kernel = None
        self._kernel_inputs: RobotInputs | None = None
        self.layout = layout
        dim = layout.dim
        template = RobotInputs(len(robot.joint_names), num_actions, robot.height_scan.num_points)
        self._index = np.zeros(dim, dtype=np.intp)
        self._gain = np.zeros(dim)  # sign * scale
        self._bias = np.zeros(dim)  # bias * scale, plus base_z * scale where the term needs it
        self._bias_const = np.zeros(dim)
        self._base_z_gain = np.zeros(dim)
        self._low = np.full(dim, -np.inf)
        self._high = np.full(dim, np.inf)
        for term in layout.terms:
            factory = TERM_BUILDERS.get(term.name)
            if factory is None:
                raise ObservationError(
                    f"observation term {term.name!r} has no builder in this runtime (known: {sorted(TERM_BUILDERS)})"
                )
            plan = factory(term, robot, template)
            sl, scale = term.slice, term.scale
            self._index[sl] = plan.index
            self._gain[sl] = plan.sign * scale
            self._bias_const[sl] = plan.bias * scale
            if plan.add_base_z:
                self._base_z_gain[sl] = scale
            if term.clip is not None:
                bounds = sorted((-term.clip * scale, term.clip * scale))
                self._low[sl], self._high[sl] = bounds
        self._base_z_slices = [t.slice for t in layout.terms if t.name == "height_scan"]
        self._base_z_index = template.offsets["base_position"].start + 2
        self._input_size = template.vector.size
        self._work = np.zeros(dim)
        self.observation = np.zeros(dim, dtype=np.float32)
        np.copyto(self._bias, self._bias_const)
        # per height term: (its bias view, constant part, base_z gain); both parts are uniform in a term
        self._bias_views = [
            (self._bias[sl], float(self._bias_const[sl][0]), float(self._base_z_gain[sl][0]))
            for sl in self._base_z_slices
        ]
        self.needs_height_scan = layout.has("height_scan")

    def build(self, inputs: RobotInputs) -> np.ndarray:
        """The observation (internal float32 buffer, overwritten by the next call)."""
        if inputs is self._kernel_inputs:
            self._kernel()
            return self.observation
        if inputs.vector.size != self._input_size:
            raise ValueError("RobotInputs of another robot or action count than this builder's")
        if self.native:  # bound to these inputs' buffer once; later calls take the branch above
            self._kernel = native_control.observation(
                inputs.vector,
                self._index,
                self._gain,
                self._bias_const,
                self._base_z_gain,
                self._base_z_index,
                self._low,
                self._high,
                self.observation,
            )
            self._kernel_inputs = inputs
            self._kernel()
            return self.observation
        work = self._work
        if self._bias_views:
            base_z = float(inputs.vector[self._base_z_index])
            for bias, const, gain in self._bias_views:
                bias.fill(const + gain * base_z)
        inputs.vector.take(self._index, out=work, mode="clip")  # "raise" would allocate a buffer
        np.multiply(work, self._gain, out=work)
        np.add(work, self._bias, out=work)
        np.maximum(work, self._low, out=work)
        np.minimum(work, self._high, out=work)
        self.observation[...] = work  # float64 -> float32; [...] = skips np.copyto's Python dispatcher
        return self.observation
