"""Sim-to-sim under ROS 2: the MuJoCo sim bridge as the robot, plus controller.launch.py.

    ros2 launch aow_policy sim.launch.py policy:=/path/to/policy.onnx
    ros2 service call /controller_node/start std_srvs/srv/Trigger

The bridge is the executable ``aow-sim-bridge`` of the toolkit's sim2sim package (installed with
the repository root: ``pip install -e .``); it publishes joint_states, odometry, elevation_map and
/clock, and applies joint_commands. Hook: ``sim_bridge_executable`` names the program (a path, or
a name on PATH) and ``sim_bridge_args`` adds its arguments (``aow-sim-bridge --help``), e.g.
``sim_bridge_args:="--terrain rough --robot /path/aow_c.yaml"``; it runs in ``namespace`` too.
Arguments: those of controller.launch.py plus sim_bridge_executable, sim_bridge_args, use_bridge.
The bridge program is looked up before anything starts: when it is not found the launch ends at
once with one line saying how to point to it. It runs without a shell, so Ctrl-C, SIGINT and
SIGTERM reach it directly and it stops cleanly; when it exits, the launch ends.
"""

from __future__ import annotations

import os
import shlex

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (
    EmitEvent,
    ExecuteProcess,
    IncludeLaunchDescription,
    OpaqueFunction,
)
from launch.conditions import IfCondition
from launch.events import Shutdown
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from aow_policy.launch_support import check_policy_argument, declare_arguments, resolve_executable

# name: (default, description); a default of None makes the argument required.
ARGUMENTS = {
    "policy": (None, "Exported ONNX policy (written by aow-export, with its contract in the metadata)"),
    "robot_config": ("", "Robot contract YAML; empty: the package's config/aow_c.yaml"),
    "params_file": ("<share>/config/controller.yaml", "Node parameters YAML (defaults: the package's)"),
    "namespace": ("", "Namespace of the nodes and their relative topics"),
    "use_monitor": ("true", "Also run the violation monitor"),
    "use_sim_time": ("true", "Follow /clock, which the bridge publishes (false with sim_bridge_args:=--no-clock)"),
    "log_dir": ("~/.ros/aow_violations", "Directory for the violation monitor's logs"),
    "use_bridge": ("true", "Start the sim bridge (false: bring your own simulator on the same topics)"),
    "sim_bridge_executable": ("aow-sim-bridge", "The sim bridge program (from the toolkit's sim2sim package)"),
    "sim_bridge_args": ("", "Extra command-line arguments for the sim bridge, as one string"),
}


def sim_bridge(context) -> list:
    """The bridge as a process of its own (no shell between: signals reach it), found before anything starts."""
    program = resolve_executable(LaunchConfiguration("sim_bridge_executable").perform(context), "sim_bridge_executable")
    namespace = LaunchConfiguration("namespace").perform(context).strip("/")
    cmd = [program, *shlex.split(LaunchConfiguration("sim_bridge_args").perform(context))]
    if namespace:
        cmd += ["--ros-args", "-r", f"__ns:=/{namespace}"]
    # the robot is gone when the bridge exits: end the launch (the controller would only damp)
    return [
        ExecuteProcess(
            cmd=cmd, name="sim_bridge", output="screen", on_exit=EmitEvent(event=Shutdown(reason="sim bridge exited"))
        )
    ]


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("aow_policy")
    controller = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "controller.launch.py")),
        launch_arguments={
            name: LaunchConfiguration(name)
            for name in ("policy", "robot_config", "params_file", "namespace", "use_monitor", "use_sim_time", "log_dir")
        }.items(),
    )
    return LaunchDescription(
        [
            *declare_arguments(ARGUMENTS, share),
            OpaqueFunction(function=check_policy_argument),  # before the bridge: one line, nothing started
            OpaqueFunction(function=sim_bridge, condition=IfCondition(LaunchConfiguration("use_bridge"))),
            controller,
        ]
    )
