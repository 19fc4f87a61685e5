"""nav_msgs/Odometry -> base pose, base-frame twist and projected gravity (:class:`BaseState`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aow_policy.msg_common import stamp_to_seconds

TWIST_FRAMES = ("child", "parent")


@dataclass
class BaseState:
    """Base pose and velocities from nav_msgs/Odometry.

    ``linear_velocity`` and ``angular_velocity`` are in the base frame; ``projected_gravity`` is
    the unit gravity direction in the base frame; ``yaw`` is the heading in the odometry frame.
    ``finite`` is False when any pose or twist field is NaN or infinite; ``linear_speed`` and
    ``angular_speed`` are the norms of the twist.
    """

    position: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    orientation_xyzw: np.ndarray = field(default_factory=lambda: np.full(4, np.nan))
    linear_velocity: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    angular_velocity: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    projected_gravity: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    yaw: float = math.nan
    quaternion_norm: float = math.nan
    linear_speed: float = math.nan
    angular_speed: float = math.nan
    finite: bool = False
    frame_id: str = ""
    child_frame_id: str = ""
    stamp: float = math.nan

    def copy(self) -> BaseState:
        return BaseState(
            self.position.copy(),
            self.orientation_xyzw.copy(),
            self.linear_velocity.copy(),
            self.angular_velocity.copy(),
            self.projected_gravity.copy(),
            self.yaw,
            self.quaternion_norm,
            self.linear_speed,
            self.angular_speed,
            self.finite,
            self.frame_id,
            self.child_frame_id,
            self.stamp,
        )


def read_odometry(msg: Any, out: BaseState, twist_frame: str = "child") -> BaseState:
    """Fill ``out`` from a nav_msgs/Odometry in place (no new arrays) and return it.

    REP 105 / nav_msgs: the twist is expressed in ``child_frame_id`` (the base), so it is copied
    as is; ``twist_frame="parent"`` is for estimators that publish it in the odometry frame, and
    rotates it into the base frame. The quaternion is normalised for gravity, yaw and that
    rotation; its norm before normalisation is kept in ``quaternion_norm`` so callers can refuse
    a corrupt one. NaN fields propagate as NaN. Scalar math in Python: for 3- and 4-vectors it is
    several times faster than numpy calls.
    """
    if twist_frame not in TWIST_FRAMES:
        raise ValueError(f"twist_frame must be one of {TWIST_FRAMES}, got {twist_frame!r}")
    pose = msg.pose.pose
    p, q = pose.position, pose.orientation
    px, py, pz = float(p.x), float(p.y), float(p.z)
    qx, qy, qz, qw = float(q.x), float(q.y), float(q.z), float(q.w)
    lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
    vx, vy, vz = float(lin.x), float(lin.y), float(lin.z)
    wx, wy, wz = float(ang.x), float(ang.y), float(ang.z)
    # NaN and inf propagate through the sum (a finite overflow to inf is implausible anyway)
    out.finite = math.isfinite(px + py + pz + qx + qy + qz + qw + vx + vy + vz + wx + wy + wz)
    norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    out.quaternion_norm = norm
    x, y, z, w = (qx / norm, qy / norm, qz / norm, qw / norm) if norm > 0.0 else (qx, qy, qz, qw)
    # Rotation matrix R (base -> odom) entries used below.
    r20, r21, r22 = 2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)
    if twist_frame == "parent":  # v_base = R^T v_odom
        r00, r01, r02 = 1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)
        r10, r11, r12 = 2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)
        vx, vy, vz = r00 * vx + r10 * vy + r20 * vz, r01 * vx + r11 * vy + r21 * vz, r02 * vx + r12 * vy + r22 * vz
        wx, wy, wz = r00 * wx + r10 * wy + r20 * wz, r01 * wx + r11 * wy + r21 * wz, r02 * wx + r12 * wy + r22 * wz
    out.position[0], out.position[1], out.position[2] = px, py, pz
    o = out.orientation_xyzw
    o[0], o[1], o[2], o[3] = qx, qy, qz, qw
    # gravity (0, 0, -1) in the base frame is -R^T e_z = -(third row of R)
    out.projected_gravity[0], out.projected_gravity[1], out.projected_gravity[2] = -r20, -r21, -r22
    out.yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    out.linear_velocity[0], out.linear_velocity[1], out.linear_velocity[2] = vx, vy, vz
    out.angular_velocity[0], out.angular_velocity[1], out.angular_velocity[2] = wx, wy, wz
    out.linear_speed = math.sqrt(vx * vx + vy * vy + vz * vz)
    out.angular_speed = math.sqrt(wx * wx + wy * wy + wz * wz)
    out.frame_id = msg.header.frame_id
    out.child_frame_id = msg.child_frame_id
    out.stamp = stamp_to_seconds(msg.header.stamp)
    return out


def odometry_to_base_state(msg: Any, twist_frame: str = "child") -> BaseState:
    """nav_msgs/Odometry -> a new BaseState (see :func:`read_odometry`)."""
    return read_odometry(msg, BaseState(), twist_frame)
