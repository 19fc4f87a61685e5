"""ROS 2 node running an exported policy on the robot: a thin shell over :class:`ControllerCore`.

Subscribes joint states, odometry (sensor-data QoS), velocity commands and the elevation map;
publishes one joint command per control period (``joint_state`` mode: sensor_msgs/JointState on
``joint_commands``; ``ros2_control`` mode: std_msgs/Float64MultiArray to a leg position and a
wheel velocity forward controller); services ``~/start`` and ``~/stop`` (std_srvs/Trigger);
diagnostic_msgs/DiagnosticArray on ``/diagnostics`` with the state, input ages and loop timing.
Every decision is the core's; this file only moves messages and time. On shutdown the node
sends one DAMPING command. Parameters: :data:`aow_policy.node_support.CONTROLLER_PARAMS`.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from aow_policy.cdr import JointStateDecoder, decode_odometry
from aow_policy.controller import ControllerConfig, ControllerCore
from aow_policy.loop_stats import LoopStats
from aow_policy.messages import joint_command_msg, seconds_to_sec_nanosec
from aow_policy.node_support import (
    CONTROLLER_PARAMS,
    PolledSubscription,
    controller_diagnostics,
    declare_parameters,
    rclpy_message_factory,
    run_node,
    split_joint_list,
    wait_for_delivery,
)
from aow_policy.policy import PolicyRunner
from aow_policy.realtime import enable_realtime, parse_cpus
from aow_policy.robot import load_robot
from aow_policy.ros2_control import (
    Ros2ControlCommands,
    controller_node_of,
    query_forward_controllers,
    resolve_controller_joints,
)

RATE_TOLERANCE = 1e-6


class ControllerNode(Node):
    def __init__(self, **kwargs: Any):
        super().__init__("controller_node", **kwargs)
        p = declare_parameters(self, CONTROLLER_PARAMS)
        self.params = p
        if not p["policy"]:
            raise ValueError("parameter 'policy' is empty: pass the exported ONNX policy (policy:=/path/policy.onnx)")
        self.realtime_cpus = parse_cpus(p["realtime_cpus"])  # a bad list is refused before anything starts
        robot = load_robot(p["robot_config"] or None)
        policy = PolicyRunner.load(p["policy"], robot)
        self.core = ControllerCore(robot, policy, ControllerConfig.from_mapping(p))
        period = robot.rates.policy_dt
        if p["control_rate_hz"] and abs(p["control_rate_hz"] * period - 1.0) > RATE_TOLERANCE:
            raise ValueError(
                f"control_rate_hz {p['control_rate_hz']} differs from the policy's rate {1.0 / period} Hz: a policy "
                f"runs at the rate it was trained at"
            )
        self.loop = LoopStats(period)
        self.factory = rclpy_message_factory()
        self._next_auto_start = 0.0
        self._command_msg: Any = None  # joint_state mode: the reused command message

        # Joint states and odometry (400 Hz on the robot) are taken by the control step, once per
        # period, from a hidden node that no executor spins (PolledSubscription says why): the
        # executor only wakes for the timer, commands, the map and the services.
        self._polled: list[tuple[PolledSubscription, Any]] = []
        self._inputs_node = None
        if PolledSubscription.supported():
            self._inputs_node = rclpy.create_node(
                f"_{self.get_name()}_inputs", namespace=self.get_namespace(), context=self.context
            )
            latest_only = QoSProfile(depth=1, reliability=qos_profile_sensor_data.reliability)
            for msg_type, topic, decode, handler in (
                (JointState, p["joint_states_topic"], JointStateDecoder(), self.core.on_joint_state),
                (Odometry, p["odometry_topic"], decode_odometry, self.core.on_odometry),
            ):
                polled = PolledSubscription(self._inputs_node, msg_type, topic, latest_only, decode)
                self._polled.append((polled, handler))
        else:  # an rclpy without the take: one callback per message
            self.create_subscription(JointState, p["joint_states_topic"], self._on_joint_state, qos_profile_sensor_data)
            self.create_subscription(Odometry, p["odometry_topic"], self._on_odometry, qos_profile_sensor_data)
        self.create_subscription(Twist, p["cmd_vel_topic"], self._on_command, QoSProfile(depth=10))
        if self.core.scanner is not None:
            from grid_map_msgs.msg import GridMap  # only policies with a height scan need grid_map_msgs

            map_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
            self.create_subscription(GridMap, p["elevation_map_topic"], self._on_grid_map, map_qos)

        command_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        if p["output_mode"] == "ros2_control":
            self.split = self._ros2_control_split(robot)
            self.leg_pub = self.create_publisher(Float64MultiArray, p["leg_controller_topic"], command_qos)
            self.wheel_pub = self.create_publisher(Float64MultiArray, p["wheel_controller_topic"], command_qos)
        else:
            self.command_pub = self.create_publisher(JointState, p["joint_commands_topic"], command_qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))

        self.create_service(Trigger, "~/start", self._on_start)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.create_timer(period, self._on_control_timer)
        self.create_timer(p["diagnostics_period"], self._publish_diagnostics)
        self.get_logger().info(
            f"policy {p['policy']} on {robot.name} at {1.0 / period:.1f} Hz, output {p['output_mode']}, "
            f"state {self.core.state.value}; call ~/start to stand up"
        )

    def _ros2_control_split(self, robot: Any) -> Ros2ControlCommands:
        """The command split in the controllers' own joint order, read from the controller_manager: an
        array element drives whichever joint the controller lists at that index, so a wrong order
        would send each target to another joint. Refuses to start (naming it) on any mismatch."""
        p = self.params
        roles = (
            ("leg", p["leg_controller_topic"], robot.leg_joint_names, "position", p["leg_controller_joints"]),
            ("wheel", p["wheel_controller_topic"], robot.wheel_joint_names, "velocity", p["wheel_controller_joints"]),
        )
        nodes = [controller_node_of(self.resolve_topic_name(topic)) for _, topic, *_ in roles]
        found = query_forward_controllers(self.context, p["controller_manager"], nodes, p["controller_manager_timeout"])
        legs, wheels = (
            resolve_controller_joints(role, found[node], joints, interface, split_joint_list(given))
            for (role, _, joints, interface, given), node in zip(roles, nodes, strict=True)
        )
        self.get_logger().info(f"ros2_control: {nodes[0]} joints {list(legs)}, {nodes[1]} joints {list(wheels)}")
        return Ros2ControlCommands(robot.joint_names, legs, wheels)

    def now(self) -> float:
        """Node clock (ROS time; simulation time with use_sim_time) in seconds."""
        return self.get_clock().now().nanoseconds * 1e-9

    # ---- inputs ----------------------------------------------------------------------------
    def _on_joint_state(self, msg: JointState) -> None:
        self.core.on_joint_state(msg, self.now())

    def _on_odometry(self, msg: Odometry) -> None:
        self.core.on_odometry(msg, self.now())

    def _on_command(self, msg: Twist) -> None:
        self.core.on_command(msg, self.now())

    def _on_grid_map(self, msg: Any) -> None:
        self.core.on_grid_map(msg, self.now())

    # ---- services --------------------------------------------------------------------------
    def _on_start(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        now = self.now()
        self._take_inputs(now)  # start() judges the measured state: the newest one, not the last period's
        response.success, response.message = self.core.start(now)
        self.get_logger().info(f"~/start: {response.message}")
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.core.stop(self.now())
        self.get_logger().info(f"~/stop: {response.message}")
        return response

    # ---- loop ------------------------------------------------------------------------------
    def _take_inputs(self, now: float) -> None:
        """The newest joint state and odometry into the core, with their arrival times."""
        for polled, handler in self._polled:
            taken = polled.take_latest()
            if taken is not None:
                handler(taken[0], now - taken[1])

    def _on_control_timer(self) -> None:
        start, cpu_start = time.perf_counter(), time.thread_time()
        now = self.now()
        self._take_inputs(now)
        if self.params["auto_start"] and self.core.fault is None and now >= self._next_auto_start:
            if self.core.state.value in ("ZERO_TORQUE", "DAMPING") and self.core.start(now)[0]:
                self.params["auto_start"] = False  # once: after a fault a person decides
            self._next_auto_start = now + 1.0
        previous = self.core.state
        command = self.core.step(now)
        if command.has_measurement:
            self._publish(command)
        self.loop.record(start, time.perf_counter(), time.thread_time() - cpu_start)
        if command.state is not previous:
            log = self.get_logger().error if self.core.fault else self.get_logger().info
            log(f"{previous.value} -> {command.state.value}" + (f": {self.core.fault}" if self.core.fault else ""))

    def _publish(self, command: Any) -> None:
        if self.params["output_mode"] == "ros2_control":
            legs, wheels = self.split.messages(self.factory, command)
            self.leg_pub.publish(legs)
            self.wheel_pub.publish(wheels)
        else:
            self.command_pub.publish(self._joint_command_msg(command))

    def _joint_command_msg(self, command: Any) -> Any:
        """The command as a JointState: one message built once and refilled every period (building
        it anew cost ~100 us of rclpy's Python setters, mostly validating the 16 names again)."""
        msg = self._command_msg
        if msg is None:  # the names are the contract's: set once
            msg = self._command_msg = joint_command_msg(self.factory, command)
            return msg
        msg.header.stamp.sec, msg.header.stamp.nanosec = seconds_to_sec_nanosec(command.stamp)
        msg.position = self.factory.float64s(command.position)
        msg.velocity = self.factory.float64s(command.velocity)
        msg.effort = self.factory.float64s(command.effort)
        return msg

    def _publish_diagnostics(self) -> None:
        level, message, values = controller_diagnostics(self.core, self.loop, self.now())
        status = DiagnosticStatus(
            level=getattr(DiagnosticStatus, level),
            name=f"{self.get_fully_qualified_name()}: controller",
            message=message,
            hardware_id=self.core.robot.name,
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    def apply_realtime(self) -> None:
        """SCHED_FIFO for the calling thread if ``realtime_priority`` > 0; a warning if refused."""
        priority = self.params["realtime_priority"]
        if priority <= 0:
            return
        ok, why = enable_realtime(priority, self.realtime_cpus)
        (self.get_logger().info if ok else self.get_logger().warning)(f"control loop scheduling: {why}")

    def shutdown(self) -> None:
        """Leave the robot damped: one DAMPING command before the node goes away."""
        if not self.context.ok():
            self.get_logger().error("the ROS context is gone: no last DAMPING command could be sent")
            return
        now = self.now()
        self.core.stop(now, reason="node shutting down")
        command = self.core.step(now)
        if command.has_measurement:
            self._publish(command)
            for publisher in self._command_publishers():
                wait_for_delivery(publisher)
            self.get_logger().info("sent the last DAMPING command")

    def destroy_node(self) -> None:
        if self._inputs_node is not None:
            self._inputs_node.destroy_node()
            self._inputs_node = None
        super().destroy_node()

    def _command_publishers(self) -> list[Any]:
        if self.params["output_mode"] == "ros2_control":
            return [self.leg_pub, self.wheel_pub]
        return [self.command_pub]


def _freeze_and_build() -> ControllerNode:
    node = ControllerNode()
    gc.freeze()  # start-up objects leave the collected generations: shorter GC pauses in the loop
    return node


def main(args: list[str] | None = None) -> None:
    """Spin until SIGINT/SIGTERM, then send one DAMPING command (node_support.run_node)."""
    sys.exit(
        run_node(
            "controller_node",
            _freeze_and_build,
            # the executor thread runs the control timer: it gets the real-time scheduling
            on_spin_start=lambda node: node.apply_realtime(),
            on_stop=lambda node: node.shutdown(),
            args=args,
        )
    )


if __name__ == "__main__":
    main()
