"""Message conversions with rosbags' message classes (real ROS 2 definitions) and rclpy-like objects."""

from __future__ import annotations

import array
import math
from types import SimpleNamespace

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy.messages import (
    MessageError,
    MessageFactory,
    MissingJointsError,
    Ros2ControlCommands,
    float64_multi_array_msg,
    float64_multi_array_to_array,
    grid_map_layer,
    grid_map_msg,
    joint_command_msg,
    joint_state_msg,
    joint_state_to_arrays,
    odometry_msg,
    odometry_to_base_state,
    seconds_to_sec_nanosec,
    stamp_to_seconds,
    twist_msg,
    twist_to_command,
)
from aow_policy.robot import load_robot

TS = get_typestore(Stores.ROS2_HUMBLE)
FACTORY = MessageFactory.from_typestore(TS)
T = TS.types
ROBOT = load_robot()
NAMES = ROBOT.joint_names


def roundtrip(msg):
    """Serialize to CDR and back: proves the message is well-typed for a real bag."""
    return TS.deserialize_cdr(TS.serialize_cdr(msg, msg.__msgtype__), msg.__msgtype__)


def header(t=1.25, frame="odom"):
    sec, nsec = seconds_to_sec_nanosec(t)
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec), frame_id=frame)


# ---- JointState --------------------------------------------------------------------------------


def joint_state(names, pos, vel, eff):
    return T["sensor_msgs/msg/JointState"](
        header=header(),
        name=list(names),
        position=np.asarray(pos, float),
        velocity=np.asarray(vel, float),
        effort=np.asarray(eff, float),
    )


def test_joint_state_shuffled_with_extra_joints_is_matched_by_name():
    rng = np.random.default_rng(0)
    names = [*NAMES, "arm_joint", "lidar_spin"]
    values = {n: (rng.normal(), rng.normal(), rng.normal()) for n in names}
    order = rng.permutation(len(names))
    shuffled = [names[i] for i in order]
    msg = joint_state(shuffled, *zip(*(values[n] for n in shuffled), strict=True))
    out = joint_state_to_arrays(roundtrip(msg), NAMES)
    np.testing.assert_array_equal(out.position, [values[n][0] for n in NAMES])
    np.testing.assert_array_equal(out.velocity, [values[n][1] for n in NAMES])
    np.testing.assert_array_equal(out.effort, [values[n][2] for n in NAMES])
    assert out.has_velocity and out.has_effort
    assert out.stamp == pytest.approx(1.25)


def test_joint_state_missing_joint_is_refused_and_named():
    names = [n for n in NAMES if n != "RH_KFE"]
    msg = joint_state(names, np.zeros(15), np.zeros(15), np.zeros(15))
    with pytest.raises(MissingJointsError) as e:
        joint_state_to_arrays(msg, NAMES)
    assert e.value.missing == ("RH_KFE",)
    assert "RH_KFE" in str(e.value)


def test_joint_state_from_rclpy_style_sequences_and_empty_fields():
    # rclpy gives array.array('d') for float64[] and a list of str for names
    msg = SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=3, nanosec=500_000_000), frame_id=""),
        name=list(reversed(NAMES)),
        position=array.array("d", range(16)),
        velocity=[float(i) * 10 for i in range(16)],
        effort=array.array("d"),
    )
    out = joint_state_to_arrays(msg, NAMES)
    np.testing.assert_array_equal(out.position, np.arange(16)[::-1])
    np.testing.assert_array_equal(out.velocity, 10.0 * np.arange(16)[::-1])
    assert not out.has_effort and np.isnan(out.effort).all()
    assert out.stamp == 3.5


def test_joint_state_malformed_lengths_and_duplicates_refused():
    msg = joint_state(NAMES, np.zeros(16), np.zeros(3), [])
    with pytest.raises(MessageError, match="velocity has 3 values for 16 names"):
        joint_state_to_arrays(msg, NAMES)
    msg = joint_state([*NAMES, "LF_HAA"], np.zeros(17), [], [])
    with pytest.raises(MessageError, match="twice"):
        joint_state_to_arrays(msg, NAMES)


def test_joint_state_builder_roundtrips_through_cdr():
    pos, vel, eff = np.arange(16) * 0.1, np.arange(16) * -0.2, np.arange(16) * 3.0
    msg = roundtrip(joint_state_msg(FACTORY, NAMES, pos, vel, eff, stamp=12.000000001))
    assert list(msg.name) == list(NAMES)
    np.testing.assert_array_equal(msg.position, pos)
    np.testing.assert_array_equal(msg.effort, eff)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (12, 1)


# ---- Odometry ----------------------------------------------------------------------------------


def quat_from_rpy(roll, pitch, yaw):
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return (
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
        cr * cp * cy + sr * sp * sy,
    )


def test_odometry_gravity_yaw_and_base_frame_twist():
    pitch, yaw = 0.3, 1.1
    q = quat_from_rpy(0.0, pitch, yaw)
    msg = roundtrip(odometry_msg(FACTORY, (1.0, 2.0, 0.6), q, (0.5, -0.1, 0.02), (0.01, 0.02, 0.7), stamp=4.0))
    base = odometry_to_base_state(msg)
    np.testing.assert_allclose(base.position, (1.0, 2.0, 0.6))
    # pitch rotates gravity in the base x-z plane; yaw does not change it
    np.testing.assert_allclose(base.projected_gravity, (math.sin(pitch), 0.0, -math.cos(pitch)), atol=1e-12)
    assert base.yaw == pytest.approx(yaw)
    np.testing.assert_allclose(base.linear_velocity, (0.5, -0.1, 0.02))  # REP 105: already in the base frame
    np.testing.assert_allclose(base.angular_velocity, (0.01, 0.02, 0.7))
    assert (base.frame_id, base.child_frame_id, base.stamp) == ("odom", "base", 4.0)
    assert base.quaternion_norm == pytest.approx(1.0)


def test_odometry_twist_in_parent_frame_is_rotated_into_the_base():
    yaw = math.pi / 2  # base x axis = odom y axis
    msg = odometry_msg(FACTORY, (0, 0, 0.5), quat_from_rpy(0, 0, yaw), (0.0, 1.0, 0.0), (0.0, 0.0, 0.3))
    base = odometry_to_base_state(msg, twist_frame="parent")
    np.testing.assert_allclose(base.linear_velocity, (1.0, 0.0, 0.0), atol=1e-12)
    np.testing.assert_allclose(base.angular_velocity, (0.0, 0.0, 0.3), atol=1e-12)


def test_odometry_keeps_a_corrupt_quaternion_norm_for_the_caller():
    msg = odometry_msg(FACTORY, (0, 0, 0.5), (0.0, 0.0, 0.0, 2.0), (0, 0, 0), (0, 0, 0))
    base = odometry_to_base_state(msg)
    assert base.quaternion_norm == 2.0
    np.testing.assert_allclose(base.projected_gravity, (0, 0, -1))


# ---- Twist -------------------------------------------------------------------------------------


def test_twist_clipped_to_the_contract_command_ranges():
    low, high = ROBOT.commands.low, ROBOT.commands.high
    msg = roundtrip(twist_msg(FACTORY, 5.0, -0.5, -9.0))
    np.testing.assert_array_equal(twist_to_command(msg, low, high), (high[0], -0.5, low[2]))
    raw = T["geometry_msgs/msg/Twist"](
        linear=T["geometry_msgs/msg/Vector3"](x=0.3, y=0.2, z=7.0),  # z and roll/pitch rates are ignored
        angular=T["geometry_msgs/msg/Vector3"](x=1.0, y=1.0, z=0.4),
    )
    np.testing.assert_array_equal(twist_to_command(raw, low, high), (0.3, 0.2, 0.4))
    nan = twist_msg(FACTORY, float("nan"), 0.0, 0.0)
    assert math.isnan(twist_to_command(nan, low, high)[0])  # not clipped into a number


# ---- GridMap builder ---------------------------------------------------------------------------


@pytest.mark.parametrize("row_major", [False, True])
def test_grid_map_builder_roundtrip(row_major):
    rng = np.random.default_rng(3)
    heights = rng.normal(size=(12, 7)).astype(np.float32)
    msg = roundtrip(
        grid_map_msg(
            FACTORY,
            {"elevation": heights},
            0.2,
            (3.0, -1.0),
            stamp=2.5,
            outer_start=5,
            inner_start=2,
            row_major=row_major,
        )
    )
    assert (msg.outer_start_index, msg.inner_start_index) == (5, 2)
    layer = grid_map_layer(msg)
    assert (layer.rows, layer.cols, layer.frame_id, layer.stamp) == (12, 7, "odom", 2.5)
    np.testing.assert_array_equal(layer.to_unwrapped(), heights)
    # the buffer really is rotated: cell (0, 0) of the buffer is unwrapped index (-5, -2) mod size
    buf = np.asarray(msg.data[0].data).reshape((12, 7) if row_major else (7, 12))
    first = buf[0, 0]
    assert first == heights[(0 - 5) % 12, (0 - 2) % 7]


# ---- outgoing commands -------------------------------------------------------------------------


def command(state=0.0):
    n = len(NAMES)
    return SimpleNamespace(
        joint_names=NAMES,
        position=np.linspace(-1, 1, n),
        velocity=np.linspace(5, -5, n),
        effort=np.zeros(n),
        stamp=7.5,
    )


def test_joint_command_message_and_ros2_control_split():
    cmd = command()
    msg = roundtrip(joint_command_msg(FACTORY, cmd))
    assert list(msg.name) == list(NAMES)
    np.testing.assert_array_equal(msg.position, cmd.position)
    np.testing.assert_array_equal(msg.velocity, cmd.velocity)
    assert stamp_to_seconds(msg.header.stamp) == 7.5

    legs = list(reversed(ROBOT.leg_joint_names))  # a controller configured in another order
    split = Ros2ControlCommands(NAMES, legs, ROBOT.wheel_joint_names)
    leg_msg, wheel_msg = (roundtrip(m) for m in split.messages(FACTORY, cmd))
    np.testing.assert_array_equal(float64_multi_array_to_array(leg_msg), cmd.position[ROBOT.index_of(legs)])
    np.testing.assert_array_equal(
        float64_multi_array_to_array(wheel_msg), cmd.velocity[ROBOT.index_of(ROBOT.wheel_joint_names)]
    )
    assert leg_msg.layout.dim[0].size == 12
    with pytest.raises(MessageError, match="arm"):
        Ros2ControlCommands(NAMES, ["arm"], [])


class _RclpyLike:
    """Mimics rclpy's generated classes: keyword defaults; float64[] must be array.array('d')."""

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            if key in ("position", "velocity", "effort", "data"):
                assert isinstance(value, array.array) and value.typecode == "d", key
            setattr(self, key, value)


def test_rclpy_style_factory_gets_array_array_sequences():
    types = {
        name: type(name, (_RclpyLike,), {})
        for name in (
            "sensor_msgs/msg/JointState",
            "std_msgs/msg/Header",
            "builtin_interfaces/msg/Time",
            "std_msgs/msg/Float64MultiArray",
            "std_msgs/msg/MultiArrayLayout",
            "std_msgs/msg/MultiArrayDimension",
        )
    }
    factory = MessageFactory(types)
    assert not factory.numpy_sequences
    msg = joint_command_msg(factory, command())
    assert list(msg.position) == list(command().position)
    arr = float64_multi_array_msg(factory, [1.0, 2.0])
    assert list(arr.data) == [1.0, 2.0]
    np.testing.assert_array_equal(float64_multi_array_to_array(arr), [1.0, 2.0])
