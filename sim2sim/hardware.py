"""The simulated robot as "hardware": ROS 2 messages out, joint commands in.

:class:`SimHardware` owns one MuJoCo world and plays the robot's drivers and state estimator:

* every physics step (400 Hz by default) it publishes ``sensor_msgs/JointState`` with position,
  velocity and effort (the actuator force after its limit) for every joint of the contract;
* at the odometry rate, ``nav_msgs/Odometry``: base pose in the odometry frame, twist in the base
  (child) frame as REP 105 specifies and :func:`aow_policy.messages.read_odometry` expects;
* at the map rate, ``grid_map_msgs/GridMap``: a robot-centred elevation map cut from the terrain
  (see :class:`RobotCentredMap`), or with ``blank_map`` a flat one at the ground height under the
  base, every cell valid: the policy's height scan then sees flat ground wherever the robot walks,
  which shows whether a policy uses its scan (issue 16's course evaluation);
* it applies ``/joint_commands`` (sensor_msgs/JointState, matched by joint name) with the drives'
  fixed gains from the robot contract, the same actuators the policy was trained on:
  ``force = kp (position - q) + kd (velocity - q̇)`` for legs and ``kd (velocity - q̇)`` for
  wheels, clipped to the torque limit. Targets are clipped to the joint limits. Without a valid
  command for ``command_timeout`` seconds (or before the first) the drives damp: ``-kd q̇``.
  The effort field of a command (feed-forward torque) is not applied.

Messages are built through :class:`aow_policy.messages.MessageFactory`, so the same code publishes
rosbags' classes (sim-to-sim without ROS) and rclpy's (the bridge node).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from aow_policy.messages import (
    JointStateReader,
    MessageError,
    MessageFactory,
    grid_map_msg,
    joint_state_msg,
    odometry_msg,
)
from aow_policy.robot import Robot
from sim2sim.world import HeightField, World, reset_to_spawn
from training.sim.model import LEG_ACTUATOR_MODELS, servo_gains

Publish = Callable[[str, Any, float], None]


@dataclass(frozen=True)
class Topics:
    """Topic names, the same as on the robot."""

    joint_states: str = "/joint_states"
    odometry: str = "/odometry"
    elevation_map: str = "/elevation_map"
    cmd_vel: str = "/cmd_vel"
    joint_commands: str = "/joint_commands"
    diagnostics: str = "/diagnostics"


@dataclass(frozen=True)
class HardwareConfig:
    physics_hz: float = 400.0  # physics step rate; one JointState per step
    odometry_hz: float = 100.0
    map_hz: float = 10.0
    map_size: float = 3.0  # m, square, centred on the robot
    map_resolution: float = 0.05  # m per cell
    map_layer: str = "elevation"
    odom_frame: str = "odom"
    base_frame: str = "base"
    command_timeout: float = 0.1  # s without a valid /joint_commands -> the drives damp
    # Publish a flat map (elevation = the ground height under the base) instead of the terrain;
    # nothing else changes: same cells, frame, stamps and rate, the robot on the same terrain.
    blank_map: bool = False
    # How the leg drives are simulated (training.sim.model.LegActuator): "pd", a PD with a torque
    # limit at any speed, or "dc_motor", the same PD within the drive's torque-speed line (no torque
    # left in the direction of motion at 7.5 rad/s); None: as the policy trained (its ONNX contract's
    # training.leg_actuator; "pd" where there is no policy or the contract predates the field).
    leg_actuator: str | None = None

    def validate(self) -> None:
        if self.leg_actuator is not None and self.leg_actuator not in LEG_ACTUATOR_MODELS:
            raise ValueError(f"leg_actuator must be one of {LEG_ACTUATOR_MODELS}, got {self.leg_actuator!r}")
        for name in ("physics_hz", "odometry_hz", "map_hz", "map_size", "map_resolution", "command_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("odometry_hz", "map_hz"):
            steps_between(self.physics_hz, getattr(self, name), name)
        if round(self.map_size / self.map_resolution) < 2:
            raise ValueError(f"map_size {self.map_size} m at {self.map_resolution} m/cell gives fewer than 2 cells")


def steps_between(physics_hz: float, rate_hz: float, name: str) -> int:
    """Physics steps per period of a rate that must divide the physics rate."""
    ratio = physics_hz / rate_hz
    steps = round(ratio)
    if steps < 1 or abs(ratio - steps) > 1e-9 * ratio:
        raise ValueError(f"{name} {rate_hz} Hz must divide the physics rate {physics_hz} Hz into whole steps")
    return steps


class RobotCentredMap:
    """A square elevation map around the robot, moved in whole cells like grid_map's ``move()``.

    The centre snaps to the cell grid (``round(x / resolution) * resolution``) and the buffer is
    circular: a world cell keeps its buffer index while the map moves, and the start indices
    change instead, so messages carry non-zero ``outer/inner_start_index`` as a moving
    elevation mapper's do. Storage is grid_map's default, column-major. Heights are the terrain
    surface (bilinear in MuJoCo's triangles, see :class:`sim2sim.world.HeightField`); with
    ``blank`` every cell holds the terrain height under the robot's (x, y) instead.
    """

    def __init__(
        self, heights: HeightField, size: float, resolution: float, layer: str = "elevation", blank: bool = False
    ):
        self.heights = heights
        self.resolution = resolution
        self.layer = layer
        self.blank = blank
        self.cells = round(size / resolution)
        k = np.arange(self.cells)
        # cell centre of unwrapped index k relative to the map centre (facts.md: centre + L/2 - res/2 - res k)
        self._offsets = 0.5 * self.cells * resolution - 0.5 * resolution - resolution * k

    def layout(self, x: float, y: float) -> tuple[float, float, int, int]:
        """(centre x, centre y, outer start, inner start) for a robot at (x, y)."""
        ix, iy = round(x / self.resolution), round(y / self.resolution)
        return ix * self.resolution, iy * self.resolution, (-ix) % self.cells, (-iy) % self.cells

    def unwrapped(self, cx: float, cy: float) -> np.ndarray:
        """Heights [rows (x), cols (y)] by unwrapped index, for a map centred at (cx, cy)."""
        xs, ys = cx + self._offsets, cy + self._offsets
        return self.heights(xs[:, None], ys[None, :]).astype(np.float32)

    def elevation(self, x: float, y: float) -> np.ndarray:
        """The map's heights [rows (x), cols (y)] by unwrapped index for a robot at (x, y)."""
        if self.blank:
            # Ground under the base, not under the snapped centre: the scan's points around the
            # base then read the height of the ground the robot stands on, as on flat ground.
            return np.full((self.cells, self.cells), float(self.heights(x, y)), dtype=np.float32)
        cx, cy, _, _ = self.layout(x, y)
        return self.unwrapped(cx, cy)

    def message(self, factory: MessageFactory, x: float, y: float, stamp: float, frame_id: str) -> Any:
        cx, cy, outer, inner = self.layout(x, y)
        return grid_map_msg(
            factory,
            {self.layer: self.elevation(x, y)},
            self.resolution,
            (cx, cy),
            stamp=stamp,
            frame_id=frame_id,
            outer_start=outer,
            inner_start=inner,
        )


class SimHardware:
    """The robot's drivers and state estimator over a MuJoCo world (see the module docstring)."""

    def __init__(
        self,
        world: World,
        robot: Robot,
        factory: MessageFactory,
        publish: Publish,
        config: HardwareConfig | None = None,
        topics: Topics | None = None,
    ):
        self.config = config if config is not None else HardwareConfig()
        self.config.validate()
        self.topics = topics if topics is not None else Topics()
        self.world, self.robot, self.factory, self.publish = world, robot, factory, publish
        model = world.model
        self.model = model
        self.dt = float(model.opt.timestep)
        if abs(self.dt * self.config.physics_hz - 1.0) > 1e-9:
            raise ValueError(f"the model steps {self.dt} s but the hardware runs at {self.config.physics_hz} Hz")
        self.data = mujoco.MjData(model)
        reset_to_spawn(world, self.data)
        info = world.info
        if info.joint_names != robot.joint_names:
            raise ValueError(f"the model's joints {info.joint_names} are not the contract's {robot.joint_names}")
        self.joint_names = robot.joint_names
        self._qpos_adr, self._qvel_adr, self._act = info.qpos_adr, info.qvel_adr, info.actuator_ids
        self._base_qpos, self._base_qvel, self._base_body = info.base_qpos_adr, info.base_qvel_adr, info.base_body_id

        # Drive model, read from the compiled actuators: position (kp, kd) or velocity (kd) loops.
        self._is_position, kp, kd = servo_gains(model, self._act)
        self._kd_over_kp = np.where(self._is_position, kd / np.where(self._is_position, kp, 1.0), 0.0)
        self._pos_low, self._pos_high = robot.position_lower, robot.position_upper
        self._vel_limit = robot.velocity_limits

        self._reader = JointStateReader(robot.joint_names)
        self._target_position = np.zeros(len(self.joint_names))
        self._target_velocity = np.zeros(len(self.joint_names))
        self._last_command = -math.inf
        self.commands_accepted = 0
        self.commands_refused = 0
        self.last_command_error: str | None = None

        self.step_count = 0
        # Added to every header stamp: 0 on simulation time (with /clock); the start's wall-clock time
        # when the messages must be stamped on the node clock instead.
        self.stamp_offset = 0.0
        self._odometry_every = steps_between(self.config.physics_hz, self.config.odometry_hz, "odometry_hz")
        self._map_every = steps_between(self.config.physics_hz, self.config.map_hz, "map_hz")
        self.map = RobotCentredMap(
            world.heights,
            self.config.map_size,
            self.config.map_resolution,
            self.config.map_layer,
            blank=self.config.blank_map,
        )
        self._floor = info.floor_geom_id
        self._base_geoms = set(info.base_geom_ids.tolist())

    # ---- time ----------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """Simulation time (s) of the current state; exact multiples of the physics step."""
        return self.step_count * self.dt

    # ---- state ---------------------------------------------------------------------------
    @property
    def joint_position(self) -> np.ndarray:
        return self.data.qpos[self._qpos_adr]

    @property
    def joint_velocity(self) -> np.ndarray:
        return self.data.qvel[self._qvel_adr]

    @property
    def joint_effort(self) -> np.ndarray:
        return self.data.actuator_force[self._act]

    @property
    def base_position(self) -> np.ndarray:
        return self.data.qpos[self._base_qpos : self._base_qpos + 3]

    @property
    def base_quaternion_xyzw(self) -> np.ndarray:
        w, x, y, z = self.data.qpos[self._base_qpos + 3 : self._base_qpos + 7]
        return np.array([x, y, z, w])

    @property
    def base_rotation(self) -> np.ndarray:
        """Base -> world rotation matrix."""
        return self.data.xmat[self._base_body].reshape(3, 3)

    @property
    def base_linear_velocity(self) -> np.ndarray:
        """Base-frame linear velocity (the free joint's is in the world frame)."""
        return self.base_rotation.T @ self.data.qvel[self._base_qvel : self._base_qvel + 3]

    @property
    def base_angular_velocity(self) -> np.ndarray:
        """Base-frame angular velocity (MuJoCo's free joint gives it in the body frame)."""
        return self.data.qvel[self._base_qvel + 3 : self._base_qvel + 6].copy()

    @property
    def base_yaw(self) -> float:
        r = self.base_rotation
        return math.atan2(r[1, 0], r[0, 0])

    @property
    def tilt(self) -> float:
        """Angle (rad) between the base's z axis and the world's."""
        return math.acos(min(1.0, max(-1.0, float(self.base_rotation[2, 2]))))

    @property
    def height_above_ground(self) -> float:
        x, y, z = self.base_position
        return float(z - self.world.heights(x, y))

    def base_touches_ground(self) -> bool:
        d = self.data
        for i in range(d.ncon):
            g1, g2 = int(d.contact.geom1[i]), int(d.contact.geom2[i])
            if (g1 == self._floor and g2 in self._base_geoms) or (g2 == self._floor and g1 in self._base_geoms):
                return True
        return False

    # ---- messages out --------------------------------------------------------------------
    @property
    def stamp(self) -> float:
        """Header stamp of the current state (s)."""
        return self.time + self.stamp_offset

    def joint_state_message(self) -> Any:
        return joint_state_msg(
            self.factory, self.joint_names, self.joint_position, self.joint_velocity, self.joint_effort, self.stamp
        )

    def odometry_message(self) -> Any:
        cfg = self.config
        return odometry_msg(
            self.factory,
            self.base_position,
            self.base_quaternion_xyzw,
            self.base_linear_velocity,
            self.base_angular_velocity,
            stamp=self.stamp,
            frame_id=cfg.odom_frame,
            child_frame_id=cfg.base_frame,
        )

    def map_message(self) -> Any:
        x, y, _ = self.base_position
        return self.map.message(self.factory, float(x), float(y), self.stamp, self.config.odom_frame)

    def publish_sensors(self) -> None:
        """Publish what is due at the current step (call after :meth:`step`): JointState always, Odometry and
        GridMap when the step count is a multiple of their periods."""
        t, topics = self.stamp, self.topics
        self.publish(topics.joint_states, self.joint_state_message(), t)
        if self.step_count % self._odometry_every == 0:
            self.publish(topics.odometry, self.odometry_message(), t)
        if self.step_count % self._map_every == 0:
            self.publish(topics.elevation_map, self.map_message(), t)

    # ---- commands in ---------------------------------------------------------------------
    def on_joint_command(self, msg: Any, now: float | None = None) -> bool:
        """A sensor_msgs/JointState command (by joint name), in force from now on. False (ignored) if refused."""
        reader = self._reader
        try:
            reader.read(msg)
        except MessageError as e:
            return self._refuse(str(e))
        position, velocity = reader.position, reader.velocity
        if not reader.has_velocity:
            velocity = np.zeros_like(position)
        if not (np.all(np.isfinite(position)) and np.all(np.isfinite(velocity))):
            return self._refuse("non-finite targets")
        np.clip(position, self._pos_low, self._pos_high, out=self._target_position)
        np.clip(velocity, -self._vel_limit, self._vel_limit, out=self._target_velocity)
        self._last_command = self.time  # the drives' own clock, whatever the message's stamp
        self.commands_accepted += 1
        return True

    def _refuse(self, reason: str) -> bool:
        self.commands_refused += 1
        self.last_command_error = reason
        return False

    @property
    def command_active(self) -> bool:
        return self.time - self._last_command <= self.config.command_timeout

    def _apply_command(self) -> None:
        ctrl = self.data.ctrl
        if self.command_active:
            # position actuator: kp (ctrl - q) - kd q̇ equals kp (p - q) + kd (v - q̇) for ctrl = p + (kd / kp) v
            target = np.where(
                self._is_position,
                self._target_position + self._kd_over_kp * self._target_velocity,
                self._target_velocity,
            )
        else:  # damping: position targets at the measured angles, zero velocity targets
            target = np.where(self._is_position, self.joint_position, 0.0)
        ctrl[self._act] = target

    def step(self) -> None:
        """Apply the latest command and advance one physics step."""
        self._apply_command()
        mujoco.mj_step(self.model, self.data)
        self.step_count += 1
