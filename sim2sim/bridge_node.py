"""``aow-sim-bridge``: the sim-to-sim robot as a ROS 2 node, for ``sim.launch.py`` where ROS 2 is installed.

Publishes ``joint_states`` (sensor_msgs/JointState, every physics step), ``odometry``
(nav_msgs/Odometry), ``elevation_map`` (grid_map_msgs/GridMap) and ``/clock`` (rosgraph_msgs/Clock,
so the controller runs on simulation time with ``use_sim_time:=true``); subscribes
``joint_commands`` (sensor_msgs/JointState from the controller node) and applies it with the
robot's drive gains. With ``commands_script`` set it also plays that script on ``cmd_vel``.
A wall-clock timer advances one control period per tick (``real_time_factor`` scales it).
All logic is in :mod:`sim2sim.bridge`; this file moves messages and time only.
"""

from __future__ import annotations

from typing import Any

import rclpy
from geometry_msgs.msg import Twist
from grid_map_msgs.msg import GridMap
from nav_msgs.msg import Odometry
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from aow_policy.node_support import ParamSpec, declare_parameters, rclpy_message_factory
from aow_policy.robot import load_robot
from sim2sim.bridge import CLOCK_TOPIC, BridgeConfig, SimBridge
from sim2sim.commands import load_script
from sim2sim.hardware import HardwareConfig, Topics
from sim2sim.world import TERRAINS

_HW, _BRIDGE = HardwareConfig(), BridgeConfig()

BRIDGE_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("robot_config", "", "Robot contract YAML; empty: the aow_policy package's config/aow_c.yaml"),
    ParamSpec("terrain", _BRIDGE.terrain, "Ground: flat or rough (the training terrain generator)", choices=TERRAINS),
    ParamSpec("seed", _BRIDGE.seed, "Rough terrain seed", 0, 2**31 - 1),
    ParamSpec("physics_hz", _HW.physics_hz, "Physics rate = JointState rate (Hz)", 50.0, 5000.0),
    ParamSpec("odometry_hz", _HW.odometry_hz, "Odometry rate (Hz); must divide physics_hz", 1.0, 5000.0),
    ParamSpec("map_hz", _HW.map_hz, "Elevation map rate (Hz); must divide physics_hz", 0.1, 1000.0),
    ParamSpec("map_size", _HW.map_size, "Side of the square robot-centred map (m)", 0.5, 20.0),
    ParamSpec("map_resolution", _HW.map_resolution, "Map cell size (m)", 0.01, 1.0),
    ParamSpec(
        "command_timeout", _HW.command_timeout, "Seconds without joint commands before the drives damp", 0.01, 5.0
    ),
    ParamSpec("real_time_factor", 1.0, "Simulated seconds per wall-clock second", 0.01, 100.0),
    ParamSpec("publish_clock", True, "Publish /clock (run the other nodes with use_sim_time:=true)"),
    ParamSpec("commands_script", "", "Optional command script (YAML/JSON/CSV, see aow-sim2sim --help) for cmd_vel"),
    ParamSpec("commands_delay", _BRIDGE.commands_delay, "Simulated seconds before the script starts", 0.0, 3600.0),
    ParamSpec("joint_states_topic", "joint_states", "sensor_msgs/JointState output"),
    ParamSpec("odometry_topic", "odometry", "nav_msgs/Odometry output"),
    ParamSpec("elevation_map_topic", "elevation_map", "grid_map_msgs/GridMap output"),
    ParamSpec("joint_commands_topic", "joint_commands", "sensor_msgs/JointState command input"),
    ParamSpec("cmd_vel_topic", "cmd_vel", "geometry_msgs/Twist output of the command script"),
    ParamSpec("odom_frame", _HW.odom_frame, "Odometry and map frame"),
    ParamSpec("base_frame", _HW.base_frame, "Odometry child frame"),
)


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
            odom_frame=p["odom_frame"],
            base_frame=p["base_frame"],
            command_timeout=p["command_timeout"],
        )
        config = BridgeConfig(
            terrain=p["terrain"],
            seed=p["seed"],
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
    rclpy.init(args=args)
    node = None
    try:
        node = SimBridgeNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
