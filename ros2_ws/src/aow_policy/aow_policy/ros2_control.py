"""ros2_control output: which joint each forward controller's array element drives, and the split.

``output_mode: ros2_control`` publishes std_msgs/Float64MultiArray to a leg position and a wheel
velocity forward command controller (``position_controllers/JointGroupPositionController``,
``velocity_controllers/JointGroupVelocityController`` or ``forward_command_controller``). Element i
of such an array drives the controller's i-th joint of its ``joints`` parameter, so the node must
know that order: it reads it from the controller_manager's controllers at start-up
(:func:`query_forward_controllers`) and :func:`resolve_controller_joints` refuses a controller whose
joints or interface do not fit, or a joint list given by hand that differs from the controller's.
Only the query imports ROS (inside the function), so this module imports anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
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


COMMANDS_SUFFIX = "/commands"  # forward command controllers subscribe to ~/commands


class ControllerMismatchError(ValueError):
    """A forward controller does not fit the contract or the node's settings; the text says how."""


@dataclass(frozen=True)
class ForwardController:
    """A controller as the controller_manager reports it: node name, type, ``joints``, ``interface_name``."""

    node: str  # fully qualified, e.g. /leg_position_controller
    type: str
    joints: tuple[str, ...]
    interface: str


def controller_node_of(topic: str) -> str:
    """The fully qualified controller node whose ``~/commands`` is the resolved ``topic``."""
    if not topic.endswith(COMMANDS_SUFFIX) or len(topic) == len(COMMANDS_SUFFIX):
        raise ControllerMismatchError(
            f"{topic} is not a forward command controller's <controller>/commands topic: the node cannot "
            f"tell which controller's joint order it must follow"
        )
    return topic[: -len(COMMANDS_SUFFIX)]


def resolve_controller_joints(
    role: str,
    controller: ForwardController,
    contract_joints: Sequence[str],
    interface: str,
    given: Sequence[str] = (),
) -> tuple[str, ...]:
    """The joint order of ``controller`` (the ``role`` controller: legs or wheels), checked.

    It must command ``interface`` and list exactly ``contract_joints`` (any order: matched by name);
    a non-empty ``given`` list (the node's ``*_controller_joints`` parameter) must equal the
    controller's order. Raises :class:`ControllerMismatchError` naming the controller and the difference.
    """
    name = f"{role} controller {controller.node} ({controller.type})"
    if controller.interface != interface:
        raise ControllerMismatchError(
            f"{name} commands the {controller.interface!r} interface; the {role} commands are {interface} targets"
        )
    joints = controller.joints
    duplicated = sorted({j for j in joints if joints.count(j) > 1})
    missing = [j for j in contract_joints if j not in joints]
    extra = [j for j in joints if j not in contract_joints]
    if duplicated or missing or extra:
        raise ControllerMismatchError(
            f"{name} has joints {list(joints)}; the contract's {role} joints are {list(contract_joints)}"
            + (f" (missing {missing})" if missing else "")
            + (f" (not {role} joints of the contract: {extra})" if extra else "")
            + (f" (listed twice: {duplicated})" if duplicated else "")
        )
    if given and tuple(given) != joints:
        raise ControllerMismatchError(
            f"{role}_controller_joints {list(given)} differs from the joint order of {name}: {list(joints)} "
            f"(leave the parameter empty to follow the controller)"
        )
    return joints


def query_forward_controllers(
    context: Any, controller_manager: str, nodes: Sequence[str], timeout: float
) -> dict[str, ForwardController]:
    """``{node: ForwardController}`` for the controllers ``nodes`` (fully qualified node names) of the
    running ``controller_manager``, waiting up to ``timeout`` s for it and for them to be loaded
    (the spawner may still be at work when the node starts). Raises RuntimeError naming what is
    missing. rclpy, with a node of its own in ``context`` that lives only for the query."""
    import rclpy

    try:
        from controller_manager_msgs.srv import ListControllers
    except ImportError as e:
        raise ImportError(
            f"output_mode ros2_control reads the controllers' joints from the controller_manager, which needs "
            f"controller_manager_msgs (ros2_control; source its setup.bash): {e}"
        ) from None
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters
    from rclpy.executors import SingleThreadedExecutor

    deadline = time.monotonic() + timeout
    node = rclpy.create_node("_controller_node_ros2_control_query", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def call(client: Any, request: Any, what: str) -> Any:
        if not client.wait_for_service(timeout_sec=max(deadline - time.monotonic(), 0.0)):
            raise RuntimeError(f"{what}: no answer within {timeout} s")
        future = client.call_async(request)
        # a service that is there gets a moment to answer even at the deadline
        executor.spin_until_future_complete(future, timeout_sec=max(deadline - time.monotonic(), 1.0))
        if not future.done() or future.result() is None:
            raise RuntimeError(f"{what}: no answer within {timeout} s")
        return future.result()

    try:
        manager = node.resolve_topic_name(controller_manager)  # as a service name: namespace and remaps
        namespace = manager.rsplit("/", 1)[0]
        lister = node.create_client(ListControllers, f"{manager}/list_controllers")
        while True:
            listed = call(lister, ListControllers.Request(), f"controller_manager {manager}").controller
            by_node = {f"{namespace}/{c.name}": c for c in listed}
            if all(n in by_node for n in nodes):
                break
            if time.monotonic() + 0.2 >= deadline:
                missing = [n for n in nodes if n not in by_node]
                raise RuntimeError(
                    f"controller_manager {manager} has no controller {', '.join(missing)} after {timeout} s "
                    f"(its controllers: {sorted(by_node) or 'none'})"
                )
            time.sleep(0.2)  # the spawner has not loaded them yet
        found = {}
        for name in nodes:
            client = node.create_client(GetParameters, f"{name}/get_parameters")
            request = GetParameters.Request(names=["joints", "interface_name"])
            joints, interface = call(client, request, f"parameters of {name}").values
            if joints.type != ParameterType.PARAMETER_STRING_ARRAY or interface.type != ParameterType.PARAMETER_STRING:
                raise RuntimeError(
                    f"{name} ({by_node[name].type}) has no joints/interface_name parameters: output_mode "
                    f"ros2_control needs forward command controllers (JointGroupPositionController, "
                    f"JointGroupVelocityController)"
                )
            found[name] = ForwardController(
                name, by_node[name].type, tuple(joints.string_array_value), interface.string_value
            )
        return found
    finally:
        executor.shutdown()
        node.destroy_node()
