"""aow_policy.cdr against the reference serializers: rosbags' (always) and rclpy's (with ROS 2)."""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy.cdr import CdrError, JointStateDecoder, decode_joint_state, decode_odometry

TS = get_typestore(Stores.ROS2_HUMBLE)
Time = TS.types["builtin_interfaces/msg/Time"]
Header = TS.types["std_msgs/msg/Header"]
JointState = TS.types["sensor_msgs/msg/JointState"]
Odometry = TS.types["nav_msgs/msg/Odometry"]
g = "geometry_msgs/msg/"
Point, Quaternion, Pose, Vector3, Twist = (TS.types[g + n] for n in ("Point", "Quaternion", "Pose", "Vector3", "Twist"))
PoseCov, TwistCov = TS.types[g + "PoseWithCovariance"], TS.types[g + "TwistWithCovariance"]
RNG = np.random.default_rng(3)


def joint_state(names, frame="base", n_effort=None):
    n = len(names)
    return JointState(
        header=Header(stamp=Time(sec=1_700_000_123, nanosec=456_789), frame_id=frame),
        name=list(names),
        position=RNG.standard_normal(n),
        velocity=RNG.standard_normal(n),
        effort=RNG.standard_normal(n if n_effort is None else n_effort),
    )


def odometry(frame="odom", child="base"):
    v = RNG.standard_normal(13)
    pose = Pose(position=Point(x=v[0], y=v[1], z=v[2]), orientation=Quaternion(x=v[3], y=v[4], z=v[5], w=v[6]))
    twist = Twist(linear=Vector3(x=v[7], y=v[8], z=v[9]), angular=Vector3(x=v[10], y=v[11], z=v[12]))
    return Odometry(
        header=Header(stamp=Time(sec=-5, nanosec=999_999_999), frame_id=frame),
        child_frame_id=child,
        pose=PoseCov(pose=pose, covariance=RNG.standard_normal(36)),
        twist=TwistCov(twist=twist, covariance=RNG.standard_normal(36)),
    )


def cdr(msg) -> bytes:
    return bytes(TS.serialize_cdr(msg, msg.__msgtype__))


def assert_joint_state_equal(decoded, msg):
    assert (decoded.header.stamp.sec, decoded.header.stamp.nanosec) == (msg.header.stamp.sec, msg.header.stamp.nanosec)
    assert decoded.header.frame_id == msg.header.frame_id
    assert decoded.name == list(msg.name)
    for field in ("position", "velocity", "effort"):
        np.testing.assert_array_equal(getattr(decoded, field), getattr(msg, field))
        assert getattr(decoded, field).dtype == np.float64


@pytest.mark.parametrize(
    ("names", "frame", "n_effort"),
    [
        ([f"J{i}" for i in range(16)], "base", None),
        (["LF_HAA", "a", "bb", "ccc", "dddd"], "", None),  # odd string lengths: every alignment case
        (["x" * 7], "frame_with_7", 0),  # an empty array after a filled one
        ([], "", None),
        (["ü_joint", "ß"], "ünïcode", None),
    ],
)
def test_joint_state_equals_the_reference_serializer(names, frame, n_effort):
    msg = joint_state(names, frame, n_effort)
    assert_joint_state_equal(decode_joint_state(cdr(msg)), msg)


def test_joint_state_decoder_reuses_names_only_while_they_are_the_same_bytes():
    decoder = JointStateDecoder()
    first = joint_state([f"J{i}" for i in range(16)])
    assert_joint_state_equal(decoder(cdr(first)), first)
    again = joint_state([f"J{i}" for i in range(16)])
    assert_joint_state_equal(decoder(cdr(again)), again)
    renamed = joint_state([f"K{i}" for i in range(16)])  # same lengths, other names
    assert_joint_state_equal(decoder(cdr(renamed)), renamed)
    shuffled = joint_state([f"K{i}" for i in reversed(range(16))])
    assert_joint_state_equal(decoder(cdr(shuffled)), shuffled)
    decoded = decoder(cdr(shuffled))
    decoded.name.append("changed by a consumer")
    assert decoder(cdr(shuffled)).name == list(shuffled.name)


@pytest.mark.parametrize(("frame", "child"), [("odom", "base"), ("", ""), ("odom_1", "base_link_xyz")])
def test_odometry_equals_the_reference_serializer(frame, child):
    msg = odometry(frame, child)
    d = decode_odometry(cdr(msg))
    assert (d.header.stamp.sec, d.header.stamp.nanosec, d.header.frame_id) == (-5, 999_999_999, frame)
    assert d.child_frame_id == child
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    assert (d.pose.pose.position.x, d.pose.pose.position.y, d.pose.pose.position.z) == (p.x, p.y, p.z)
    o = d.pose.pose.orientation
    assert (o.x, o.y, o.z, o.w) == (q.x, q.y, q.z, q.w)
    lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
    assert (d.twist.twist.linear.x, d.twist.twist.linear.y, d.twist.twist.linear.z) == (lin.x, lin.y, lin.z)
    assert (d.twist.twist.angular.x, d.twist.twist.angular.y, d.twist.twist.angular.z) == (ang.x, ang.y, ang.z)
    np.testing.assert_array_equal(d.pose.covariance, msg.pose.covariance)
    np.testing.assert_array_equal(d.twist.covariance, msg.twist.covariance)


def test_what_it_does_not_decode_is_refused_naming_why():
    data = cdr(joint_state(["a", "b"]))
    with pytest.raises(CdrError, match="little-endian"):
        decode_joint_state(b"\x00\x00" + data[2:])  # big-endian encapsulation: rclpy's turn
    for cut in (3, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(CdrError):
            decode_joint_state(data[:cut])
    odom = cdr(odometry())
    with pytest.raises(CdrError):
        decode_odometry(odom[: len(odom) - 8])


@pytest.mark.ros
def test_decoders_equal_rclpy_deserialization():
    from nav_msgs.msg import Odometry as RosOdometry
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState as RosJointState

    msg = joint_state([f"J{i}" for i in range(16)])
    data = cdr(msg)
    ros = deserialize_message(data, RosJointState)
    d = decode_joint_state(data)
    assert d.name == list(ros.name) and d.header.frame_id == ros.header.frame_id
    for field in ("position", "velocity", "effort"):
        np.testing.assert_array_equal(getattr(d, field), np.asarray(getattr(ros, field)))
    data = cdr(odometry())
    ros = deserialize_message(data, RosOdometry)
    d = decode_odometry(data)
    assert d.pose.pose.orientation.w == ros.pose.pose.orientation.w
    assert d.twist.twist.angular.z == ros.twist.twist.angular.z
    np.testing.assert_array_equal(d.twist.covariance, np.asarray(ros.twist.covariance))
