"""Run an exported policy on the AoW: the controller node and (optionally) the violation monitor.

    ros2 launch aow_policy controller.launch.py policy:=/path/to/policy.onnx
    ros2 service call /controller_node/start std_srvs/srv/Trigger     # stand up, then walk
    ros2 service call /controller_node/stop std_srvs/srv/Trigger      # damp

Arguments (``ros2 launch aow_policy controller.launch.py --show-args``): policy (required),
robot_config, params_file, namespace, use_monitor, use_sim_time, log_dir.

A policy file that is missing or cannot be loaded ends the launch before any node starts, with one
line naming the file and the reason. Stopping: Ctrl-C, SIGINT to the launch or its process group,
or SIGTERM (systemd, docker): each node sends its last command (the controller: DAMPING), the
monitor writes its summary, every process exits 0; if the controller exits, the launch ends.
"""

from __future__ import annotations

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import EmitEvent, OpaqueFunction
from launch.conditions import IfCondition
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from aow_policy.launch_support import check_policy_argument, declare_arguments, graceful_sigterm

# name: (default, description); a default of None makes the argument required.
ARGUMENTS = {
    "policy": (None, "Exported ONNX policy (written by aow-export, with its contract in the metadata)"),
    "robot_config": ("", "Robot contract YAML; empty: the package's config/aow_c.yaml"),
    "params_file": ("<share>/config/controller.yaml", "Node parameters YAML (defaults: the package's)"),
    "namespace": ("", "Namespace of both nodes and their relative topics (joint_states, cmd_vel, ...)"),
    "use_monitor": ("true", "Also run the violation monitor (joint speed and torque limits, JSON Lines log)"),
    "use_sim_time": ("false", "Use /clock (simulation time) instead of the system clock"),
    "log_dir": ("~/.ros/aow_violations", "Directory for the violation monitor's logs (one file per run)"),
}


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("aow_policy")
    namespace = LaunchConfiguration("namespace")
    params_file = LaunchConfiguration("params_file")
    common = {
        "robot_config": ParameterValue(LaunchConfiguration("robot_config"), value_type=str),
        "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool),
    }
    controller = Node(
        package="aow_policy",
        executable="controller_node",
        name="controller_node",
        namespace=namespace,
        parameters=[params_file, {**common, "policy": ParameterValue(LaunchConfiguration("policy"), value_type=str)}],
        output="screen",
        emulate_tty=True,
        # without the controller the launch has no purpose: a policy that cannot be loaded ends it
        on_exit=EmitEvent(event=Shutdown(reason="controller_node exited")),
    )
    monitor = Node(
        package="aow_policy",
        executable="violation_monitor_node",
        name="violation_monitor_node",
        namespace=namespace,
        parameters=[params_file, {**common, "log_dir": ParameterValue(LaunchConfiguration("log_dir"), value_type=str)}],
        condition=IfCondition(LaunchConfiguration("use_monitor")),
        output="screen",
        emulate_tty=True,
    )
    return LaunchDescription(
        [
            *declare_arguments(ARGUMENTS, share),
            # before any node: a wrong policy:= ends the launch with one line
            OpaqueFunction(function=check_policy_argument),
            OpaqueFunction(function=graceful_sigterm),  # SIGTERM stops the nodes as SIGINT does
            controller,
            monitor,
        ]
    )
