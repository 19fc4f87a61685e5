"""What the controller sends: the command of each state, encoded for drivers that apply their own gains.

A JointCommand carries position and velocity targets, zero feed-forward effort and the contract's
gains per joint; each state is encoded so that a driver applying its own PD gains to the targets
does the right thing (README "States and what is sent"):

* ZERO_TORQUE: kp = kd = 0; targets track the measured state (position and velocity).
* DAMPING: kp = 0, kd = the contract's kd, velocity target 0; position targets track the measured
  position, so a driver with fixed gains produces (close to) pure damping.
* STAND_UP: legs interpolate (smoothstep) from the pose measured at start to the default pose; the
  last stand-up command is exactly the default pose; wheels get the measured position.
* POLICY: legs a position target with velocity 0, wheels a velocity target with the measured
  position (the core's action mapping writes them).

Every command is then clipped to :func:`command_ranges`: the joint limits intersected with the
policy's action ranges.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from aow_policy.policy_contract import PolicyContract
from aow_policy.robot import Robot


class ControllerState(enum.Enum):
    ZERO_TORQUE = "ZERO_TORQUE"
    DAMPING = "DAMPING"
    STAND_UP = "STAND_UP"
    POLICY = "POLICY"


ACTIVE_STATES = (ControllerState.STAND_UP, ControllerState.POLICY)


@dataclass
class JointCommand:
    """One command for every joint in contract order (targets, gains, zero feed-forward).

    ``has_measurement`` is False until a valid JointState has arrived: without one there is no
    safe target to publish (the node publishes nothing then).
    """

    joint_names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    state: ControllerState = ControllerState.ZERO_TORQUE
    stamp: float = math.nan
    has_measurement: bool = False
    fault: str | None = None

    @classmethod
    def zeros(cls, joint_names: tuple[str, ...]) -> JointCommand:
        n = len(joint_names)
        return cls(joint_names, *(np.zeros(n) for _ in range(5)))


@dataclass
class CommandRanges:
    position_low: np.ndarray
    position_high: np.ndarray
    velocity_low: np.ndarray
    velocity_high: np.ndarray


def command_ranges(robot: Robot, contract: PolicyContract, action_joint: np.ndarray) -> CommandRanges:
    """The joint limits intersected with the policy's action ranges (action i drives joint ``action_joint[i]``)."""
    r = robot
    pos_low, pos_high = r.position_lower.copy(), r.position_upper.copy()
    vel_low, vel_high = -r.velocity_limits, r.velocity_limits.copy()
    for a, j in zip(contract.actions, action_joint, strict=True):
        if a.mode == "position":
            pos_low[j], pos_high[j] = max(pos_low[j], a.low), min(pos_high[j], a.high)
        else:
            vel_low[j], vel_high[j] = max(vel_low[j], a.low), min(vel_high[j], a.high)
    if np.any(pos_low > pos_high) or np.any(vel_low > vel_high):
        raise ValueError("the policy's action ranges do not overlap the robot's joint limits")
    return CommandRanges(pos_low, pos_high, vel_low, vel_high)


def write_stand_up(
    cmd: JointCommand,
    s: float,
    q0: np.ndarray,
    default: np.ndarray,
    measured: np.ndarray,
    wheels: np.ndarray,
    tmp: np.ndarray,
) -> None:
    """STAND_UP targets at progress ``s`` in [0, 1] from ``q0`` to ``default`` (``tmp``: scratch)."""
    a = s * s * (3.0 - 2.0 * s)  # smoothstep: zero velocity at both ends, exactly 1 at s = 1
    # (1 - a) q0 + a q_default: at a = 1 the first product is exactly 0, so the sum is the default
    np.multiply(q0, 1.0 - a, out=tmp)
    np.multiply(default, a, out=cmd.position)
    np.add(cmd.position, tmp, out=cmd.position)
    np.copyto(cmd.position, measured, where=wheels)  # wheels: no position target
    cmd.velocity.fill(0.0)


def write_passive(
    cmd: JointCommand, measured_position: np.ndarray, measured_velocity: np.ndarray, damping: bool
) -> None:
    """DAMPING (``damping``) or ZERO_TORQUE targets: the measured position, velocity 0 or the measured one."""
    np.copyto(cmd.position, measured_position)
    if damping:
        cmd.velocity.fill(0.0)
    else:
        np.copyto(cmd.velocity, measured_velocity)


def write_gains(cmd: JointCommand, robot: Robot, state: ControllerState) -> None:
    """The gains of ``state`` (effort stays 0): the contract's while active, kd only in DAMPING."""
    active = state in ACTIVE_STATES
    np.copyto(cmd.kp, robot.kp if active else 0.0)
    np.copyto(cmd.kd, robot.kd if active or state is ControllerState.DAMPING else 0.0)
