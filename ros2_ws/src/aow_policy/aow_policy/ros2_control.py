"""Commands for ros2_control: the controller's command split into its forward controllers' arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aow_policy.msg_builders import MessageFactory, float64_multi_array_msg
from aow_policy.msg_common import MessageError


class Ros2ControlCommands:
    """Splits a command into the two Float64MultiArray messages of ros2_control forward controllers.

    ``leg_joints`` and ``wheel_joints`` are the joint lists of the leg position controller and the
    wheel velocity controller, in those controllers' order (matched to the command by name).
    """

    def __init__(self, command_joints: Sequence[str], leg_joints: Sequence[str], wheel_joints: Sequence[str]):
        lookup = {n: i for i, n in enumerate(command_joints)}
        unknown = [n for n in (*leg_joints, *wheel_joints) if n not in lookup]
        if unknown:
            raise MessageError(f"ros2_control joints {unknown} are not joints of the controller")
        self.leg_joints, self.wheel_joints = tuple(leg_joints), tuple(wheel_joints)
        self._legs = np.array([lookup[n] for n in leg_joints], dtype=np.intp)
        self._wheels = np.array([lookup[n] for n in wheel_joints], dtype=np.intp)

    def leg_positions(self, command: Any) -> np.ndarray:
        return command.position[self._legs]

    def wheel_velocities(self, command: Any) -> np.ndarray:
        return command.velocity[self._wheels]

    def messages(self, factory: MessageFactory, command: Any) -> tuple[Any, Any]:
        """(leg position command, wheel velocity command)."""
        return (
            float64_multi_array_msg(factory, self.leg_positions(command)),
            float64_multi_array_msg(factory, self.wheel_velocities(command)),
        )
