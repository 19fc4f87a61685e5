"""output_mode ros2_control against ros2_control itself (needs ROS 2 and the ros2_control overlay: `ros` marker).

As the package README's "ros2_control robots" section runs it: ros2_control_node with mock hardware
(config/ros2_control.urdf) and config/ros2_control_controllers.yaml, whose joint lists the test puts
in an order unlike the contract's; the spawner; ``ros2 launch aow_policy controller.launch.py`` with
``output_mode: ros2_control``. The test process publishes odometry and reads joint_states from the
joint_state_broadcaster: mock hardware copies each command to the state of the same joint, so what a
joint reports is what the node commanded to that joint's name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from aow_policy.robot import load_robot
from aow_policy.testing import locomotion_layout, policy_contract_for, write_onnx_policy
from bench import ros_graph
from tests.conftest import ros_requirement

pytestmark = pytest.mark.ros
ROBOT = load_robot()
CONFIG = ros_graph.PACKAGE_SRC / "config"
CONTROL_SETUP = Path(os.environ.get("AOW_ROS2_CONTROL_SETUP", "/opt/ros2_control_humble/setup.bash"))
# the controllers' joint orders: unlike the contract's, and every leg moves to a joint of another default
LEG_ORDER = [ROBOT.leg_joint_names[i] for i in (11, 4, 9, 0, 7, 2, 5, 10, 1, 8, 3, 6)]
WHEEL_ORDER = list(reversed(ROBOT.wheel_joint_names))
STOP_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """ROS 2 + ros2_control + the package overlay; ros2_control_node with both forward controllers."""
    if ros_graph.ros_setup_script() is None:
        ros_requirement("no ROS 2 installation found")
    if not CONTROL_SETUP.is_file():
        ros_requirement(f"no ros2_control overlay at {CONTROL_SETUP} (../shared/ros2/install.sh installs it)")
    try:
        python = ros_graph.node_interpreter()
    except ros_graph.RosGraphError as e:
        ros_requirement(str(e))
    root = tmp_path_factory.mktemp("ros2_control")
    overlay = ros_graph.build_overlay(root / "overlay", python)
    domain = ros_graph.free_domain_id()
    env = ros_graph.sourced_environment(
        ros_graph.ros_setup_script(), CONTROL_SETUP, overlay / "install" / "local_setup.bash"
    )
    env.update(ROS_DOMAIN_ID=str(domain), ROS_LOCALHOST_ONLY="1", PYTHONUNBUFFERED="1", RCUTILS_COLORIZED_OUTPUT="0")
    env["RMW_IMPLEMENTATION"] = env.get("RMW_IMPLEMENTATION", "rmw_cyclonedds_cpp")
    controllers = yaml.safe_load((CONFIG / "ros2_control_controllers.yaml").read_text())
    controllers["leg_position_controller"]["ros__parameters"]["joints"] = LEG_ORDER
    controllers["wheel_velocity_controller"]["ros__parameters"]["joints"] = WHEEL_ORDER
    (root / "controllers.yaml").write_text(yaml.safe_dump(controllers))
    # humble's controller_manager takes the URDF as its robot_description parameter (README)
    description = {
        "controller_manager": {"ros__parameters": {"robot_description": (CONFIG / "ros2_control.urdf").read_text()}}
    }
    (root / "robot_description.yaml").write_text(yaml.safe_dump(description))
    manager = ros_graph.LaunchedProcess(
        ["ros2", "run", "controller_manager", "ros2_control_node", "--ros-args",
         "--params-file", str(root / "controllers.yaml"), "--params-file", str(root / "robot_description.yaml")],
        env, root / "controller_manager.log",
    )  # fmt: skip
    with manager:
        spawner = ros_graph.LaunchedProcess(
            ["ros2", "run", "controller_manager", "spawner", "joint_state_broadcaster", "leg_position_controller",
             "wheel_velocity_controller", "-c", "/controller_manager", "--controller-manager-timeout", "60"],
            env, root / "spawner.log",
        )  # fmt: skip
        with spawner:
            assert spawner.wait(120) == 0, spawner.output() + manager.output()
        yield {"env": env, "domain": domain, "root": root, "manager": manager}


def write_params(path: Path, **overrides) -> Path:
    params = yaml.safe_load((CONFIG / "controller.yaml").read_text())
    node = params["/**/controller_node"]["ros__parameters"]
    # input max ages as test_ros_graph's fast_params (a 2-core machine shared with other work)
    node.update(output_mode="ros2_control", stand_up_duration=1.0, diagnostics_period=0.1)
    node.update(joint_states_max_age=0.15, odometry_max_age=0.15, controller_manager_timeout=30.0)
    node.update(overrides)
    path.write_text(yaml.safe_dump(params))
    return path


def launch(graph, tmp_path, params):
    policy = write_onnx_policy(
        tmp_path / "policy.onnx", policy_contract_for(ROBOT, locomotion_layout(ROBOT, height_scan=False))
    )
    arguments = {"policy": str(policy), "params_file": str(params), "use_monitor": "false"}
    argv = ["ros2", "launch", "aow_policy", "controller.launch.py", *(f"{k}:={v}" for k, v in arguments.items())]
    return ros_graph.LaunchedProcess(argv, graph["env"], tmp_path / "launch.log")


class Recorder:
    """The operator (ros_graph.RobotStandIn without its robot) plus odometry at 100 Hz, and records of
    joint_states (by name) and of both controllers' command arrays."""

    def __init__(self, domain: int):
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, qos_profile_sensor_data
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from aow_policy.messages import odometry_msg

        self.operator = ros_graph.RobotStandIn(ROBOT, domain, play_robot=False)
        node, factory = self.operator.node, self.operator.factory
        self.states: list[tuple[float, dict[str, float], dict[str, float]]] = []
        self.legs: list[tuple[float, np.ndarray]] = []
        self.wheels: list[tuple[float, np.ndarray]] = []
        odom_pub = node.create_publisher(Odometry, "odometry", qos_profile_sensor_data)
        node.create_timer(
            0.01,
            lambda: odom_pub.publish(
                odometry_msg(factory, (0, 0, 0.55), (0, 0, 0, 1), (0, 0, 0), (0, 0, 0), self.operator.now())
            ),
        )
        node.create_subscription(JointState, "joint_states", self._on_state, qos_profile_sensor_data)
        deep = QoSProfile(depth=100)
        node.create_subscription(Float64MultiArray, "leg_position_controller/commands", self._on_legs, deep)
        node.create_subscription(Float64MultiArray, "wheel_velocity_controller/commands", self._on_wheels, deep)

    def _on_state(self, msg):
        names = list(msg.name)
        self.states.append(
            (time.monotonic(), dict(zip(names, msg.position, strict=True)), dict(zip(names, msg.velocity, strict=True)))
        )

    def _on_legs(self, msg):
        self.legs.append((time.monotonic(), np.array(msg.data)))

    def _on_wheels(self, msg):
        self.wheels.append((time.monotonic(), np.array(msg.data)))

    def close(self):
        self.operator.close()


def by_name(values: dict[str, float], names: list[str]) -> np.ndarray:
    return np.array([values[n] for n in names])


def test_ros2_control_mock_robot_stands_up_runs_the_policy_and_damps_joint_by_joint(graph, tmp_path):
    legs_default = by_name(dict(zip(ROBOT.joint_names, ROBOT.default_positions, strict=True)), LEG_ORDER)
    assert not np.array_equal(legs_default, ROBOT.default_positions[: len(LEG_ORDER)])  # the order matters
    process = launch(graph, tmp_path, write_params(tmp_path / "params.yaml"))
    recorder = Recorder(graph["domain"])
    try:
        with process:
            assert process.wait_for_output("call ~/start", 60), process.output()
            # the node follows the controllers' own joint order, read from the controller_manager
            assert f"/leg_position_controller joints {LEG_ORDER}" in process.output()
            assert f"/wheel_velocity_controller joints {WHEEL_ORDER}" in process.output()
            ok, message = recorder.operator.start()
            assert ok, message + process.output()
            reached = recorder.operator.wait_for_state("POLICY", 10.0)
            assert reached is not None, process.output()
            time.sleep(2.0)  # the policy drives

            # stand-up: its last command is exactly the default pose, and each joint reached it by name
            assert any(np.array_equal(data, legs_default) for _, data in recorder.legs)
            assert any(np.array_equal(by_name(p, LEG_ORDER), legs_default) for _, p, _ in recorder.states)

            # POLICY: every command within the limits of the joint the controller drives with it
            policy_legs = [d for t, d in recorder.legs if t > reached.t]
            policy_wheels = [d for t, d in recorder.wheels if t > reached.t]
            assert len(policy_legs) > 50 and not all(np.array_equal(d, legs_default) for d in policy_legs)
            index = [ROBOT.joint_names.index(n) for n in LEG_ORDER]
            low, high = ROBOT.position_lower[index], ROBOT.position_upper[index]
            assert all(((d >= low) & (d <= high)).all() for d in policy_legs)
            wheel_limit = ROBOT.velocity_limits[[ROBOT.joint_names.index(n) for n in WHEEL_ORDER]]
            assert any(np.abs(d).max() > 0 for d in policy_wheels)
            assert all((np.abs(d) <= wheel_limit).all() for d in policy_wheels)
            # ... and what each joint reports is an element the node sent for that joint's name
            sent_legs = {tuple(d) for d in policy_legs}
            sent_wheels = {tuple(d) for d in policy_wheels}
            window = [(p, v) for t, p, v in recorder.states if t > reached.t + 0.2]
            legs_match = [tuple(by_name(p, LEG_ORDER)) in sent_legs for p, _ in window]
            wheels_match = [tuple(by_name(v, WHEEL_ORDER)) in sent_wheels for _, v in window]
            assert len(window) > 100 and np.mean(legs_match) > 0.95 and np.mean(wheels_match) > 0.95

            # shutdown from POLICY: the last command is DAMPING (wheels 0, legs held where they are)
            signalled_at = time.monotonic()
            process.signal("sigint")
            assert process.wait(STOP_TIMEOUT) == 0, process.output()
            assert "sent the last DAMPING command" in process.output()
            time.sleep(0.5)
            last_legs, last_wheels = recorder.legs[-1][1], recorder.wheels[-1][1]
            assert recorder.legs[-1][0] > signalled_at and recorder.wheels[-1][0] > signalled_at
            assert np.array_equal(last_wheels, np.zeros(len(WHEEL_ORDER)))
            held = [p for t, p, _ in recorder.states if t < signalled_at][-1]
            assert np.allclose(last_legs, by_name(held, LEG_ORDER), atol=0.05)  # one policy period of motion
            # the controller_manager goes on, holding those targets joint by joint
            assert graph["manager"].process.poll() is None
            after = recorder.states[-1]
            assert after[0] > signalled_at + 0.4
            assert np.array_equal(by_name(after[1], LEG_ORDER), last_legs)
            assert np.array_equal(by_name(after[2], WHEEL_ORDER), last_wheels)
    finally:
        recorder.close()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"leg_controller_joints": ",".join(ROBOT.leg_joint_names)},
            "leg_controller_joints ['LF_HAA', 'LF_HFE', 'LF_KFE', 'RF_HAA'",
        ),
        (
            {"wheel_controller_topic": "wheel_effort_controller/commands", "controller_manager_timeout": 8.0},
            "has no controller /wheel_effort_controller after 8.0 s",
        ),
    ],
)
def test_the_node_refuses_to_start_naming_a_controller_mismatch(graph, tmp_path, overrides, expected):
    process = launch(graph, tmp_path, write_params(tmp_path / "params.yaml", **overrides))
    with process:
        code = process.wait(60)
        output = process.output()
    # the launch ends (its on_exit shutdown) with the node's exit code 1 and one line naming the mismatch
    assert code is not None and "process has died" in output and "exit code 1" in output, output
    fatal = [line for line in output.splitlines() if "FATAL" in line]
    assert len(fatal) == 1 and "cannot start" in fatal[0] and expected in fatal[0], output
    assert "call ~/start" not in output
