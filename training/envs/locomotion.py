"""The constrained locomotion environment: composes the MDP terms over a simulator backend.

Implements the environment API of INTERFACES.md section 1. Everything here is batched over
environments (torch, batch first); the simulator backend only steps and reports state.
One policy step:

1. raw actions are clipped, optionally delayed by one step (latency randomisation), turned
   into joint targets ``clip(offset + scale * action, low, high)`` (legs: position around the
   default pose, wheels: velocity) and handed to the simulator, whose PD loops run at the
   physics rate for ``decimation`` steps;
2. the state comes back as tensors; commands are resampled on their timer; terminations,
   rewards (Table I), costs (the constraint list) and violation flags are computed;
3. ended episodes are logged, the terrain curriculum updated, those envs reset; observations
   are returned for the post-reset state (the pre-reset ones go to ``infos["terminal_obs"]``).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import torch

from aow_policy.layout import ObservationLayout
from aow_policy.robot import load_robot
from aow_policy.violations import any_over, outside_range
from training.checkpoint import portable_env_state
from training.envs.config import COMMAND_MODES, TaskConfig
from training.mdp import commands as cmd
from training.mdp import costs as cst
from training.mdp import gait
from training.mdp import rewards as rew
from training.mdp import terminations as term
from training.mdp.costs import CostType
from training.mdp.math import quat_from_yaw, yaw_from_quat
from training.mdp.observations import ObservationAssembler, height_scan, projected_gravity, scan_points_world_xy
from training.sim.backends.base import PhysicsRandomization, SimState
from training.sim.backends.factory import create_backend
from training.sim.terrain import Terrain, TerrainCurriculum


class LocomotionEnv:
    def __init__(
        self,
        cfg: TaskConfig,
        num_envs: int,
        backend: str = "mujoco",
        device: str | torch.device = "cpu",
        seed: int = 0,
    ):
        cfg.validate()
        if not (isinstance(num_envs, int) and num_envs > 0):
            raise ValueError(f"num_envs: must be a positive integer, got {num_envs!r}")
        self.cfg = cfg
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.backend_name = backend
        if self.device.type == "cpu" and cfg.sim.torch_threads is not None:
            torch.set_num_threads(cfg.sim.torch_threads)  # process-wide: see SimConfig.torch_threads
        self.robot = robot = load_robot(cfg.robot_config)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.noise_rng = np.random.default_rng(seed + 7) if self.device.type == "cpu" else self.generator
        self.dt = robot.rates.policy_dt
        self.max_episode_length = round(cfg.episode_length_s / self.dt)

        self.terrain = Terrain.generate(cfg.terrain) if cfg.terrain.kind == "rough" else None
        dr = cfg.domain_rand
        randomization = PhysicsRandomization(
            friction=dr.friction,
            added_base_mass=dr.added_base_mass,
            kp_scale=dr.kp_scale,
            kd_scale=dr.kd_scale,
            motor_strength=dr.motor_strength,
            num_variants=dr.num_variants,
        )
        self.sim = create_backend(
            backend,
            robot=robot,
            wheeled=cfg.wheeled,
            terrain=self.terrain,
            num_envs=num_envs,
            solver=cfg.sim.solver,
            randomization=randomization,
            num_threads=cfg.sim.num_threads,
            warp_nconmax=cfg.sim.warp_nconmax,
            warp_njmax=cfg.sim.warp_njmax,
            leg_actuator=cfg.sim.leg_actuator_model(),
            seed=seed,
            device=self.device,
        )
        self.height_sampler = self.sim.height_sampler
        self.curriculum = (
            TerrainCurriculum(
                self.terrain,
                num_envs,
                cfg.terrain.max_init_level,
                enabled=cfg.terrain.curriculum,
                generator=torch.Generator().manual_seed(seed + 1),
                device=self.device,
            )
            if self.terrain is not None
            else None
        )
        self._setup_joints()
        self._setup_observations()
        self._setup_costs()
        self._setup_rewards()
        self._setup_buffers()

    # ---- set-up ---------------------------------------------------------------------------

    def _t(self, values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.tensor(np.array(values), dtype=dtype, device=self.device)

    def _setup_joints(self) -> None:
        robot = self.robot
        self.joint_names = tuple(self.sim.joint_names)
        idx = robot.index_of(self.joint_names)
        joints = [robot.joints[i] for i in idx]
        self.num_joints = self.num_actions = len(joints)
        is_leg = [j.kind == "leg" for j in joints]
        self.leg_ids = self._t([i for i, leg in enumerate(is_leg) if leg], torch.long)
        self.legs = _as_slice(self.leg_ids)  # a view instead of a gather where the legs are contiguous
        self.is_leg = self._t(is_leg, torch.bool)
        self.wheel_ids = self._t([i for i, leg in enumerate(is_leg) if not leg], torch.long)
        if self.cfg.domain_rand.braked_wheels_share > 0 and self.wheel_ids.numel() == 0:
            raise ValueError(f"domain_rand.braked_wheels_share: the {self.cfg.name} robot has no wheels")
        self.default_joint_pos = self._t(robot.default_positions[idx])
        offsets = [j.default_position if j.kind == "leg" else 0.0 for j in joints]
        low = [j.position_limits[0] if j.kind == "leg" else -j.velocity_limit for j in joints]
        high = [j.position_limits[1] if j.kind == "leg" else j.velocity_limit for j in joints]
        self.action_offset = self._t(offsets)
        self.action_scale = self._t(robot.action_scales[idx])
        self.action_low, self.action_high = self._t(low), self._t(high)
        self.action_layout = {
            "joint_names": list(self.joint_names),
            "kinds": [j.kind for j in joints],
            "scales": [float(s) for s in robot.action_scales[idx]],
            "offsets": [float(o) for o in offsets],
            "low": [float(v) for v in low],
            "high": [float(v) for v in high],
        }
        self.speed_limits = self._t(robot.constraint_velocity_limits[idx])
        self.actuator_speed_limits = self._t(robot.velocity_limits[idx])
        self.torque_limits = self._t(robot.constraint_torque_limits[idx])
        self.pos_lower = self._t(robot.position_lower[idx])
        self.pos_upper = self._t(robot.position_upper[idx])
        hip_names = [robot.joint_names[i] for i in robot.hip_joint_indices]
        self.hip_ids = self._t([self.joint_names.index(n) for n in hip_names], torch.long)
        self.hip_lower, self.hip_upper = self.pos_lower[self.hip_ids], self.pos_upper[self.hip_ids]
        leg_speed = self.speed_limits[self.leg_ids]
        self.rate_threshold, self.second_rate_threshold = cst.smoothness_thresholds(leg_speed, self.dt)
        self.terminal_contacts = torch.as_tensor(self.sim.terminal_contacts, device=self.device)
        # What ended each robot's episode at the last step (filled by step()).
        self.ends: dict[str, torch.Tensor] = {}
        self.tripped_joints: torch.Tensor | None = None
        self.trip_foot_contacts: torch.Tensor | None = None

    def _setup_observations(self) -> None:
        cfg, robot = self.cfg.observations, self.robot
        leg_names = [self.joint_names[i] for i in self.leg_ids.tolist()]
        sizes = {
            "base_lin_vel": (3, ()),
            "base_ang_vel": (3, ()),
            "projected_gravity": (3, ()),
            "velocity_commands": (3, ()),
            "joint_pos": (len(leg_names), tuple(leg_names)),
            "joint_vel": (self.num_joints, self.joint_names),
            "last_action": (self.num_actions, ()),
        }
        specs = []
        for name in cfg.order:
            if name == "height_scan":
                if not cfg.height_scan:
                    continue
                specs.append(
                    {
                        "name": name,
                        "size": robot.height_scan.num_points,
                        "scale": cfg.scales[name],
                        "clip": cfg.height_scan_clip,
                        "params": {"height_offset": cfg.height_offset},
                    }
                )
                continue
            size, joints = sizes[name]
            specs.append({"name": name, "size": size, "scale": cfg.scales[name], "joints": list(joints)})
        layout = ObservationLayout.build(specs)
        self.obs_spec = {"policy": layout, "critic": layout}
        noise = {k: v for k, v in cfg.noise.items() if layout.has(k)} if self.cfg.domain_rand.observation_noise else {}
        self._policy_obs = ObservationAssembler(layout, noise, self.device)
        self._critic_obs = ObservationAssembler(layout, None, self.device)
        self.scan_points = self._t(robot.height_scan.points)

    def _setup_costs(self) -> None:
        terms = self.cfg.costs.terms
        self.cost_names = list(terms)
        self.cost_groups = self.cfg.costs.resolved_groups()
        self._cost_kinds = [(terms[n].kind, cst.parse_cost_type(terms[n].type, n)) for n in self.cost_names]
        if any(kind == "body_contact" for kind, _ in self._cost_kinds) and not len(self.sim.contact_names):
            raise ValueError("costs: body_contact needs contact sensing, which this backend lacks")

    def _setup_rewards(self) -> None:
        cfg = self.cfg.rewards
        weights = dict(cfg.weights)
        if cfg.constraint_rewards:
            weights.update(cfg.constraint_weights)
        self.reward_names = [n for n, w in weights.items() if w != 0.0]
        if "feet_air_time" in self.reward_names and self.sim.state().foot_contacts is None:
            raise ValueError(f"rewards.feet_air_time: the {self.backend_name} backend reports no foot contacts")
        scale = self.dt if cfg.scale_by_dt else 1.0
        self.reward_weights = self._t([weights[n] * scale for n in self.reward_names])

    def _setup_buffers(self) -> None:
        n, j, dev = self.num_envs, self.num_joints, self.device
        nl = self.leg_ids.numel()
        z = dict(device=dev)
        self.actions = torch.zeros(n, j, **z)  # the policy's latest raw (clipped) action
        self.last_actions = torch.zeros(n, j, **z)
        feet = self.sim.state().foot_contacts
        num_feet = 0 if feet is None else feet.shape[1]
        self.feet_air_time = torch.zeros(n, num_feet, **z)  # s since each wheel / foot left the ground
        self.last_foot_contact = torch.ones(n, num_feet, dtype=torch.bool, **z)
        self.landed_air_time = torch.zeros(n, num_feet, **z)
        self.applied_actions = torch.zeros(n, j, **z)
        self.leg_targets = torch.zeros(n, nl, **z)
        self.last_leg_targets = torch.zeros(n, nl, **z)
        self.second_last_leg_targets = torch.zeros(n, nl, **z)
        self.last_joint_vel = torch.zeros(n, j, **z)
        self.commands = torch.zeros(n, 4, **z)  # vx, vy, yaw rate, heading
        self.episode_length = torch.zeros(n, dtype=torch.long, **z)  # for time-outs
        self.steps_since_reset = torch.zeros(n, dtype=torch.long, **z)
        self.delayed = torch.zeros(n, dtype=torch.bool, **z)
        self.wheels_braked = torch.zeros(n, dtype=torch.bool, **z)  # see DomainRandConfig.braked_wheels_share
        self.episode_rewards = torch.zeros(n, len(self.reward_names), **z)
        self.episode_costs = torch.zeros(n, len(self.cost_names), **z)
        self.episode_violations = torch.zeros(n, len(self.cost_names), **z)
        self.origins = torch.zeros(n, 3, **z)
        # Episode sums for the terrain curriculum's "along_command" distance: metres made good
        # along the commanded direction (capped at the commanded speed) and metres asked for.
        self.progress_along_command = torch.zeros(n, **z)
        self.commanded_path = torch.zeros(n, **z)
        # Summed only where the curriculum reads them (not on every step of every task).
        self._curriculum_by_progress = (
            self.curriculum is not None and self.cfg.terrain.curriculum_distance == "along_command"
        )
        self.common_step = 0
        c = self.robot.commands
        ranges = {"lin_vel_x": c.lin_vel_x, "lin_vel_y": c.lin_vel_y, "ang_vel_yaw": c.ang_vel_yaw}
        ranges.update(self.cfg.commands.ranges or {})
        self.command_low = self._t([ranges["lin_vel_x"][0], ranges["lin_vel_y"][0], ranges["ang_vel_yaw"][0], -math.pi])
        self.command_high = self._t([ranges["lin_vel_x"][1], ranges["lin_vel_y"][1], ranges["ang_vel_yaw"][1], math.pi])
        shares = self.cfg.commands.mode_shares
        self.command_mode_shares = self._t([float(shares.get(m, 0.0)) for m in COMMAND_MODES])
        self.resample_steps = max(1, round(self.cfg.commands.resampling_time / self.dt))
        self.push_steps = max(1, round(self.cfg.domain_rand.push_interval_s / self.dt))
        self.sim_failures = 0
        self._all_ids = torch.arange(n, device=dev)

    # ---- helpers --------------------------------------------------------------------------

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device)

    def _uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        return low + (high - low) * self._rand(*shape)

    def _resample_commands(self, ids: torch.Tensor, timed: bool = False) -> None:
        """New commands for ``ids``; ``timed``: drawn on the resampling timer (a reversal may
        replace them), not at a reset (where the running command belongs to the last episode)."""
        if ids.numel() == 0:
            return
        new = cmd.sample_uniform(ids.numel(), self.command_low, self.command_high, self.generator)
        c = self.cfg.commands
        if c.mode_shares:
            new = cmd.apply_modes(new, cmd.draw_modes(ids.numel(), self.command_mode_shares, self.generator))
        standing = self._rand(ids.numel()) < c.standing_fraction
        new[:, :3] = cmd.zero_standing(new[:, :3], standing)
        new[:, :3] = cmd.zero_small_linear(new[:, :3], c.small_command_threshold)
        if timed and c.reversal_share > 0:  # drawn only when on: other runs keep their random streams
            reverse = self._rand(ids.numel()) < c.reversal_share
            new[:, :3] = cmd.reverse_where(
                new[:, :3], self.commands[ids, :3], reverse, self.command_low[:3], self.command_high[:3]
            )
        self.commands[ids] = new

    def _update_heading_commands(self, yaw: torch.Tensor) -> None:
        c = self.cfg.commands
        if c.heading_command:
            moving = self.commands[:, :3].abs().sum(-1) > 0
            rate = cmd.heading_to_yaw_rate(
                self.commands[:, 3], yaw, c.heading_gain, float(self.command_low[2]), float(self.command_high[2])
            )
            self.commands[:, 2] = torch.where(moving, rate, self.commands[:, 2])

    # ---- observations ---------------------------------------------------------------------

    def _raw_observations(
        self, s: SimState, rows: torch.Tensor | None, gravity: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        def sel(t: torch.Tensor) -> torch.Tensor:
            return t if rows is None else t[rows]

        quat, pos = sel(s.base_quat), sel(s.base_pos)
        joint_pos = sel(s.joint_pos)
        raw = {
            "base_lin_vel": sel(s.base_lin_vel),
            "base_ang_vel": sel(s.base_ang_vel),
            "projected_gravity": projected_gravity(quat) if gravity is None else gravity,
            "velocity_commands": sel(self.commands)[:, :3],
            "joint_pos": (joint_pos - self.default_joint_pos)[:, self.legs],
            "joint_vel": sel(s.joint_vel),
            "last_action": sel(self.actions),
        }
        if self.cfg.observations.height_scan:
            x, y = scan_points_world_xy(pos, yaw_from_quat(quat), self.scan_points)
            heights = self.height_sampler.heights_at(x, y)
            raw["height_scan"] = height_scan(pos[:, 2], heights, self.cfg.observations.height_offset)
        return raw

    def _observe(
        self, s: SimState, rows: torch.Tensor | None = None, gravity: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        raw = self._raw_observations(s, rows, gravity)
        return {
            "policy": self._policy_obs(raw, add_noise=True, generator=self.noise_rng),
            "critic": self._critic_obs(raw),
        }

    # ---- rewards, costs -------------------------------------------------------------------

    def _reward_terms(self, s: SimState, base_height: torch.Tensor, gravity: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg.rewards
        legs = self.legs
        out = []
        for name in self.reward_names:
            if name == "lin_vel":
                v = rew.lin_vel_tracking(self.commands[:, :2], s.base_lin_vel[:, :2], cfg.tracking_sharpness)
            elif name == "yaw_rate":
                v = rew.yaw_rate_tracking(self.commands[:, 2], s.base_ang_vel[:, 2], cfg.yaw_sharpness)
            elif name == "base_stability":
                v = rew.base_stability(s.base_lin_vel[:, 2], s.base_ang_vel[:, :2])
            elif name == "base_height":
                v = rew.base_height_error(base_height, cfg.height_target)
            elif name == "torque":
                v = rew.torque_squared(s.joint_torque)
            elif name == "joint_vel":
                v = rew.joint_vel_squared(s.joint_vel[:, legs])
            elif name == "joint_acc":
                v = rew.joint_acc_squared(s.joint_vel[:, legs], self.last_joint_vel[:, legs], self.dt)
            elif name == "smoothness_1":
                v = rew.command_rate_squared(self.leg_targets, self.last_leg_targets)
            elif name == "smoothness_2":
                v = rew.command_second_diff_squared(
                    self.leg_targets, self.last_leg_targets, self.second_last_leg_targets
                )
            elif name == "torque_limits":
                v = rew.limit_overrun_squared(s.joint_torque, self.torque_limits)
            elif name == "speed_limits":
                v = rew.limit_overrun_squared(s.joint_vel, self.speed_limits)
            elif name == "pos_upper_limits":
                v = rew.upper_limit_overrun_squared(s.joint_pos, self.pos_upper)
            elif name == "pos_lower_limits":
                v = rew.lower_limit_overrun_squared(s.joint_pos, self.pos_lower)
            elif name == "body_contact":
                v = rew.body_contact_count(s.contacts)
            elif name == "hip_range":
                v = cst.position_range_cost(
                    s.joint_pos[:, self.hip_ids], self.hip_lower, self.hip_upper, CostType.INDICATOR
                )
            elif name == "feet_air_time":
                gate = gait.air_time_gate(self.commands, cfg.air_time_gate)
                v = gait.feet_air_time(self.landed_air_time, cfg.air_time_target, gate)
            elif name == "lin_vel_z":
                v = rew.lin_vel_z_squared(s.base_lin_vel[:, 2])
            elif name == "ang_vel_xy":
                v = rew.ang_vel_xy_squared(s.base_ang_vel[:, :2])
            elif name == "orientation":
                v = rew.orientation_squared(gravity)
            elif name == "action_rate":
                v = rew.action_rate_squared(self.actions, self.last_actions)
            else:  # validated in the config
                raise AssertionError(name)
            out.append(v)
        return torch.stack(out).T  # stacking on dim 0 is several times faster for these sizes

    def _cost_terms(self, s: SimState) -> tuple[torch.Tensor, torch.Tensor]:
        """Costs [N, C] and per-step violation flags [N, C] (any limit strictly exceeded)."""
        costs, flags = [], []
        rate = second = None
        for kind, ctype in self._cost_kinds:
            if kind in ("smoothness_1", "smoothness_2", "joint_speed", "joint_torque"):
                if kind == "smoothness_1":
                    if rate is None:
                        rate = cst.command_rate(self.leg_targets, self.last_leg_targets, self.dt)
                    values, limits = rate, self.rate_threshold
                elif kind == "smoothness_2":
                    if second is None:
                        second = cst.command_second_rate(
                            self.leg_targets, self.last_leg_targets, self.second_last_leg_targets, self.dt
                        )
                    values, limits = second, self.second_rate_threshold
                elif kind == "joint_speed":
                    values, limits = s.joint_vel, self.speed_limits
                else:
                    values, limits = s.joint_torque, self.torque_limits
                c = cst.limit_cost(values, limits, ctype)
                f = c if ctype is CostType.INDICATOR else any_over(values, limits).float()
            elif kind == "hip_position":
                q = s.joint_pos[:, self.hip_ids]
                lo, hi = self.hip_lower, self.hip_upper
                c = cst.position_range_cost(q, lo, hi, ctype)
                f = c if ctype is CostType.INDICATOR else outside_range(q, lo, hi).any(-1).float()
            else:  # body_contact
                c = cst.body_contact_cost(s.contacts, ctype)
                f = (s.contacts > 0).any(-1).float()
            costs.append(c)
            flags.append(f)
        if not costs:
            z = torch.zeros(self.num_envs, 0, device=self.device)
            return z, z
        return torch.stack(costs).T, torch.stack(flags).T

    # ---- API ------------------------------------------------------------------------------

    def reset(self) -> dict[str, torch.Tensor]:
        """Reset every environment; with ``init.random_episode_start`` episodes begin at random
        steps, so time-outs spread over the episode length."""
        ids = self._all_ids
        self._reset_envs(ids)
        if self.cfg.init.random_episode_start:
            self.episode_length[:] = torch.randint(
                0, self.max_episode_length, (self.num_envs,), generator=self.generator, device=self.device
            )
        return self._observe(self.sim.state())

    def _reset_envs(self, ids: torch.Tensor) -> None:
        n = ids.numel()
        if n == 0:
            return
        init = self.cfg.init
        if self.curriculum is not None:
            origins = self.curriculum.origins(ids)
        else:
            origins = torch.zeros(n, 3, device=self.device)
        self.origins[ids] = origins
        pos = origins.clone()
        pos[:, :2] += self._uniform(-init.spawn_xy_range, init.spawn_xy_range, n, 2)
        pos[:, 2] += self.sim_standing_height + init.spawn_clearance
        yaw = self._uniform(-math.pi, math.pi, n) if init.random_yaw else torch.zeros(n, device=self.device)
        quat = quat_from_yaw(yaw)
        r = init.base_vel_range
        lin, ang = self._uniform(-r, r, n, 3), self._uniform(-r, r, n, 3)
        lo, hi = init.joint_pos_scale
        joint_pos = self.default_joint_pos.expand(n, -1) * self._uniform(lo, hi, n, self.num_joints)
        joint_pos = torch.where(self.is_leg, joint_pos, torch.zeros_like(joint_pos))
        joint_pos = joint_pos.clamp(self.pos_lower, self.pos_upper)
        joint_vel = torch.zeros(n, self.num_joints, device=self.device)
        self.sim.reset(ids, pos, quat, lin, ang, joint_pos, joint_vel)

        default_targets = self.action_offset[self.leg_ids].clamp(
            self.action_low[self.leg_ids], self.action_high[self.leg_ids]
        )
        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.applied_actions[ids] = 0.0
        self.feet_air_time[ids] = 0.0
        self.last_foot_contact[ids] = True
        self.landed_air_time[ids] = 0.0
        self.leg_targets[ids] = default_targets
        self.last_leg_targets[ids] = default_targets
        self.second_last_leg_targets[ids] = default_targets
        self.last_joint_vel[ids] = joint_vel
        self.episode_length[ids] = 0
        self.steps_since_reset[ids] = 0
        self.progress_along_command[ids] = 0.0
        self.commanded_path[ids] = 0.0
        self.episode_rewards[ids] = 0.0
        self.episode_costs[ids] = 0.0
        self.episode_violations[ids] = 0.0
        self._resample_commands(ids)
        dr = self.cfg.domain_rand
        if dr.action_latency:
            self.delayed[ids] = self._rand(n) < dr.latency_probability
        if dr.braked_wheels_share > 0:  # drawn only when on: other runs keep their random streams
            self.wheels_braked[ids] = self._rand(n) < dr.braked_wheels_share

    def _accumulate_progress(self, s: SimState) -> None:
        """Adds this step's progress along the command (the base velocity's component along the
        commanded horizontal direction, clipped to [0, commanded speed]) and the commanded path."""
        command = self.commands[:, :2]
        speed = command.norm(dim=-1)
        direction = command / speed.clamp(min=1e-6)[:, None]
        along = (s.base_lin_vel[:, :2] * direction).sum(-1).clamp(min=0.0)
        self.progress_along_command += torch.minimum(along, speed) * self.dt
        self.commanded_path += speed * self.dt

    @property
    def sim_standing_height(self) -> float:
        return float(self.sim.standing_height)

    def step(self, actions: torch.Tensor):
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions: expected shape {(self.num_envs, self.num_actions)}, got {tuple(actions.shape)}")
        clip = self.cfg.actions.clip
        actions = actions.detach().to(self.device, torch.float32).clamp(-clip, clip)
        actions = torch.nan_to_num(actions, nan=0.0)  # a NaN action must not reach the simulator
        if self.cfg.domain_rand.action_latency:
            applied = torch.where(self.delayed[:, None], self.actions, actions)
        else:
            applied = actions
        targets = torch.clamp(self.action_offset + self.action_scale * applied, self.action_low, self.action_high)
        if self.cfg.domain_rand.braked_wheels_share > 0:
            wheels = targets[:, self.wheel_ids]
            targets[:, self.wheel_ids] = torch.where(self.wheels_braked[:, None], torch.zeros_like(wheels), wheels)
        self.second_last_leg_targets = self.last_leg_targets
        self.last_leg_targets = self.leg_targets
        self.leg_targets = targets[:, self.legs]
        self.last_actions = self.actions
        self.actions, self.applied_actions = actions, applied

        self.sim.step(targets)
        s = self.sim.state()
        # Simulator health (contact and solver overflows) of these physics steps, read before any
        # reset below runs other physics; the runner logs the keys as sim/<key>.
        sim_stats = self.sim.sim_stats()
        self.episode_length += 1
        self.steps_since_reset += 1
        self.common_step += 1
        if self._curriculum_by_progress:
            self._accumulate_progress(s)

        # Commands on their timer (and heading control).
        resample = (self.steps_since_reset % self.resample_steps == 0).nonzero().squeeze(-1)
        self._resample_commands(resample, timed=True)
        if self.cfg.commands.heading_command:
            self._update_heading_commands(yaw_from_quat(s.base_quat))

        # Terminations.
        gravity = projected_gravity(s.base_quat)
        failed_sim = ~s.healthy  # backends flag NaN, inf and blow-ups here
        tc = self.cfg.terminations
        # Each way an episode can end, kept apart so the episode statistics can say which ended
        # them (a robot can meet several at once): what to fix when a curriculum stalls.
        ends = {"sim_failure": failed_sim}
        ends["orientation"] = term.bad_orientation_from_gravity(gravity, tc.max_roll, tc.max_pitch)
        if tc.base_thigh_contact and self.terminal_contacts.any():
            ends["contact"] = term.contact(s.contacts[:, self.terminal_contacts])
        if tc.joint_speed_trip is not None:
            # Which joints, and which wheels were on the ground, kept for diagnosis
            # (training.episode_ends): the state is reset before step() returns.
            self.tripped_joints = term.joints_over(s.joint_vel, tc.joint_speed_trip * self.actuator_speed_limits)
            self.trip_foot_contacts = s.foot_contacts > 0 if s.foot_contacts is not None else None
            ends["joint_speed_trip"] = self.tripped_joints.any(-1)
        terminated = failed_sim.clone()
        for hit in ends.values():
            terminated |= hit
        time_outs = term.time_out(self.episode_length, self.max_episode_length) & ~terminated
        ends["time_out"] = time_outs
        self.ends = ends  # this step's causes per robot [N] each (read before the next step)
        dones = terminated | time_outs

        # Rewards and costs (computed on the terminal state of ending episodes).
        base_height = s.base_pos[:, 2] - self.height_sampler.heights_at(s.base_pos[:, 0], s.base_pos[:, 1])
        if s.foot_contacts is not None:
            air = gait.update_air_time(self.feet_air_time, self.last_foot_contact, s.foot_contacts, self.dt)
            self.feet_air_time, self.last_foot_contact = air.air_time, air.last_contact
            self.landed_air_time = air.landed_air_time
        reward_terms = self._reward_terms(s, base_height, gravity) * self.reward_weights
        costs, flags = self._cost_terms(s)
        if bool(failed_sim.any()):  # a blown-up state says nothing: zero it, count it, reset it
            keep = (~failed_sim)[:, None]
            reward_terms = torch.where(keep, reward_terms, torch.zeros_like(reward_terms))
            costs = torch.where(keep, costs, torch.zeros_like(costs))
            flags = torch.where(keep, flags, torch.zeros_like(flags))
            self.sim_failures += int(failed_sim.sum())
        rewards = reward_terms.sum(-1)
        if self.cfg.rewards.only_positive:
            rewards = rewards.clamp(min=0.0)
        self.episode_rewards += reward_terms
        self.episode_costs += costs
        self.episode_violations += flags
        self.last_joint_vel = s.joint_vel.clone()

        # Random pushes (legged_gym: every push interval, all robots).
        dr = self.cfg.domain_rand
        if dr.push_robots and self.common_step % self.push_steps == 0:
            self.sim.push(self._all_ids, self._uniform(-dr.max_push_vel_xy, dr.max_push_vel_xy, self.num_envs, 2))
            s = self.sim.state()

        obs = self._observe(s, gravity=gravity)
        infos: dict[str, Any] = {"time_outs": time_outs, "episode": {}}
        done_ids = dones.nonzero().squeeze(-1)
        if done_ids.numel():
            if self.cfg.terminal_obs:
                infos["terminal_obs"] = {k: torch.nan_to_num(v) for k, v in obs.items()} if failed_sim.any() else obs
            infos["episode"] = self._episode_info(done_ids, failed_sim)
            # Shares of the ending episodes by what ended them (the runner weighs them by count).
            shares = torch.stack([hit[done_ids] for hit in ends.values()]).float().mean(-1).tolist()
            infos["episode"].update({f"ends/{cause}": v for cause, v in zip(ends, shares, strict=True)})
            if self.curriculum is not None:
                if self._curriculum_by_progress:
                    dist, asked = self.progress_along_command[done_ids], self.commanded_path[done_ids]
                else:  # legged_gym's: net displacement against the last command held all episode
                    dist = (s.base_pos[done_ids, :2] - self.origins[done_ids, :2]).norm(dim=-1)
                    asked = self.commands[done_ids, :2].norm(dim=-1) * self.steps_since_reset[done_ids] * self.dt
                self.curriculum.update(done_ids, dist, asked, terminated[done_ids])
            self._reset_envs(done_ids)
            fresh = self._observe(self.sim.state(), done_ids)
            obs = {k: v.clone() for k, v in obs.items()}
            for k in obs:
                obs[k][done_ids] = fresh[k]
        infos["sim_failures"] = self.sim_failures
        infos["sim_stats"] = sim_stats
        return obs, rewards, costs, dones, infos

    def _episode_info(self, ids: torch.Tensor, failed_sim: torch.Tensor) -> dict[str, float]:
        stats = torch.cat(
            [
                self.episode_rewards[ids],
                self.episode_costs[ids],
                self.episode_violations[ids],
                self.steps_since_reset[ids, None].float(),
            ],
            dim=-1,
        ).mean(0)
        keys = (
            [f"rew/{n}" for n in self.reward_names]
            + [f"cost/{n}" for n in self.cost_names]
            + [f"violations/{n}" for n in self.cost_names]
            + ["length"]
        )
        info = dict(zip(keys, stats.tolist(), strict=True))
        info["sim_failures"] = float(failed_sim[ids].sum())
        if self.curriculum is not None:
            info["terrain_level"] = self.curriculum.mean_level()
            for kind, level in self.curriculum.mean_level_by_kind().items():
                info[f"terrain_level/{kind}"] = level
        return info

    # ---- resume ---------------------------------------------------------------------------

    # Per-env buffers that, with the simulation state, make up everything a step depends on.
    _EXACT_BUFFERS = (
        "actions",
        "last_actions",
        "applied_actions",
        "leg_targets",
        "last_leg_targets",
        "second_last_leg_targets",
        "last_joint_vel",
        "commands",
        "episode_length",
        "steps_since_reset",
        "delayed",
        "episode_rewards",
        "episode_costs",
        "episode_violations",
        "origins",
        "feet_air_time",
        "last_foot_contact",
        "landed_air_time",
        "wheels_braked",
        "progress_along_command",
        "commanded_path",
    )
    # Buffers added after checkpoints with the whole state were first written: absent from such a
    # checkpoint, they keep their initial value (the lever they belong to was off then).
    _EXACT_BUFFERS_OPTIONAL = frozenset({"wheels_braked", "progress_along_command", "commanded_path"})

    @property
    def resume_exact(self) -> bool:
        """Whether :meth:`state_dict` holds the whole simulation (backends with ``get_state``: C
        MuJoCo), so that a resumed run continues the very same episodes."""
        return hasattr(self.sim, "get_state")

    def state_dict(self) -> dict[str, Any]:
        """Random generator, curriculum and counters; with :attr:`resume_exact` also the whole
        simulation and every per-env buffer (``exact``), so a run resumed on the same device,
        backend and number of environments continues bit for bit."""
        out: dict[str, Any] = {"generator": self.generator.get_state(), "common_step": self.common_step}
        if self.curriculum is not None:
            out["terrain_levels"] = self.curriculum.levels.clone()
        if self.resume_exact:
            exact: dict[str, Any] = {name: getattr(self, name).detach().cpu().clone() for name in self._EXACT_BUFFERS}
            exact["sim"] = self.sim.get_state()
            exact["sim_failures"] = self.sim_failures
            if isinstance(self.noise_rng, np.random.Generator):
                exact["noise_rng"] = json.dumps(self.noise_rng.bit_generator.state)
            if self.curriculum is not None and self.curriculum.generator is not None:
                exact["curriculum_generator"] = self.curriculum.generator.get_state()
            out["exact"] = exact
        return out

    @staticmethod
    def holds_whole_state(state: dict[str, Any] | None) -> bool:
        """Whether a saved :meth:`state_dict` holds the simulation (checkpoints from before exact
        resume, or from a backend without ``get_state``, do not)."""
        return state is not None and "exact" in state

    @staticmethod
    def portable_state(state: dict[str, Any]) -> dict[str, Any]:
        """The part of a :meth:`state_dict` that carries over to another device, backend or
        number of environments (the generator, counters and terrain levels; not the simulation)."""
        return portable_env_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``state`` as from :meth:`state_dict`; or with ``seed`` in place of ``generator`` (a run
        resumed on another device type, whose generator cannot take the saved state)."""
        if "generator" in state:
            self.generator.set_state(state["generator"])
        else:
            self.generator.manual_seed(int(state["seed"]))
        self.common_step = int(state.get("common_step", 0))
        if self.curriculum is not None and "terrain_levels" in state:
            levels = torch.as_tensor(state["terrain_levels"], device=self.device)
            if levels.shape != self.curriculum.levels.shape:
                raise ValueError(f"saved terrain levels are for {levels.shape[0]} envs, this env has {self.num_envs}")
            self.curriculum.levels[:] = levels
        exact = state.get("exact")
        if exact is not None:
            if not self.resume_exact:
                raise ValueError(f"the saved simulation state cannot be restored on the {self.backend_name} backend")
            self.sim.set_state(exact["sim"])
            for name in self._EXACT_BUFFERS:
                if name not in exact and name in self._EXACT_BUFFERS_OPTIONAL:
                    continue
                saved = torch.as_tensor(exact[name])
                if saved.shape != getattr(self, name).shape:
                    raise ValueError(
                        f"saved {name} has shape {tuple(saved.shape)}, this env {tuple(getattr(self, name).shape)}"
                    )
                setattr(self, name, saved.to(self.device).clone())
            self.sim_failures = int(exact["sim_failures"])
            if "noise_rng" in exact and isinstance(self.noise_rng, np.random.Generator):
                self.noise_rng.bit_generator.state = json.loads(exact["noise_rng"])
            if "curriculum_generator" in exact and self.curriculum is not None:
                self.curriculum.generator.set_state(exact["curriculum_generator"])

    def close(self) -> None:
        self.sim.close()


def _as_slice(ids: torch.Tensor) -> slice | torch.Tensor:
    """A slice for evenly spaced increasing indices (cheap views), else the index tensor."""
    values = ids.tolist()
    if len(values) >= 2:
        step = values[1] - values[0]
        if step > 0 and all(b - a == step for a, b in itertools.pairwise(values)):
            return slice(values[0], values[-1] + 1, step)
    if len(values) == 1:
        return slice(values[0], values[0] + 1)
    return ids
