"""The rclpy nodes end to end (needs ROS 2: skipped with the reason printed where rclpy is absent)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from aow_policy.monitor_log import read_log
from aow_policy.robot import load_robot
from aow_policy.testing import locomotion_layout, policy_contract_for, write_onnx_policy

pytestmark = pytest.mark.ros
ROBOT = load_robot()


@pytest.fixture(scope="module")
def ros():
    import rclpy

    rclpy.init()
    yield rclpy
    rclpy.try_shutdown()


class Harness:
    """A helper node that plays the robot (joint states, odometry) and records the commands."""

    def __init__(self, rclpy, nodes):
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import JointState

        from aow_policy.node_support import rclpy_message_factory

        self.factory = rclpy_message_factory()
        self.node = rclpy.create_node("aow_test_harness")
        self.js_pub = self.node.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
        self.odom_pub = self.node.create_publisher(Odometry, "odometry", qos_profile_sensor_data)
        self.commands = []
        self.node.create_subscription(JointState, "joint_commands", self.commands.append, 10)
        self.executor = SingleThreadedExecutor()
        for n in (*nodes, self.node):
            self.executor.add_node(n)
        self.velocity = np.zeros(len(ROBOT.joint_names))

    def publish_state(self):
        """One joint state and one odometry message, stamped now."""
        from aow_policy.messages import joint_state_msg, odometry_msg

        now = self.node.get_clock().now().nanoseconds * 1e-9
        n = len(ROBOT.joint_names)
        self.js_pub.publish(
            joint_state_msg(self.factory, ROBOT.joint_names, ROBOT.default_positions, self.velocity, np.zeros(n), now)
        )
        self.odom_pub.publish(odometry_msg(self.factory, (0, 0, 0.55), (0, 0, 0, 1), (0, 0, 0), (0, 0, 0), now))

    def pump(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.publish_state()
            self.executor.spin_once(timeout_sec=0.005)

    def call(self, service):
        from std_srvs.srv import Trigger

        client = self.node.create_client(Trigger, service)
        assert client.wait_for_service(timeout_sec=5.0), service
        future = client.call_async(Trigger.Request())
        self.executor.spin_until_future_complete(future, timeout_sec=5.0)
        return future.result()


def controller_node(tmp_path):
    """A ControllerNode with a random no-scan policy and a 0.2 s stand-up."""
    from rclpy.parameter import Parameter

    from aow_policy.controller_node import ControllerNode

    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT, height_scan=False))
    policy = write_onnx_policy(tmp_path / "policy.onnx", contract)
    return ControllerNode(
        parameter_overrides=[Parameter("policy", value=str(policy)), Parameter("stand_up_duration", value=0.2)]
    )


def test_controller_node_services_and_commands(ros, tmp_path):

    node = controller_node(tmp_path)
    harness = Harness(ros, [node])
    try:
        harness.pump(0.3)
        assert node.core.state.value == "ZERO_TORQUE"
        assert harness.commands, "no commands published"
        response = harness.call("/controller_node/start")
        assert response.success, response.message
        harness.pump(0.6)
        assert node.core.state.value == "POLICY", node.core.fault
        last = harness.commands[-1]
        assert list(last.name) == list(ROBOT.joint_names)
        legs = ROBOT.leg_indices
        assert np.all(np.asarray(last.position)[legs] >= ROBOT.position_lower[legs])
        assert np.all(np.asarray(last.position)[legs] <= ROBOT.position_upper[legs])
        assert harness.call("/controller_node/stop").success
        harness.pump(0.1)
        assert node.core.state.value == "DAMPING"
    finally:
        node.destroy_node()
        harness.node.destroy_node()


def test_violation_monitor_node_logs_events_and_summary(ros, tmp_path):
    from rclpy.parameter import Parameter

    from aow_policy.violation_monitor_node import ViolationMonitorNode

    node = ViolationMonitorNode(
        parameter_overrides=[Parameter("log_dir", value=str(tmp_path)), Parameter("summary_period", value=0.2)]
    )
    harness = Harness(ros, [node])
    try:
        harness.pump(0.3)
        harness.velocity[ROBOT.joint_names.index("LF_HFE")] = 8.0  # over the 6 rad/s constraint
        harness.pump(0.2)
        harness.velocity[:] = 0.0
        harness.pump(0.3)
    finally:
        node.close()
        node.destroy_node()
        harness.node.destroy_node()
    records = read_log(node.log.path)
    assert records[0]["type"] == "start" and records[-1]["type"] == "summary"
    events = [r for r in records if r["type"] == "event"]
    assert [(e["quantity"], e["joint"]) for e in events] == [("velocity", "LF_HFE")]
    assert any(r["type"] == "interval" for r in records)


def test_controller_node_after_a_stall_uses_the_inputs_waiting_in_its_queue(ros, tmp_path):
    """rclpy's executor runs a ready timer before ready subscriptions: after the process stalled
    (here: nothing spun the node for 0.2 s while the robot kept publishing), the control step must
    take the joint states and odometry waiting in the queue instead of faulting on their age."""
    node = controller_node(tmp_path)
    harness = Harness(ros, [node])
    try:
        harness.pump(0.3)
        assert harness.call("/controller_node/start").success
        harness.pump(0.6)
        assert node.core.state.value == "POLICY", node.core.fault
        end = time.monotonic() + 0.2  # the stall: publish, but do not spin the controller
        while time.monotonic() < end:
            harness.publish_state()
            time.sleep(0.0025)
        assert node.core.state.value == "POLICY"
        harness.executor.spin_once(timeout_sec=0.1)  # the overdue control timer comes first
        harness.pump(0.1)
        assert node.core.state.value == "POLICY", node.core.fault
    finally:
        node.destroy_node()
        harness.node.destroy_node()
