"""``aow-sim-bridge``: the sim-to-sim robot as a ROS 2 node, for ``sim.launch.py`` where ROS 2 is installed.

Publishes ``joint_states`` (sensor_msgs/JointState, every physics step), ``odometry``
(nav_msgs/Odometry), ``elevation_map`` (grid_map_msgs/GridMap) and ``/clock`` (rosgraph_msgs/Clock,
so the controller runs on simulation time with ``use_sim_time:=true``); subscribes
``joint_commands`` (sensor_msgs/JointState from the controller node) and applies it with the
robot's drive gains. With ``commands_script`` set it also plays that script on ``cmd_vel``.
A wall-clock timer advances one control period per tick (``real_time_factor`` scales it).
Command-line options (``aow-sim-bridge --help``) set parameters; ``--ros-args`` passes the rest to
ROS. All logic is in :mod:`sim2sim.bridge`; this file moves messages and time only.
"""

from __future__ import annotations

import sys
from typing import Any

from geometry_msgs.msg import Twist
from grid_map_msgs.msg import GridMap
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from aow_policy.node_support import declare_parameters, rclpy_message_factory, run_node
from aow_policy.robot import load_robot
from sim2sim.bridge import BRIDGE_PARAMS, CLOCK_TOPIC, BridgeConfig, SimBridge, parameter_overrides
from sim2sim.commands import load_script
from sim2sim.hardware import HardwareConfig, Topics


class SimBridgeNode(Node):
    def __init__(self, **kwargs: Any):
        super().__init__("sim_bridge", **kwargs)
        p = declare_parameters(self, BRIDGE_PARAMS)
        robot = load_robot(p["robot_config"] or None)
        topics = Topics(
            joint_states=p["joint_states_topic"],
            odometry=p["odometry_topic"],
            elevation_map=p["elevation_map_topic"],
            cmd_vel=p["cmd_vel_topic"],
            joint_commands=p["joint_commands_topic"],
        )
        hardware = HardwareConfig(
            physics_hz=p["physics_hz"],
            odometry_hz=p["odometry_hz"],
            map_hz=p["map_hz"],
            map_size=p["map_size"],
            map_resolution=p["map_resolution"],
            leg_actuator=p["leg_actuator"],
            odom_frame=p["odom_frame"],
            base_frame=p["base_frame"],
            command_timeout=p["command_timeout"],
        )
        config = BridgeConfig(
            terrain=p["terrain"],
            seed=None if p["seed"] < 0 else p["seed"],
            hardware=hardware,
            topics=topics,
            commands_delay=p["commands_delay"],
            publish_clock=p["publish_clock"],
        )
        schedule = load_script(p["commands_script"], robot) if p["commands_script"] else None
        factory = rclpy_message_factory(with_grid_map=True)
        factory.types["rosgraph_msgs/msg/Clock"] = Clock
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self._topic_publishers = {
            topics.joint_states: self.create_publisher(JointState, topics.joint_states, reliable),
            topics.odometry: self.create_publisher(Odometry, topics.odometry, reliable),
            topics.elevation_map: self.create_publisher(
                GridMap, topics.elevation_map, QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
            ),
            topics.cmd_vel: self.create_publisher(Twist, topics.cmd_vel, reliable),
            CLOCK_TOPIC: self.create_publisher(Clock, CLOCK_TOPIC, reliable),
        }
        self.bridge = SimBridge(robot, factory, self._publish, config, schedule)
        if not p["publish_clock"]:  # no simulation clock: stamp on the node clock, from now
            self.bridge.hardware.stamp_offset = self.get_clock().now().nanoseconds * 1e-9
        # best effort matches a reliable or a best-effort command publisher
        self.create_subscription(JointState, topics.joint_commands, self._on_joint_command, qos_profile_sensor_data)
        self.create_timer(self.bridge.tick_period / p["real_time_factor"], self.bridge.tick)
        self.get_logger().info(
            f"simulating {robot.name} on {p['terrain']} ground at {p['physics_hz']:g} Hz physics, "
            f"real-time factor {p['real_time_factor']:g}" + (f", playing {p['commands_script']}" if schedule else "")
        )

    def _publish(self, topic: str, msg: Any, t: float) -> None:
        self._topic_publishers[topic].publish(msg)

    def _on_joint_command(self, msg: JointState) -> None:
        if not self.bridge.on_joint_command(msg):
            self.get_logger().warning(
                f"joint command refused: {self.bridge.hardware.last_command_error}", throttle_duration_sec=1.0
            )


def main(args: list[str] | None = None) -> None:
    """``aow-sim-bridge [options] [--ros-args ...]``: options set parameters (see ``--help``).

    Stops cleanly on SIGINT or SIGTERM (exit code 0), as the controller nodes do (``run_node``)."""
    overrides, ros_args = parameter_overrides(sys.argv[1:] if args is None else args)
    parameters = [Parameter(name, value=value) for name, value in overrides.items()]
    sys.exit(
        run_node(
            "sim_bridge", lambda: SimBridgeNode(parameter_overrides=parameters), args=["aow-sim-bridge", *ros_args]
        )
    )


if __name__ == "__main__":
    main()
