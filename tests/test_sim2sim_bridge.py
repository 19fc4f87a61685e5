"""The sim bridge: its ROS-free core wired to the controller core as the two nodes would be, and the node
itself where rclpy exists (marked ``ros``)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy.controller import ControllerConfig, ControllerCore, ControllerState
from aow_policy.messages import MessageFactory, joint_command_msg
from aow_policy.robot import load_robot
from aow_policy.testing import FakePolicy, locomotion_layout, policy_contract_for
from sim2sim.bridge import BRIDGE_PARAMS, CLOCK_TOPIC, BridgeConfig, SimBridge, build_bridge_parser, parameter_overrides
from sim2sim.commands import CommandSchedule, Segment

ROBOT = load_robot()
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))


def test_tick_publishes_one_control_period_of_sensors_clock_and_script():
    sent = []
    schedule = CommandSchedule([Segment("go", 0.0, 1.0, 0.7, 0.0, 0.0)])
    bridge = SimBridge(
        ROBOT, F, lambda topic, msg, t: sent.append((topic, msg, t)), BridgeConfig(commands_delay=0.1), schedule
    )
    assert bridge.steps_per_tick == 8 and bridge.tick_period == pytest.approx(0.02)
    for _ in range(10):  # 0.2 s
        bridge.tick()
    topics = [s[0] for s in sent]
    assert topics.count("/joint_states") == 80 and topics.count(CLOCK_TOPIC) == 80
    assert topics.count("/odometry") == 20 and topics.count("/elevation_map") == 2 and topics.count("/cmd_vel") == 10
    clocks = [m.clock.sec + m.clock.nanosec * 1e-9 for topic, m, _ in sent if topic == CLOCK_TOPIC]
    np.testing.assert_allclose(clocks, np.arange(1, 81) / 400.0, atol=1e-9)  # states after each step
    twists = [(t, m.linear.x) for topic, m, t in sent if topic == "/cmd_vel"]
    assert [vx for t, vx in twists] == [0.0 if t < 0.1 else 0.7 for t, _ in twists] and twists[-1][1] == 0.7
    assert bridge.time == pytest.approx(0.2)


def test_bridge_and_controller_core_wired_like_the_nodes_stand_and_run_the_policy():
    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT))
    core = ControllerCore(ROBOT, FakePolicy(contract), ControllerConfig(stand_up_duration=0.5))
    inputs = {
        "/joint_states": core.on_joint_state,
        "/odometry": core.on_odometry,
        "/elevation_map": core.on_grid_map,
        "/cmd_vel": core.on_command,
    }

    def deliver(topic, msg, t):
        if topic in inputs:
            inputs[topic](msg, t)

    bridge = SimBridge(ROBOT, F, deliver)
    states = []
    for _ in range(100):  # 2 s: the controller node's timer, then the bridge's tick
        now = bridge.time
        if core.state is ControllerState.ZERO_TORQUE:
            core.start(now)
        command = core.step(now)
        if command.has_measurement:
            assert bridge.on_joint_command(joint_command_msg(F, command))
        states.append(core.state)
        bridge.tick()
    # no joint state before the first tick, so ~/start succeeds on the second period
    assert states[:2] == [ControllerState.ZERO_TORQUE, ControllerState.STAND_UP]
    assert states[-1] is ControllerState.POLICY, core.fault
    hw = bridge.hardware
    assert hw.commands_refused == 0 and hw.command_active
    # zero actions hold the default pose: the robot stands, level
    assert hw.height_above_ground > 0.4 and hw.tilt < 0.1
    np.testing.assert_allclose(
        hw.joint_position[ROBOT.leg_indices], ROBOT.default_positions[ROBOT.leg_indices], atol=0.35
    )


def test_command_line_options_set_declared_parameters_and_pass_ros_args_through():
    overrides, ros_args = parameter_overrides(
        ["--terrain", "rough", "--seed", "4", "--no-clock", "--real-time-factor", "2", "--ros-args", "-p", "a:=1"]
    )
    assert overrides == {"terrain": "rough", "seed": 4, "publish_clock": False, "real_time_factor": 2.0}
    assert ros_args == ["--ros-args", "-p", "a:=1"]
    assert parameter_overrides([]) == ({}, [])
    specs = {spec.name: spec for spec in BRIDGE_PARAMS}
    for action in build_bridge_parser()._actions:
        if action.dest == "help":
            continue
        spec = specs[action.dest]  # every option is a declared parameter
        assert action.type in (None, type(spec.default)) or (action.type is float and isinstance(spec.default, float))
    for name, value in overrides.items():
        specs[name].check(value)
        assert type(value) is type(specs[name].default)


def test_without_a_clock_messages_are_stamped_from_the_given_offset():
    sent = []
    bridge = SimBridge(ROBOT, F, lambda topic, msg, t: sent.append((topic, msg, t)), BridgeConfig(publish_clock=False))
    bridge.hardware.stamp_offset = 1_700_000_000.25
    bridge.tick()
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for topic, m, _ in sent if topic == "/joint_states"]
    np.testing.assert_allclose(np.array(stamps) - 1_700_000_000.25, np.arange(1, 9) / 400.0, atol=1e-6)
    assert CLOCK_TOPIC not in {topic for topic, _, _ in sent}


@pytest.mark.ros
def test_bridge_node_publishes_joint_states_and_clock():  # pragma: no cover - needs ROS 2
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState

    from sim2sim.bridge_node import SimBridgeNode

    rclpy.init()
    try:
        bridge = SimBridgeNode()
        listener = Node("listener")
        got = {"joint_states": [], "clock": []}
        listener.create_subscription(JointState, "joint_states", got["joint_states"].append, 100)
        listener.create_subscription(Clock, "/clock", got["clock"].append, 100)
        executor = SingleThreadedExecutor()
        executor.add_node(bridge)
        executor.add_node(listener)
        deadline = time.monotonic() + 5.0
        while len(got["joint_states"]) < 40 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert len(got["joint_states"]) >= 40 and got["clock"]
        assert tuple(got["joint_states"][0].name) == ROBOT.joint_names
        bridge.destroy_node()
        listener.destroy_node()
    finally:
        rclpy.try_shutdown()


def test_the_seed_parameter_defaults_to_each_terrains_own_seed():
    """-1 (the parameter's default) is 'unset': the course comes up with the blocks sim2sim.evaluate scores."""
    from sim2sim.world import COURSE_SEED

    spec = next(p for p in BRIDGE_PARAMS if p.name == "seed")
    assert spec.default == -1 and str(COURSE_SEED) in spec.description
    factory = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
    robot = load_robot()

    def heights(seed):
        bridge = SimBridge(robot, factory, lambda *a: None, BridgeConfig(terrain="course", seed=seed))
        return bridge.hardware.world.model.hfield_data.copy()

    assert np.array_equal(heights(None), heights(COURSE_SEED))
    assert not np.array_equal(heights(None), heights(0))
