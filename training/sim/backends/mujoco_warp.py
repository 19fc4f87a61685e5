"""MuJoCo Warp backend: the same scene (model, sensors, solver) batched over worlds on one device.

Every environment is a world of one ``mujoco_warp`` Data; state fields are warp arrays that
``wp.to_torch`` exposes as torch tensors without copies, so the gather is a few indexing ops on
the device. On a GPU the ``decimation`` physics steps of a policy step are captured once into a
CUDA graph and replayed. On CPU (warp's LLVM backend) it runs, slowly, and the first use
compiles warp's kernels (minutes; warp caches them on disk afterwards).

Physics randomisation uses per-world model fields (``put_model(batch_sizes=...)``): floor
friction, base mass and actuator gains are drawn per world at every reset. Unlike the C
backend, derived constants are not recomputed after a base-mass change (``set_const``); mass
enters the dynamics directly, only constraint-impedance scaling keeps the nominal mass.
"""

from __future__ import annotations

import copy
import functools
import warnings

import mujoco
import numpy as np
import torch

from training.mdp.math import quat_rotate, quat_rotate_inverse
from training.sim.backends.base import PhysicsRandomization, SimState
from training.sim.backends.mujoco_cpu import MAX_SPEED
from training.sim.backends.scene import Scene, nominal_params, sample_params, scaled_gains
from training.sim.model import DC_KD, DC_KP

BATCHED_FIELDS = ("geom_friction", "body_mass", "actuator_gainprm", "actuator_biasprm")

# Columns of the per-world accumulator the stats kernels fill during the physics steps of a step().
_ACC_FLAGS, _ACC_ITERS, _ACC_NCON, _ACC_NCON_MAX, _ACC_NEFC_MAX = range(5)
# Our own flag in the accumulator's overflow column, above MuJoCo Warp's OverflowType bits: a
# height-field contact pointing into the terrain deeper than _INTO_TERRAIN_DEPTH (see
# _contact_filter_kernel).
_INTO_TERRAIN = 1 << 24
# A height-field contact whose normal (from the terrain to the robot geom) has z below this
# cannot be right: the prism columns MuJoCo collides reach 1 m below the lowest terrain point, so
# no geom leaves one through its bottom; tops give upward normals, side walls horizontal ones.
_INTO_TERRAIN_NZ = -0.5
# Deeper than this, such a contact is a collision error, counted (contacts_into_terrain); the
# shallower ones seen (0.1-1.5 mm, the normal of a contact at ~zero depth taken from witness
# points that float32 cannot tell apart ~36 m from the origin) are dropped as well, uncounted.
_INTO_TERRAIN_DEPTH = 0.005


def _overflow_keys(mjw) -> dict[str, int]:
    """``sim_stats`` keys of MuJoCo Warp's per-world overflow bits (``d.overflow``, OverflowType)."""
    t = mjw.OverflowType
    keys = {
        "overflow_contacts": t.BROADPHASE | t.NARROWPHASE,
        "overflow_constraints": t.NEFC | t.NJMAX_NNZ,
        "overflow_hfield": t.HFIELD,
        "overflow_ccd": t.CCD,
        "overflow_epa_horizon": t.EPA_HORIZON,
        "solver_iteration_limit": t.ITERATIONS,
        "linesearch_iteration_limit": t.LS_ITERATIONS,
    }
    named = functools.reduce(lambda a, b: a | b, keys.values())
    keys["overflow_other"] = t.ALL & ~named
    keys["contacts_into_terrain"] = _INTO_TERRAIN
    return {k: int(v) for k, v in keys.items()}


@functools.cache
def _contact_filter_kernel():
    """A kernel for MuJoCo Warp's ``contactfilter`` callback (run after the narrow phase, before
    the constraints are built): height-field contacts whose normal points into the terrain lose
    their constraint (and contact-sensor) flag, and their world is flagged if one was deeper than
    _INTO_TERRAIN_DEPTH. With ``warp_fixes.fix_height_field_witness`` applied the deep ones left
    are on capsules (the shanks), 1.4-15 cm deep where C MuJoCo reports no contact at all: 6 in
    12,800 world physics steps of the flat policy on rough terrain (wheels: none left; before the
    fix, 46 on wheels). Dropping one matches C MuJoCo; applying it would push the leg into the
    ground with a spring as deep as the error."""
    import warp as wp

    @wp.kernel(module="unique", enable_backward=False)
    def drop_into_terrain(
        nacon: wp.array(dtype=int),
        worldid: wp.array(dtype=int),
        geom: wp.array(dtype=wp.vec2i),
        frame: wp.array(dtype=wp.mat33),
        dist: wp.array(dtype=float),
        is_hfield: wp.array(dtype=int),
        contact_type: wp.array(dtype=int),
        flags: wp.array(dtype=int),
    ):
        i = wp.tid()
        if i >= nacon[0]:
            return
        g = geom[i]
        nz = frame[i][0, 2]  # the normal (frame row 0) points from geom 0 to geom 1
        if (is_hfield[g[0]] != 0 and nz < _INTO_TERRAIN_NZ) or (is_hfield[g[1]] != 0 and nz > -_INTO_TERRAIN_NZ):
            contact_type[i] = contact_type[i] & ~1  # ContactType.CONSTRAINT
            if dist[i] < -_INTO_TERRAIN_DEPTH:
                wp.atomic_or(flags, worldid[i], _INTO_TERRAIN)

    return drop_into_terrain


@functools.cache
def _stats_kernels():
    """Two warp kernels launched after every physics step (inside the CUDA graph on a GPU), so
    the counters cost two small launches per physics step and no host synchronisation; the host
    reads the [nworld, 5] accumulator once per policy step (``sim_stats``).

    ``count_contacts`` (one thread per contact slot) counts this physics step's contacts per
    world (those the solver uses); ``fold`` (one thread per world) folds them, the overflow bits,
    the contact filter's flags and the solver's iteration count into the accumulator (``first``:
    the first physics step of a policy step starts it afresh) and clears the overflow bits, which
    MuJoCo Warp only ever sets (its ``d.overflow`` is sticky until ``reset_data``), so each step
    reports its own overflows.
    """
    import warp as wp

    @wp.kernel(module="unique", enable_backward=False)
    def count_contacts(
        nacon: wp.array(dtype=int),
        worldid: wp.array(dtype=int),
        contact_type: wp.array(dtype=int),
        ncon: wp.array(dtype=int),
    ):
        i = wp.tid()
        if i < nacon[0] and (contact_type[i] & 1) != 0:
            wp.atomic_add(ncon, worldid[i], 1)

    @wp.kernel(module="unique", enable_backward=False)
    def fold(
        first: int,
        overflow: wp.array(dtype=int),
        niter: wp.array(dtype=int),
        nefc: wp.array(dtype=int),
        ncon: wp.array(dtype=int),
        flags: wp.array(dtype=int),
        acc: wp.array2d(dtype=int),
    ):
        w = wp.tid()
        c = ncon[w]
        bits = overflow[w] | flags[w]
        if first != 0:
            acc[w, 0] = bits
            acc[w, 1] = niter[w]
            acc[w, 2] = c
            acc[w, 3] = c
            acc[w, 4] = nefc[w]
        else:
            acc[w, 0] = acc[w, 0] | bits
            acc[w, 1] = acc[w, 1] + niter[w]
            acc[w, 2] = acc[w, 2] + c
            acc[w, 3] = wp.max(acc[w, 3], c)
            acc[w, 4] = wp.max(acc[w, 4], nefc[w])
        overflow[w] = 0
        flags[w] = 0
        ncon[w] = 0

    return count_contacts, fold


class MujocoWarpBackend:
    def __init__(
        self,
        scene: Scene,
        num_envs: int,
        decimation: int,
        randomization: PhysicsRandomization | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        nconmax: int | None = None,
        njmax: int | None = None,
    ):
        import mujoco_warp as mjw
        import warp as wp

        wp.config.quiet = True
        wp.init()
        from training.sim.backends.warp_fixes import fix_height_field_witness

        self.height_field_fix = fix_height_field_witness()  # before any kernel is built
        self._wp, self._mjw = wp, mjw
        self.scene = scene
        self.num_envs = num_envs
        self.decimation = int(decimation)
        self.device = torch.device(device)
        self.physics_dt = float(scene.model.opt.timestep)
        info = scene.info
        self.joint_names = info.joint_names
        self.contact_names = scene.contact_names
        self.standing_height = info.standing_height
        self.terminal_contacts = torch.as_tensor(scene.terminal_contacts, device=self.device)
        self.num_threads = 1
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        self.randomization = randomization or PhysicsRandomization()
        self._rng = np.random.default_rng(seed)

        model = copy.copy(scene.model)
        # Warp's line search needs more iterations than C MuJoCo's to reach its tolerance here
        # (it warns at 20); more only costs time where the search has not converged.
        model.opt.ls_iterations = max(model.opt.ls_iterations, 50)
        # opt.iterations stays the model's 20. Measured on aow_rough: C MuJoCo (float64) and
        # MuJoCo Warp (float32) need the same Newton iterations here (4.7 and 4.6 per physics
        # step on average driving the flat policy, with the same tail): stiff near-rigid contacts
        # changing their active set, not float32. Per 10,000 world policy steps C MuJoCo reaches
        # 20 in 0.3 (policy) to 0.9 (random actions; it also counts converging at the 20th),
        # MuJoCo Warp in none of 128,000 (policy, random) and 0.8 with violent random actions.
        # Raising it would lengthen every GPU step in which one of 16k worlds is in that tail, for
        # states whose replays converged in 9-14 iterations; the
        # rate is counted instead (sim_stats "solver_iteration_limit").
        # Warp never auto-resets (and refuses the flag that turns C MuJoCo's auto-reset off).
        model.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
        data = mujoco.MjData(model)
        mujoco.mj_resetDataKeyframe(model, data, info.default_key_id)
        mujoco.mj_forward(model, data)
        batch = {name: num_envs for name in BATCHED_FIELDS} if self.randomization.enabled else None
        with wp.ScopedDevice(self._wp_device):
            self.m = mjw.put_model(model, batch_sizes=batch)
            # Contact and constraint budgets (None: MuJoCo Warp's choice for the model, 128 contacts
            # and 1024 constraint rows per world with the height field, 48 and 64 on the plane).
            # Contacts are pooled over the worlds, rows are per world. Measured on aow_rough: the
            # broad phase pairs every robot geom with the ground in every world and step (the
            # height field's bounds cover the terrain), 28 candidate pairs per world that share the
            # contact buffer; contacts per world 3.7 on average (flat policy), at most 55 (fallen
            # robots); rows at most 225 (4 per pyramidal contact); a collapsed robot could reach
            # 28 x 4 = 112 contacts and 460 rows. No contact or row overflow was counted in 1.6
            # million world physics steps; a budget below the 28 candidates overflows in every
            # world (tests/test_sim_fidelity.py plants one).
            self.d = mjw.put_data(model, data, nworld=num_envs, nconmax=nconmax, njmax=njmax)
            # Overflows are counted per world (sim_stats) instead of printed by the kernels: at
            # 16k worlds a one-in-10^5 event printed several lines a second. A compile-time
            # switch of the kernels, so it is set before the first step builds them.
            self.m.opt.warn_overflow = 0
            self._step_ncon = wp.zeros(num_envs, dtype=int)
            self._step_flags = wp.zeros(num_envs, dtype=int)
            is_hfield = model.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD
            if is_hfield.any():
                self._geom_is_hfield = wp.array(is_hfield.astype(np.int32), dtype=int)
                self.m.callback.contactfilter = self._drop_contacts_into_terrain
            self._acc = wp.zeros((num_envs, 5), dtype=int)
        self._acc_t = t_acc = wp.to_torch(self._acc)
        self._overflow_keys = _overflow_keys(mjw)
        self._overflow_bits = torch.tensor(list(self._overflow_keys.values()), dtype=t_acc.dtype, device=self.device)
        self._reported: set[str] = set()
        t = wp.to_torch
        self._qpos, self._qvel, self._ctrl = t(self.d.qpos), t(self.d.qvel), t(self.d.ctrl)
        self._sensors, self._time = t(self.d.sensordata), t(self.d.time)
        self._key_qpos = torch.as_tensor(model.key_qpos[info.default_key_id], dtype=torch.float32, device=self.device)
        self._key_ctrl = torch.as_tensor(model.key_ctrl[info.default_key_id], dtype=torch.float32, device=self.device)
        self._act_ids = torch.as_tensor(info.actuator_ids, device=self.device)
        self._qpos_adr = torch.as_tensor(info.qpos_adr, device=self.device)
        self._qvel_adr = torch.as_tensor(info.qvel_adr, device=self.device)
        self._contact_adr = torch.as_tensor(scene.contact_sensor_adr, device=self.device)
        self._foot_adr = torch.as_tensor(scene.foot_sensor_adr, device=self.device)
        self._torque_adr = torch.as_tensor(scene.torque_sensor_adr, device=self.device)
        self._base_q, self._base_v = info.base_qpos_adr, info.base_qvel_adr
        self._expected_time = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        self._nominal = nominal_params(scene)
        # The nominal actuator parameters the variants scale, read once (every reset randomizes).
        self._base_gain = torch.as_tensor(scene.model.actuator_gainprm, dtype=torch.float32, device=self.device)
        self._base_bias = torch.as_tensor(scene.model.actuator_biasprm, dtype=torch.float32, device=self.device)
        is_dc = scene.model.actuator_gaintype == mujoco.mjtGain.mjGAIN_DCMOTOR
        self._is_dc = torch.as_tensor(is_dc, device=self.device)
        self.params = np.tile(self._nominal, (num_envs, 1))
        if self.randomization.enabled:
            self._randomize(np.arange(num_envs))
        self._graph = None
        self._eager_steps = 0
        self._state: SimState | None = None

    # ---- stepping -------------------------------------------------------------------------

    def _physics(self) -> None:
        wp = self._wp
        with wp.ScopedDevice(self._wp_device):
            if self._graph is not None:
                wp.capture_launch(self._graph)
            elif self._wp_device != "cpu" and self._eager_steps > 0:
                # Kernels are compiled by now (first step ran eagerly): record the decimation
                # loop once, then replay it; a capture records launches without running them.
                with wp.ScopedCapture() as capture:
                    self._launch_steps()
                self._graph = capture.graph
                wp.capture_launch(self._graph)
            else:
                self._launch_steps()
                self._eager_steps += 1

    def _launch_steps(self) -> None:
        """The physics steps of one policy step, each followed by the stats kernels."""
        wp, mjw, d = self._wp, self._mjw, self.d
        count_contacts, fold = _stats_kernels()
        for k in range(self.decimation):
            mjw.step(self.m, d)
            wp.launch(
                count_contacts, dim=d.naconmax, inputs=[d.nacon, d.contact.worldid, d.contact.type, self._step_ncon]
            )
            wp.launch(
                fold,
                dim=self.num_envs,
                inputs=[
                    int(k == 0),
                    d.overflow,
                    d.solver_niter,
                    d.nefc,
                    self._step_ncon,
                    self._step_flags,
                    self._acc,
                ],
            )

    def _drop_contacts_into_terrain(self, m, d) -> None:
        """MuJoCo Warp's contactfilter callback (see _contact_filter_kernel)."""
        c = d.contact
        self._wp.launch(
            _contact_filter_kernel(),
            dim=d.naconmax,
            inputs=[d.nacon, c.worldid, c.geom, c.frame, c.dist, self._geom_is_hfield, c.type, self._step_flags],
        )

    def step(self, targets: torch.Tensor) -> None:
        self._ctrl[:, self._act_ids] = targets.to(self.device, torch.float32)
        self._physics()
        self._expected_time += self.decimation * self.physics_dt
        self._state = None

    def step_physics_only(self) -> None:
        self._physics()
        self._expected_time += self.decimation * self.physics_dt
        self._state = None

    # ---- state ----------------------------------------------------------------------------

    def state(self) -> SimState:
        if self._state is None:
            qpos, qvel, sensors = self._qpos, self._qvel, self._sensors
            b, v = self._base_q, self._base_v
            quat = qpos[:, b + 3 : b + 7]
            healthy = (
                ((self._time.double() - self._expected_time).abs() < 0.5 * self.physics_dt)
                & (qvel.abs().amax(dim=1) < MAX_SPEED)  # NaN compares False: unhealthy too
                & torch.isfinite(qpos).all(dim=1)
            )
            self._state = SimState(
                base_pos=qpos[:, b : b + 3].clone(),
                base_quat=quat.clone(),
                base_lin_vel=quat_rotate_inverse(quat, qvel[:, v : v + 3]),
                base_ang_vel=qvel[:, v + 3 : v + 6].clone(),
                joint_pos=qpos.index_select(1, self._qpos_adr),
                joint_vel=qvel.index_select(1, self._qvel_adr),
                joint_torque=sensors.index_select(1, self._torque_adr),
                contacts=sensors.index_select(1, self._contact_adr),
                healthy=healthy,
                foot_contacts=sensors.index_select(1, self._foot_adr),
            )
        return self._state

    # ---- resets, pushes, randomisation ------------------------------------------------------

    def reset(
        self,
        env_ids: torch.Tensor,
        base_pos: torch.Tensor,
        base_quat: torch.Tensor,
        base_lin_vel: torch.Tensor,
        base_ang_vel: torch.Tensor,
        joint_pos: torch.Tensor,
        joint_vel: torch.Tensor,
    ) -> None:
        if env_ids.numel() == 0:
            return
        wp, mjw = self._wp, self._mjw
        ids = env_ids.to(self.device)
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[ids] = True
        if self.randomization.enabled:
            self._randomize(ids.cpu().numpy())
        with wp.ScopedDevice(self._wp_device):
            mjw.reset_data(self.m, self.d, reset=wp.from_torch(mask))
        f32 = dict(device=self.device, dtype=torch.float32)
        n = ids.numel()
        qpos = self._key_qpos.expand(n, -1).clone()
        b, v = self._base_q, self._base_v
        qpos[:, b : b + 3] = base_pos.to(**f32)
        qpos[:, b + 3 : b + 7] = base_quat.to(**f32)
        qpos[:, self._qpos_adr] = joint_pos.to(**f32)
        qvel = torch.zeros(n, self._qvel.shape[1], **f32)
        qvel[:, v : v + 3] = quat_rotate(base_quat.to(**f32), base_lin_vel.to(**f32))
        qvel[:, v + 3 : v + 6] = base_ang_vel.to(**f32)
        qvel[:, self._qvel_adr] = joint_vel.to(**f32)
        self._qpos[ids] = qpos
        self._qvel[ids] = qvel
        self._ctrl[ids] = self._key_ctrl
        self._time[ids] = 0.0
        self._expected_time[ids] = 0.0
        with wp.ScopedDevice(self._wp_device):
            mjw.forward(self.m, self.d)  # derived quantities and sensors of the new states
        self._state = None

    def push(self, env_ids: torch.Tensor, delta_lin_vel_xy: torch.Tensor) -> None:
        v = self._base_v
        ids = env_ids.to(self.device)
        self._qvel[ids, v : v + 2] += delta_lin_vel_xy.to(self.device, torch.float32)
        self._state = None

    def _randomize(self, ids: np.ndarray) -> None:
        """New physics parameters for worlds ``ids`` (the per-world model fields)."""
        scene, t = self.scene, self._wp.to_torch
        params = sample_params(self.randomization, ids.size, self._rng, self._nominal)
        self.params[ids] = params
        p = torch.as_tensor(params, dtype=torch.float32, device=self.device)
        idx = torch.as_tensor(ids, device=self.device)
        friction = t(self.m.geom_friction)  # [N, ngeom, 3]
        friction[idx, scene.floor_geom_id, 0] = p[:, 0]
        mass = t(self.m.body_mass)
        mass[idx, scene.info.base_body_id] = float(scene.model.body_mass[scene.info.base_body_id]) + p[:, 1]
        gain, bias = t(self.m.actuator_gainprm), t(self.m.actuator_biasprm)
        base_gain, base_bias, is_dc = self._base_gain, self._base_bias, self._is_dc
        # One parameter set per world as [N, 1] columns against [nu] actuators: as scene.apply_params.
        kp, kd, strength = p[:, 2:3], p[:, 3:4], p[:, 4:5]
        g0, g_kp, g_kd, b1, b2 = scaled_gains(base_gain, base_bias, is_dc, kp, kd, strength, torch.where)
        gain[idx, :, 0], gain[idx, :, DC_KP], gain[idx, :, DC_KD] = g0, g_kp, g_kd
        bias[idx, :, 1], bias[idx, :, 2] = b1, b2

    def physics_params(self) -> torch.Tensor:
        return torch.as_tensor(self.params, dtype=torch.float32, device=self.device)

    # ---- simulator health ---------------------------------------------------------------------

    def sim_stats(self) -> dict[str, float]:
        """Counters of the last step (keys: ``base.SIM_STATS``), reduced on the device and read
        with one transfer: the only host synchronisation they add is this, once per policy step."""
        acc = self._acc_t
        flags = acc[:, _ACC_FLAGS]
        shares = ((flags[:, None] & self._overflow_bits) != 0).float().mean(0)
        per_step = acc[:, [_ACC_ITERS, _ACC_NCON]].float().mean(0) / self.decimation
        peaks = acc[:, [_ACC_NCON_MAX, _ACC_NEFC_MAX]].amax(0).float()
        values = torch.cat([shares, per_step, peaks]).tolist()
        keys = [*self._overflow_keys, "solver_iterations", "contacts_per_world", "contacts_max", "constraint_rows_max"]
        stats = dict(zip(keys, values, strict=True))
        for key in self._overflow_keys:
            if stats[key] > 0.0 and key not in self._reported:
                # Once per run and kind, so the console says it happens; the rate is in the logs.
                self._reported.add(key)
                warnings.warn(
                    f"MuJoCo Warp: {key} in {stats[key]:.3%} of the worlds of this step; counted in "
                    f"sim_stats (logged as sim/{key}) and not reported again",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return stats

    def close(self) -> None:
        self._graph = None
