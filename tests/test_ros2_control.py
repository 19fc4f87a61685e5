"""ros2_control output without ROS: the controllers' joint order checks, the split, the shipped example files."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from aow_policy.controller import JointCommand
from aow_policy.robot import load_robot
from aow_policy.ros2_control import (
    ControllerMismatchError,
    ForwardController,
    Ros2ControlCommands,
    controller_node_of,
    resolve_controller_joints,
)

ROBOT = load_robot()
LEGS, WHEELS = ROBOT.leg_joint_names, ROBOT.wheel_joint_names
CONFIG = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "aow_policy" / "config"


def leg_controller(joints, interface="position"):
    return ForwardController(
        "/leg_position_controller", "position_controllers/JointGroupPositionController", tuple(joints), interface
    )


def test_the_controllers_order_is_followed_and_a_given_list_must_equal_it():
    order = tuple(reversed(LEGS))
    assert resolve_controller_joints("leg", leg_controller(order), LEGS, "position") == order
    assert resolve_controller_joints("leg", leg_controller(order), LEGS, "position", given=order) == order
    with pytest.raises(
        ControllerMismatchError,
        match=r"leg_controller_joints \['LF_HAA'.*differs from the joint order of leg controller /leg_position",
    ):
        resolve_controller_joints("leg", leg_controller(order), LEGS, "position", given=LEGS)


@pytest.mark.parametrize(
    ("joints", "interface", "message"),
    [
        (LEGS[1:], "position", r"missing \['LF_HAA'\]"),
        ((*LEGS, "LF_WHEEL"), "position", r"not leg joints of the contract: \['LF_WHEEL'\]"),
        ((*LEGS[1:], LEGS[1]), "position", r"missing \['LF_HAA'\].*listed twice: \['LF_HFE'\]"),
        (LEGS, "velocity", r"commands the 'velocity' interface; the leg commands are position targets"),
    ],
)
def test_a_controller_that_does_not_fit_the_contract_is_refused_by_name(joints, interface, message):
    with pytest.raises(ControllerMismatchError, match=message):
        resolve_controller_joints("leg", leg_controller(joints, interface), LEGS, "position")


def test_the_controller_node_is_the_commands_topic_without_its_suffix():
    assert controller_node_of("/robot/leg_position_controller/commands") == "/robot/leg_position_controller"
    for topic in ("/leg_commands", "/commands"):
        with pytest.raises(ControllerMismatchError, match="not a forward command controller"):
            controller_node_of(topic)


def test_the_split_sends_each_target_to_the_joint_of_that_name():
    legs, wheels = tuple(reversed(LEGS)), (WHEELS[2], WHEELS[0], WHEELS[3], WHEELS[1])
    command = JointCommand.zeros(ROBOT.joint_names)
    command.position[:] = np.arange(len(ROBOT.joint_names))
    command.velocity[:] = 100 + np.arange(len(ROBOT.joint_names))
    split = Ros2ControlCommands(ROBOT.joint_names, legs, wheels)
    assert list(split.leg_positions(command)) == [ROBOT.joint_names.index(j) for j in legs]
    assert list(split.wheel_velocities(command)) == [100 + ROBOT.joint_names.index(j) for j in wheels]


def test_the_shipped_ros2_control_files_cover_every_joint_of_the_contract():
    """config/ros2_control.urdf and config/ros2_control_controllers.yaml (README, ros2_control robots)."""
    block = ET.parse(CONFIG / "ros2_control.urdf").getroot().find("ros2_control")
    joints = {j.get("name"): j for j in block.findall("joint")}
    assert list(joints) == list(ROBOT.joint_names)
    for name, joint in joints.items():
        command = "position" if name in LEGS else "velocity"
        assert [c.get("name") for c in joint.findall("command_interface")] == [command], name
        assert [s.get("name") for s in joint.findall("state_interface")] == ["position", "velocity"], name
    controllers = yaml.safe_load((CONFIG / "ros2_control_controllers.yaml").read_text())
    assert sorted(controllers["leg_position_controller"]["ros__parameters"]["joints"]) == sorted(LEGS)
    assert sorted(controllers["wheel_velocity_controller"]["ros__parameters"]["joints"]) == sorted(WHEELS)
