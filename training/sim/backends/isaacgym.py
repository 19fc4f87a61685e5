"""Isaac Gym backend (the paper's simulator), legged_gym conventions. Imported only where
``isaacgym`` is installed; everything task-related stays in ``training.mdp`` and the env.

The robot comes from the same MjSpec as the MuJoCo backends, written out as MJCF with only
bodies, joints and geoms (Isaac Gym's MJCF importer reads those). The PD loops run inside PhysX
as joint drives: legs in position mode (kp, kd, torque limit from the contract), wheels in
velocity mode (gain kd). Rough terrain is the same height field as a triangle mesh split like
MuJoCo's (:meth:`Terrain.trimesh`), so the height scan samples the surface the robot touches.
Contacts are PhysX's net contact forces on the watched bodies (> 1 N counts as contact).
Physics randomisation is drawn once per env at creation, as legged_gym does.
Known approximation: PhysX has no cylinder primitive; the importer approximates the wheels.

Isaac Gym refuses to load after torch: a process using this backend must ``import isaacgym``
before anything imports torch (e.g. first thing in the training entry point).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
from isaacgym import gymapi, gymtorch

from aow_policy.robot import Robot
from training.mdp.math import quat_rotate, quat_rotate_inverse
from training.sim.backends.base import PhysicsRandomization, SimState
from training.sim.backends.scene import PARAM_NAMES, sample_params
from training.sim.model import BASE_BODY, build_spec, model_info
from training.sim.terrain import HeightSampler, Terrain

CONTACT_FORCE_THRESHOLD = 1.0  # N, legged_gym's


class IsaacGymBackend:
    def __init__(
        self,
        robot: Robot,
        wheeled: bool,
        terrain: Terrain | None,
        num_envs: int,
        decimation: int,
        randomization: PhysicsRandomization | None = None,
        seed: int = 0,
        device: torch.device | str = "cuda:0",
    ):
        self.gym = gym = gymapi.acquire_gym()
        self.device = torch.device(device)
        self.num_envs, self.decimation = num_envs, int(decimation)
        self.physics_dt = robot.rates.physics_dt
        gpu = self.device.type == "cuda"
        params = gymapi.SimParams()
        params.dt, params.substeps, params.up_axis = self.physics_dt, 1, gymapi.UP_AXIS_Z
        params.gravity = gymapi.Vec3(0.0, 0.0, -9.81)
        params.use_gpu_pipeline = gpu
        params.physx.use_gpu = gpu
        params.physx.solver_type, params.physx.num_position_iterations, params.physx.num_velocity_iterations = 1, 4, 0
        params.physx.contact_offset, params.physx.rest_offset = 0.01, 0.0
        params.physx.bounce_threshold_velocity, params.physx.max_depenetration_velocity = 0.5, 1.0
        index = self.device.index or 0
        self.sim = gym.create_sim(index, -1, gymapi.SIM_PHYSX, params)
        self._add_ground(terrain)

        # Robot asset from the MuJoCo model's geometry, and the joint order by name.
        spec = build_spec(wheeled=wheeled, robot=robot)
        mj_info = model_info(spec.compile(), robot)
        for element in [*spec.actuators, *spec.sensors, *spec.keys]:
            spec.delete(element)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aow.xml")
            with open(path, "w") as f:
                f.write(spec.to_xml())
            opts = gymapi.AssetOptions()
            opts.default_dof_drive_mode = gymapi.DOF_MODE_POS
            opts.collapse_fixed_joints = False
            asset = gym.load_asset(self.sim, tmp, "aow.xml", opts)
        dof_names = gym.get_asset_dof_names(asset)
        body_names = gym.get_asset_rigid_body_names(asset)
        self.joint_names = mj_info.joint_names
        self._dof_ids = torch.tensor([dof_names.index(n) for n in self.joint_names], device=self.device)
        watched = [n for n in body_names if n != "world" and not n.endswith("_WHEEL")]
        if not wheeled:  # the plain robot's feet are geoms on the shanks: shank contact is allowed
            watched = [n for n in watched if not n.endswith("_SHANK")]
        self.contact_names = tuple(watched)
        self._contact_body_ids = torch.tensor([body_names.index(n) for n in watched], device=self.device)
        # Each leg's wheel body (wheeled) or shank (plain: its foot is a geom on it), in leg order.
        suffix = "_WHEEL" if wheeled else "_SHANK"
        foot_bodies = [body_names.index(f"{leg}{suffix}") for leg in mj_info.leg_names]
        self._foot_body_ids = torch.tensor(foot_bodies, device=self.device)
        self.terminal_contacts = torch.tensor(
            [n == BASE_BODY or n.endswith("_THIGH") for n in watched], device=self.device
        )
        self.standing_height = mj_info.standing_height
        self.height_sampler = _sampler(terrain).to(self.device)

        # Environments, with per-env physics parameters (friction, mass, gains) drawn once.
        self.randomization = randomization or PhysicsRandomization()
        rng = np.random.default_rng(seed)
        nominal = np.array([1.0, 0.0, 1.0, 1.0, 1.0])
        self.params = sample_params(self.randomization, num_envs, rng, nominal)
        dof_props = gym.get_asset_dof_properties(asset)
        kinds = {j.name: j for j in robot.joints}
        self.envs, self.actors = [], []
        for i in range(num_envs):
            env = gym.create_env(self.sim, gymapi.Vec3(0, 0, 0), gymapi.Vec3(0, 0, 0), int(np.sqrt(num_envs)) + 1)
            pose = gymapi.Transform(p=gymapi.Vec3(0.0, 0.0, self.standing_height))
            actor = gym.create_actor(env, asset, pose, "aow", i, 0, 0)  # filter 0: self-collisions on
            friction, added_mass, kp_s, kd_s, strength = self.params[i]
            shapes = gym.get_actor_rigid_shape_properties(env, actor)
            for sp in shapes:
                sp.friction = float(friction)
            gym.set_actor_rigid_shape_properties(env, actor, shapes)
            bodies = gym.get_actor_rigid_body_properties(env, actor)
            bodies[body_names.index(BASE_BODY)].mass += float(added_mass)
            gym.set_actor_rigid_body_properties(env, actor, bodies, True)
            props = dof_props.copy()
            for name in self.joint_names:
                j, k = kinds[name], dof_names.index(name)
                leg = j.kind == "leg"
                props["driveMode"][k] = gymapi.DOF_MODE_POS if leg else gymapi.DOF_MODE_VEL
                props["stiffness"][k] = j.kp * kp_s * strength if leg else 0.0
                props["damping"][k] = j.kd * kd_s * strength
                props["effort"][k] = j.torque_limit
            gym.set_actor_dof_properties(env, actor, props)
            gym.enable_actor_dof_force_sensors(env, actor)
            self.envs.append(env)
            self.actors.append(actor)
        gym.prepare_sim(self.sim)

        wrap = gymtorch.wrap_tensor
        self._root = wrap(gym.acquire_actor_root_state_tensor(self.sim))  # [N, 13]: pos, quat xyzw, lin, ang
        self._dof = wrap(gym.acquire_dof_state_tensor(self.sim)).view(num_envs, len(dof_names), 2)
        self._forces = wrap(gym.acquire_net_contact_force_tensor(self.sim)).view(num_envs, len(body_names), 3)
        self._dof_force = wrap(gym.acquire_dof_force_tensor(self.sim)).view(num_envs, len(dof_names))
        self._pos_targets = torch.zeros(num_envs, len(dof_names), device=self.device)
        self._vel_targets = torch.zeros(num_envs, len(dof_names), device=self.device)
        self._is_leg = torch.tensor([kinds[n].kind == "leg" for n in self.joint_names], device=self.device)
        self._actor_ids = torch.arange(num_envs, dtype=torch.int32, device=self.device)
        self.num_threads = 1
        self._refresh()

    def _add_ground(self, terrain: Terrain | None) -> None:
        if terrain is None:
            plane = gymapi.PlaneParams()
            plane.normal = gymapi.Vec3(0.0, 0.0, 1.0)
            plane.static_friction = plane.dynamic_friction = 1.0
            self.gym.add_ground(self.sim, plane)
            return
        vertices, triangles = terrain.trimesh()
        tm = gymapi.TriangleMeshParams()
        tm.nb_vertices, tm.nb_triangles = vertices.shape[0], triangles.shape[0]
        tm.static_friction = tm.dynamic_friction = 1.0
        self.gym.add_triangle_mesh(self.sim, vertices.flatten(), triangles.flatten(), tm)

    def _refresh(self) -> None:
        for refresh in (
            self.gym.refresh_actor_root_state_tensor,
            self.gym.refresh_dof_state_tensor,
            self.gym.refresh_net_contact_force_tensor,
            self.gym.refresh_dof_force_tensor,
        ):
            refresh(self.sim)

    def step(self, targets: torch.Tensor) -> None:
        targets = targets.to(self.device)
        self._pos_targets[:, self._dof_ids] = torch.where(self._is_leg, targets, 0.0)
        self._vel_targets[:, self._dof_ids] = torch.where(self._is_leg, 0.0, targets)
        self.gym.set_dof_position_target_tensor(self.sim, gymtorch.unwrap_tensor(self._pos_targets))
        self.gym.set_dof_velocity_target_tensor(self.sim, gymtorch.unwrap_tensor(self._vel_targets))
        self.step_physics_only()

    def step_physics_only(self) -> None:
        for _ in range(self.decimation):
            self.gym.simulate(self.sim)
            if self.device.type == "cpu":
                self.gym.fetch_results(self.sim, True)
        self._refresh()

    def state(self) -> SimState:
        root = self._root
        quat = root[:, [6, 3, 4, 5]]  # xyzw -> wxyz
        forces = self._forces[:, self._contact_body_ids].norm(dim=-1)
        healthy = torch.isfinite(root).all(-1) & torch.isfinite(self._dof).flatten(1).all(-1)
        return SimState(
            base_pos=root[:, 0:3].clone(),
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, root[:, 7:10]),
            base_ang_vel=quat_rotate_inverse(quat, root[:, 10:13]),
            joint_pos=self._dof[:, self._dof_ids, 0],
            joint_vel=self._dof[:, self._dof_ids, 1],
            joint_torque=self._dof_force[:, self._dof_ids],
            contacts=(forces > CONTACT_FORCE_THRESHOLD).float(),
            healthy=healthy,
            foot_contacts=(self._forces[:, self._foot_body_ids].norm(dim=-1) > CONTACT_FORCE_THRESHOLD).float(),
        )

    def reset(self, env_ids, base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel) -> None:
        if env_ids.numel() == 0:
            return
        ids = env_ids.to(self.device).long()
        quat = base_quat.to(self.device)
        self._root[ids, 0:3] = base_pos.to(self.device)
        self._root[ids, 3:7] = quat[:, [1, 2, 3, 0]]
        self._root[ids, 7:10] = quat_rotate(quat, base_lin_vel.to(self.device))
        self._root[ids, 10:13] = quat_rotate(quat, base_ang_vel.to(self.device))
        dof = self._dof[ids]
        dof[:, self._dof_ids, 0] = joint_pos.to(self.device)
        dof[:, self._dof_ids, 1] = joint_vel.to(self.device)
        self._dof[ids] = dof
        self._write_states(ids)

    def push(self, env_ids: torch.Tensor, delta_lin_vel_xy: torch.Tensor) -> None:
        ids = env_ids.to(self.device).long()
        self._root[ids, 7:9] += delta_lin_vel_xy.to(self.device)
        self._write_states(ids, dofs=False)

    def _write_states(self, ids: torch.Tensor, dofs: bool = True) -> None:
        actor_ids = self._actor_ids[ids]
        handle = gymtorch.unwrap_tensor(actor_ids)
        self.gym.set_actor_root_state_tensor_indexed(self.sim, gymtorch.unwrap_tensor(self._root), handle, len(ids))
        if dofs:
            self.gym.set_dof_state_tensor_indexed(self.sim, gymtorch.unwrap_tensor(self._dof), handle, len(ids))

    def physics_params(self) -> torch.Tensor:
        assert self.params.shape[1] == len(PARAM_NAMES)
        return torch.as_tensor(self.params, dtype=torch.float32, device=self.device)

    def sim_stats(self) -> dict[str, float]:
        """Nothing is counted here: gymapi does not report PhysX's contact-buffer overflows or
        solver convergence per environment."""
        return {}

    def close(self) -> None:
        if getattr(self, "sim", None) is not None:
            self.gym.destroy_sim(self.sim)
            self.sim = None


def _sampler(terrain: Terrain | None) -> HeightSampler:
    """Height lookup over the terrain's heights, in the layout MuJoCo's field would have."""
    if terrain is None:
        return HeightSampler.plane(0.0)
    lo, hi = float(terrain.heights.min()), float(terrain.heights.max())
    span = max(hi - lo, 1e-3)
    data = torch.as_tensor(((terrain.heights - lo) / span).T.copy(), dtype=torch.float32)
    return HeightSampler(data, terrain.x0, terrain.y0, terrain.scale, span, lo)
