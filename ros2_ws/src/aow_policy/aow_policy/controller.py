"""The controller core: inputs in, one joint command per control period out, failing safe.

State machine::

    ZERO_TORQUE / DAMPING --start()--> STAND_UP --(stand-up done, inputs fresh)--> POLICY
    STAND_UP / POLICY --(any fault, or stop())--> DAMPING;  ZERO_TORQUE --stop()--> DAMPING

* ZERO_TORQUE: kp = kd = 0; targets track the measured state (position and velocity), so a
  driver that applies its own PD gains to the targets also produces no torque.
* DAMPING: kp = 0, kd = the contract's kd, velocity target 0; position targets track the last
  valid measured position, so a driver with fixed gains produces (close to) pure damping.
* STAND_UP: legs interpolate (smoothstep) from the pose measured at ``start()`` to the default
  pose over ``stand_up_duration``; the last stand-up command is exactly the default pose.
* POLICY: observation from the policy's own layout, ONNX inference, action -> joint targets from
  the policy contract: ``clip(offset + scale * clip(action, -action_clip, action_clip), low, high)``.

Faults (-> DAMPING, latched with a reason until the next ``start()``): a robot-state input older
than its maximum age (joint states in STAND_UP and POLICY; odometry and the height map in
POLICY), a refused message (missing joints, malformed map), NaN or implausible values in any
input (command included), a height scan with too little map data, an old map, odometry and map
in different frames, a non-finite or failing policy output. A stale or absent velocity command
is not a fault: the policy gets a zero command.

Every command is clipped to the contract's ranges: positions to the joint position limits and
the policy's action [low, high], velocities to the joint velocity limits and the action range.
``step()`` allocates no arrays: all buffers are preallocated here. Where the C kernels of
:mod:`aow_policy._control` are built, the joint measurement check, the odometry conversion and
its checks, the observation and the action -> target mapping run there, bound to those buffers
(the same arithmetic as the NumPy path, bit for bit).

This module is the state machine and the control step; the settings are
:mod:`aow_policy.controller_config`, what each state sends :mod:`aow_policy.joint_command`, the
binding of the C kernels :mod:`aow_policy.controller_kernels` (every name is importable from here).
"""

from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from aow_policy.controller_config import ConfigError, ControllerConfig
from aow_policy.controller_kernels import bind_action_targets, bind_joint_check, bind_odometry
from aow_policy.heightmap import HeightScanError, HeightScanner
from aow_policy.joint_command import (
    ACTIVE_STATES,
    ControllerState,
    JointCommand,
    command_ranges,
    write_gains,
    write_passive,
    write_stand_up,
)
from aow_policy.messages import (
    BaseState,
    GridMapLayer,
    JointStateReader,
    MessageError,
    grid_map_layer,
    read_odometry,
    twist_to_command,
)
from aow_policy.observation import ObservationBuilder, RobotInputs, native_control
from aow_policy.policy_contract import PolicyContract, check_fits_robot, parse_contract
from aow_policy.robot import Robot

try:  # the C function without np.count_nonzero's Python wrapper (4x cheaper on a 16-element mask)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # numpy < 2
    _count_nonzero = np.count_nonzero

# the import path of every name the controller's modules define (callers import them from here)
__all__ = [
    "ACTIVE_STATES",
    "INPUTS",
    "ConfigError",
    "ControllerConfig",
    "ControllerCore",
    "ControllerState",
    "InputStatus",
    "JointCommand",
    "Policy",
]


INPUTS = ("joint_states", "odometry", "height_map", "command")


class Policy(Protocol):
    """What the core needs of a policy (:class:`aow_policy.policy.PolicyRunner` is one)."""

    contract: dict[str, Any]
    obs_dim: int
    num_actions: int

    def __call__(self, obs: np.ndarray) -> np.ndarray: ...


@dataclass
class InputStatus:
    received: float = -math.inf  # time the last accepted message arrived
    accepted: int = 0
    refused: int = 0
    last_error: str | None = None
    valid: bool = False  # the latest message was accepted


def _adjacent_block(vector: np.ndarray, offsets: dict[str, slice], names: tuple[str, ...]) -> np.ndarray:
    """The view of ``vector`` spanning the named fields, which must follow each other in this order."""
    for before, after in itertools.pairwise(names):
        if offsets[before].stop != offsets[after].start:
            raise AssertionError(f"input fields {before} and {after} are not adjacent")
    return vector[offsets[names[0]].start : offsets[names[-1]].stop]


def _contract_of(policy: Any) -> PolicyContract:
    parsed = getattr(policy, "policy_contract", None)
    return parsed if isinstance(parsed, PolicyContract) else parse_contract(policy.contract)


class ControllerCore:
    """The controller state machine; drive it with ``on_*`` messages and one ``step(now)`` per period.

    Times are seconds on one clock chosen by the caller (ROS time in the node, simulation time in
    sim-to-sim); message header stamps are compared with it only for the map's age.
    """

    def __init__(
        self, robot: Robot, policy: Policy, config: ControllerConfig | None = None, native: bool | None = None
    ):
        """``native``: the C kernels (:mod:`aow_policy._control`); None: where they are built."""
        if native and native_control is None:
            raise ValueError("native controller kernels requested, but aow_policy._control is not built")
        self.native = native_control is not None if native is None else bool(native)
        self.robot = robot
        self.policy = policy
        self.config = config if config is not None else ControllerConfig()
        contract = _contract_of(policy)
        check_fits_robot(contract, robot, source=getattr(policy, "source", "policy"))
        if (policy.obs_dim, policy.num_actions) != (contract.obs_dim, contract.num_actions):
            raise ValueError(
                f"policy has obs_dim {policy.obs_dim} and {policy.num_actions} actions, its contract says "
                f"{contract.obs_dim} and {contract.num_actions}"
            )
        self.contract = contract
        self.policy_dt = robot.rates.policy_dt
        cfg = self.config
        n = len(robot.joints)
        self.joint_names = robot.joint_names
        self._wheels = np.array([j.kind != "leg" for j in robot.joints])

        # action i drives joint i: check_fits_robot refuses any other joint order
        self._action_joint = robot.index_of(contract.joint_names)
        if not np.array_equal(self._action_joint, np.arange(n)):
            raise ValueError(f"policy actions {contract.joint_names} are not in the robot's joint order")
        self._pos_mask = np.array([a.mode == "position" for a in contract.actions])
        self._action_scale = contract.action_scales
        self._action_offset = contract.action_offsets
        self._action_clip = contract.action_clip
        if self._action_clip is not None:  # as arrays: a Python scalar operand is converted on every call
            self._action_clip_low = np.full(contract.num_actions, -self._action_clip)
            self._action_clip_high = np.full(contract.num_actions, self._action_clip)
        self.ranges = command_ranges(robot, contract, self._action_joint)

        # plausibility bounds of measurements
        self._meas_pos_low = robot.position_lower - cfg.joint_position_margin
        self._meas_pos_high = robot.position_upper + cfg.joint_position_margin
        self._meas_vel_limit = robot.velocity_limits * cfg.joint_velocity_factor
        # the same bounds as centre +- half-width, rows position and velocity; "unbounded" is a
        # huge finite half-width so that inf still fails the test
        big = np.finfo(np.float64).max / 4
        low = np.where(np.isfinite(self._meas_pos_low), self._meas_pos_low, -big)
        high = np.where(np.isfinite(self._meas_pos_high), self._meas_pos_high, big)
        self._meas_center = np.stack([0.5 * (low + high), np.zeros(n)])
        self._meas_half = np.stack([0.5 * (high - low), self._meas_vel_limit])
        self._deviation = np.zeros((2, n))
        self._meas_ok = np.zeros((2, n), dtype=bool)

        # inputs
        self.inputs = RobotInputs(n, contract.num_actions, robot.height_scan.num_points)
        self.builder = ObservationBuilder(contract.observation, robot, contract.num_actions, native=self.native)
        self.scanner: HeightScanner | None = None
        if self.builder.needs_height_scan:
            # the scanner writes straight into the inputs the observation is built from
            self.scanner = HeightScanner(
                robot.height_scan, cfg.height_sampling, cfg.min_height_valid_fraction, out=self.inputs.heights
            )
        self._joint_reader = JointStateReader(robot.joint_names, read_effort=False)
        self._reader_pos_vel = self._joint_reader.values[:2]
        # the odometry fields the inputs take, as views of one vector laid out as in the inputs
        self._base_inputs = _adjacent_block(
            self.inputs.vector,
            self.inputs.offsets,
            ("base_position", "base_linear_velocity", "base_angular_velocity", "projected_gravity"),
        )
        base_buffer = np.full(self._base_inputs.size, np.nan)
        self._base = BaseState(
            position=base_buffer[0:3],
            linear_velocity=base_buffer[3:6],
            angular_velocity=base_buffer[6:9],
            projected_gravity=base_buffer[9:12],
        )
        self._base_buffer = base_buffer
        self._yaw = 0.0  # of the last accepted odometry (the BaseState holds the last received)
        self._odom_frame = ""
        self._command_in = np.zeros(3)
        self._map: GridMapLayer | None = None
        self.status = {name: InputStatus() for name in INPUTS}
        self._joint_status, self._odometry_status = self.status["joint_states"], self.status["odometry"]
        self._map_status, self._command_status = self.status["height_map"], self.status["command"]
        self._joint_max_age = cfg.joint_states_max_age
        self._pending_fault: str | None = None
        # the last valid measurement; the observation reads the same buffers
        self._measured_position = self.inputs.joint_position
        self._measured_velocity = self.inputs.joint_velocity
        self._measured_pos_vel = _adjacent_block(
            self.inputs.vector, self.inputs.offsets, ("joint_position", "joint_velocity")
        ).reshape(2, n)
        self._has_measurement = False

        # outputs and work buffers
        command_block = np.zeros((5, n))  # position, velocity, effort, kp, kd
        self.command = JointCommand(robot.joint_names, *command_block)
        self._command_targets = command_block[:2]  # position and velocity targets, clipped in one call
        r = self.ranges
        self._targets_low = np.stack([r.position_low, r.velocity_low])
        self._targets_high = np.stack([r.position_high, r.velocity_high])
        self._action = np.zeros(contract.num_actions)
        self._finite_actions = np.zeros(contract.num_actions, dtype=bool)
        # [offset + scale * action | measured position | 0]: one gather gives both target rows,
        # legs (position mode): (target, 0); wheels: (measured position, target)
        self._target_sources = np.zeros(2 * n + 1)
        self._targets = self._target_sources[:n]
        self._target_measured = self._target_sources[n : 2 * n]
        joints = np.arange(n)
        self._target_gather = np.concatenate(
            [np.where(self._pos_mask, joints, n + joints), np.where(self._pos_mask, 2 * n, joints)]
        ).astype(np.intp)
        self._command_targets_flat = self._command_targets.reshape(-1)
        self._policy_out = np.zeros(contract.num_actions, dtype=np.float32)
        self._policy_takes_out = "out" in inspect.signature(policy.__call__).parameters
        self._check_joints = self._map_actions = self._read_odometry = None
        self._targets_clipped = False
        if self.native:
            odometry = bind_odometry(native_control, self._base_inputs, cfg)
            self._read_odometry = odometry.read
            self._odometry_scratch, self._odometry_fields = odometry.scratch, odometry.fields
            self._check_joints = bind_joint_check(
                native_control, self._reader_pos_vel, self._meas_center, self._meas_half, self._measured_pos_vel
            )
            clip = self._action_clip is not None
            self._map_actions = bind_action_targets(
                native_control,
                policy_out=self._policy_out,
                clip_low=self._action_clip_low if clip else None,
                clip_high=self._action_clip_high if clip else None,
                scale=self._action_scale,
                offset=self._action_offset,
                action=self._action,
                last_action=self.inputs.last_action,
                measured_position=self._measured_position,
                target_sources=self._target_sources,
                target_gather=self._target_gather,
                command_targets=self._command_targets_flat,
                targets_low=self._targets_low,
                targets_high=self._targets_high,
            )
        self._stand_q0 = np.zeros(n)
        self._stand_tmp = np.zeros(n)
        self._stand_t0 = 0.0
        self._stand_done = False
        self._gains_state: ControllerState | None = None

        self.state = ControllerState(cfg.initial_state)
        self.fault: str | None = None
        self.command_active = False  # the last policy step used a fresh velocity command
        self.policy_steps = 0
        self.transitions: list[tuple[float, ControllerState, str]] = []

    # ---- inputs --------------------------------------------------------------------------
    def _refuse(self, name: str, reason: str) -> bool:
        st = self.status[name]
        st.refused += 1
        st.valid = False
        st.last_error = reason
        if self._pending_fault is None:
            self._pending_fault = f"{name}: {reason}"
        return False

    @staticmethod
    def _accept(st: InputStatus, now: float) -> bool:
        st.accepted += 1
        st.valid = True
        st.received = now
        return True

    def on_joint_state(self, msg: Any, now: float) -> bool:
        """sensor_msgs/JointState (by name; any order; extra joints ignored). False if refused."""
        reader = self._joint_reader
        try:
            reader.read(msg)
        except MessageError as e:
            return self._refuse("joint_states", str(e))
        pos, vel = reader.position, reader.velocity
        if not reader.has_velocity:
            return self._refuse("joint_states", "JointState has no velocities")
        # One test for NaN, inf and implausible values: |x - centre| <= half-width fails for all of them.
        if self._check_joints is not None:
            if not self._check_joints():  # copies into the measurement only if all pass
                return self._refuse("joint_states", self._joint_problem(pos, vel))
            self._has_measurement = True
            return self._accept(self._joint_status, now)
        dev = self._deviation
        np.subtract(self._reader_pos_vel, self._meas_center, out=dev)
        np.abs(dev, out=dev)
        np.less_equal(dev, self._meas_half, out=self._meas_ok)
        if _count_nonzero(self._meas_ok) != self._meas_ok.size:  # count_nonzero: cheaper than .all()
            return self._refuse("joint_states", self._joint_problem(pos, vel))
        self._measured_pos_vel[...] = self._reader_pos_vel  # [...] =: np.copyto has a Python dispatcher
        self._has_measurement = True
        return self._accept(self._joint_status, now)

    def _joint_problem(self, pos: np.ndarray, vel: np.ndarray) -> str:
        def names(mask: np.ndarray) -> list[str]:
            return [self.joint_names[i] for i in np.flatnonzero(mask)]

        nonfinite = ~(np.isfinite(pos) & np.isfinite(vel))
        if nonfinite.any():
            return f"non-finite values for {names(nonfinite)}"
        outside = (pos < self._meas_pos_low) | (pos > self._meas_pos_high)
        if outside.any():
            return f"positions outside the joint limits (+ margin) for {names(outside)}"
        return f"implausible velocities for {names(np.abs(vel) > self._meas_vel_limit)}"

    def on_odometry(self, msg: Any, now: float) -> bool:
        """nav_msgs/Odometry: base pose, base-frame twist. False if refused."""
        if self._read_odometry is not None:
            return self._on_odometry_native(msg, now)
        base = self._base
        try:
            read_odometry(msg, base, self.config.twist_frame)
        except (AttributeError, TypeError, ValueError) as e:
            return self._refuse("odometry", f"malformed Odometry ({e})")
        if not base.finite:
            return self._refuse("odometry", "non-finite values in pose or twist")
        if abs(base.quaternion_norm - 1.0) > self.config.quaternion_norm_tolerance:
            return self._refuse("odometry", f"orientation quaternion has norm {base.quaternion_norm:.3f}")
        lin, ang = base.linear_speed, base.angular_speed
        if lin > self.config.max_base_linear_speed or ang > self.config.max_base_angular_speed:
            return self._refuse("odometry", f"implausible base velocity ({lin:.2f} m/s, {ang:.2f} rad/s)")
        self._base_inputs[...] = self._base_buffer
        self._yaw = base.yaw
        self._odom_frame = base.frame_id
        return self._accept(self._odometry_status, now)

    def _on_odometry_native(self, msg: Any, now: float) -> bool:
        """on_odometry's checks in one C call; the messages are on_odometry's."""
        try:
            code = self._read_odometry(msg)
        except (AttributeError, TypeError, ValueError) as e:
            return self._refuse("odometry", f"malformed Odometry ({e})")
        scratch = self._odometry_scratch
        yaw, norm, linear_speed, angular_speed = self._odometry_fields
        if code:
            if code == 1:
                return self._refuse("odometry", "non-finite values in pose or twist")
            if code == 2:
                return self._refuse("odometry", f"orientation quaternion has norm {scratch[norm]:.3f}")
            lin, ang = scratch[linear_speed], scratch[angular_speed]
            return self._refuse("odometry", f"implausible base velocity ({lin:.2f} m/s, {ang:.2f} rad/s)")
        self._yaw = scratch.item(yaw)
        self._odom_frame = msg.header.frame_id
        return self._accept(self._odometry_status, now)

    @property
    def base_yaw(self) -> float:
        """Heading of the last accepted odometry."""
        return self._yaw

    def on_command(self, msg: Any, now: float) -> bool:
        """geometry_msgs/Twist velocity command, clipped to the contract's ranges. NaN is a fault."""
        cmd = self.robot.commands
        try:
            twist_to_command(msg, cmd.low, cmd.high, out=self._command_in)
        except (AttributeError, TypeError, ValueError) as e:
            return self._refuse("command", f"malformed Twist ({e})")
        if not all(math.isfinite(v) for v in self._command_in):
            self._command_in.fill(0.0)
            return self._refuse("command", "non-finite velocity command")
        return self._accept(self._command_status, now)

    def on_grid_map(self, msg: Any, now: float) -> bool:
        """grid_map_msgs/GridMap (the configured layer). False if refused."""
        try:
            layer = grid_map_layer(msg, self.config.height_map_layer)
        except (MessageError, AttributeError, TypeError) as e:
            return self._refuse("height_map", str(e))
        self._map = layer
        return self._accept(self._map_status, now)

    # ---- services ------------------------------------------------------------------------
    def start(self, now: float) -> tuple[bool, str]:
        """ZERO_TORQUE/DAMPING -> STAND_UP (needs a fresh, valid JointState)."""
        if self.state in ACTIVE_STATES:
            return True, f"already {self.state.value}"
        js = self.status["joint_states"]
        if not self._has_measurement or not js.valid:
            return False, f"cannot start: no valid joint state ({js.last_error or 'none received'})"
        age = now - js.received
        if age > self.config.joint_states_max_age:
            return False, f"cannot start: joint states are {age:.3f} s old (max {self.config.joint_states_max_age} s)"
        np.copyto(self._stand_q0, self._measured_position)
        self._stand_t0 = now
        self._stand_done = False
        self._pending_fault = None
        self.fault = None
        self.inputs.last_action.fill(0.0)
        self._transition(now, ControllerState.STAND_UP, "start requested")
        return True, f"standing up over {self.config.stand_up_duration} s"

    def stop(self, now: float, reason: str = "stop requested") -> tuple[bool, str]:
        """Any state -> DAMPING."""
        self._enter_damping(now, reason, is_fault=False)
        return True, "damping"

    # ---- the control step ----------------------------------------------------------------
    def step(self, now: float) -> JointCommand:
        """The command for this control period (the returned object is reused)."""
        if self.state in ACTIVE_STATES:
            fault = self._pending_fault or self._watchdog(now)
            if fault is not None:
                self._enter_damping(now, fault)
        self._pending_fault = None  # refused inputs outside the active states are only counted

        if self.state is ControllerState.STAND_UP:
            self._stand_up(now)
        elif self.state is ControllerState.POLICY:
            fault = self._policy(now)
            if fault is not None:
                self._enter_damping(now, fault)
        if self.state is ControllerState.DAMPING:
            self._passive(damping=True)
        elif self.state is ControllerState.ZERO_TORQUE:
            self._passive(damping=False)

        cmd, targets = self.command, self._command_targets
        if self._targets_clipped:
            self._targets_clipped = False
        else:
            np.maximum(targets, self._targets_low, out=targets)
            np.minimum(targets, self._targets_high, out=targets)
        cmd.state = self.state
        cmd.stamp = now
        cmd.has_measurement = self._has_measurement
        cmd.fault = self.fault

        if self.state is ControllerState.STAND_UP and self._stand_done:
            missing = self._policy_inputs_problem(now)
            if missing is None:
                self._transition(now, ControllerState.POLICY, "stand-up done")
            else:
                self._enter_damping(now, f"cannot enter POLICY: {missing}")
        return cmd

    def _watchdog(self, now: float) -> str | None:
        # the common case (all fresh) is decided on cached floats; _age_problem words a failure
        if now - self._joint_status.received > self._joint_max_age:
            return self._age_problem("joint_states", self._joint_max_age, now)
        if self.state is ControllerState.POLICY:
            return self._policy_inputs_problem(now)
        return None

    def _age_problem(self, name: str, max_age: float, now: float) -> str | None:
        st = self.status[name]
        if st.received == -math.inf:
            return f"{name}: none received"
        age = now - st.received
        if age > max_age:
            return f"{name}: {age:.3f} s old (max {max_age} s)"
        return None

    def _policy_inputs_problem(self, now: float) -> str | None:
        cfg = self.config
        problem = None
        if now - self._odometry_status.received > cfg.odometry_max_age:
            problem = self._age_problem("odometry", cfg.odometry_max_age, now)
        if problem is None and self.scanner is not None:
            if now - self._map_status.received > cfg.height_map_max_age:
                problem = self._age_problem("height_map", cfg.height_map_max_age, now)
            if problem is None and cfg.height_map_stamp_max_age > 0:
                age = now - self._map.stamp
                if age > cfg.height_map_stamp_max_age:
                    problem = f"height_map: header stamp is {age:.3f} s old (max {cfg.height_map_stamp_max_age} s)"
            if problem is None and cfg.check_frames:
                map_frame, odom_frame = self._map.frame_id, self._odom_frame
                if map_frame and odom_frame and map_frame != odom_frame:
                    problem = f"height_map: frame {map_frame!r} differs from the odometry frame {odom_frame!r}"
        return problem

    def _stand_up(self, now: float) -> None:
        duration = self.config.stand_up_duration
        s = 1.0 if duration <= 0 else min(max((now - self._stand_t0) / duration, 0.0), 1.0)
        write_stand_up(
            self.command,
            s,
            self._stand_q0,
            self.robot.default_positions,
            self._measured_position,
            self._wheels,
            self._stand_tmp,
        )
        self._set_gains()
        self._stand_done = s >= 1.0

    def _policy(self, now: float) -> str | None:
        inputs, cfg = self.inputs, self.config
        fresh = now - self._command_status.received <= cfg.command_max_age
        self.command_active = fresh
        if fresh:
            inputs.command[...] = self._command_in
        else:
            inputs.command.fill(0.0)
        if self.scanner is not None:
            try:
                self.scanner.scan(self._map, inputs.base_position[0], inputs.base_position[1], self._yaw)
            except HeightScanError as e:
                return f"height_map: {e}"
            if not self.scanner.is_usable:
                return (
                    f"height_map: only {self.scanner.valid_fraction:.0%} of the scan points have map data "
                    f"(min {cfg.min_height_valid_fraction:.0%})"
                )
        obs = self.builder.build(inputs)
        try:
            if self._policy_takes_out:
                actions = self.policy(obs, out=self._policy_out)
            else:
                actions = self.policy(obs)
        except Exception as e:  # any failure of inference must end in DAMPING, never in a crash
            return f"policy: {type(e).__name__}: {e}"
        if actions is self._policy_out and self._map_actions is not None:
            # the NumPy path below in one C call: finite check, clip, last action, targets
            if not self._map_actions():
                return "policy: non-finite action"
            self._targets_clipped = True  # the kernel clipped them to step()'s ranges
            self._set_gains()
            self.policy_steps += 1
            return None
        a = self._action
        try:
            np.copyto(a, actions)
        except (ValueError, TypeError):
            return f"policy: returned shape {np.shape(actions)}, expected ({len(a)},)"
        np.isfinite(a, out=self._finite_actions)  # (a dot product with zeros would warn on inf)
        if _count_nonzero(self._finite_actions) != len(a):
            return "policy: non-finite action"
        if self._action_clip is not None:
            np.maximum(a, self._action_clip_low, out=a)
            np.minimum(a, self._action_clip_high, out=a)
        inputs.last_action[...] = a
        # offset + scale * action; the clip to [low, high] is step()'s final clip, whose ranges are
        # the intersection of the action ranges with the joint limits
        t = self._targets
        np.multiply(a, self._action_scale, out=t)
        np.add(t, self._action_offset, out=t)
        # action i drives joint i (check_fits_robot ensures the order); legs get velocity target 0
        # (PD damping), wheels no position target (the measured one)
        self._target_measured[...] = self._measured_position
        self._target_sources.take(self._target_gather, out=self._command_targets_flat, mode="clip")
        self._set_gains()
        self.policy_steps += 1
        return None

    def _passive(self, damping: bool) -> None:
        write_passive(self.command, self._measured_position, self._measured_velocity, damping)
        self._set_gains()

    def _set_gains(self) -> None:
        """Gains of the current state (written on state changes only)."""
        if self._gains_state is self.state:
            return
        write_gains(self.command, self.robot, self.state)
        self._gains_state = self.state

    def _enter_damping(self, now: float, reason: str, is_fault: bool = True) -> None:
        if is_fault:
            self.fault = reason
        if self.state is not ControllerState.DAMPING:
            self._transition(now, ControllerState.DAMPING, reason)

    def _transition(self, now: float, state: ControllerState, reason: str) -> None:
        self.state = state
        self.transitions.append((now, state, reason))
        if len(self.transitions) > 100:
            del self.transitions[:50]

    # ---- introspection -------------------------------------------------------------------
    def input_ages(self, now: float) -> dict[str, float]:
        """Seconds since the last accepted message of each input (inf: none yet)."""
        return {name: now - st.received for name, st in self.status.items()}

    def diagnostics(self, now: float) -> dict[str, str]:
        """Key/value pairs for diagnostic_msgs (state, fault, input ages and counters)."""
        out = {"state": self.state.value, "fault": self.fault or "", "policy_steps": str(self.policy_steps)}
        for name, st in self.status.items():
            age = now - st.received
            out[f"{name}.age_s"] = "never" if math.isinf(age) else f"{age:.4f}"
            out[f"{name}.accepted"] = str(st.accepted)
            out[f"{name}.refused"] = str(st.refused)
            if st.last_error:
                out[f"{name}.last_error"] = st.last_error
        out["command.active"] = str(self.command_active)
        if self.scanner is not None:
            out["height_scan.valid_fraction"] = f"{self.scanner.valid_fraction:.3f}"
        return out
