"""C MuJoCo backend: one MjData per environment, stepped by a thread pool.

``mj_step`` releases the GIL, so the pool's threads step their share of the environments in
parallel. After the physics steps of a policy step each worker copies its environments' qpos,
qvel and sensordata (contact counts and actuator torques, see ``scene.py``) into shared numpy
arrays; turning those into the batched :class:`SimState` is then a handful of vectorised ops,
whatever the number of environments. Nothing in the MDP loops over environments in Python.

Physics randomisation (friction, base mass, PD gains, motor strength) changes model
parameters, which C MuJoCo keeps in the MjModel: the backend keeps ``num_variants`` randomised
copies of the model and gives each environment a random one when it is reset.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import mujoco
import numpy as np
import torch

from training.mdp.math import quat_rotate, quat_rotate_inverse
from training.sim.backends.base import PhysicsRandomization, SimState
from training.sim.backends.scene import Scene, apply_params, nominal_params, sample_params

# Beyond this (rad/s or m/s) a state is a numerical blow-up, not motion (MuJoCo flags 1e10).
MAX_SPEED = 1.0e4

# Per-env health counters of the physics steps of one step() (see sim_stats), columns of _stats.
_ITERS, _NCON, _NCON_MAX, _NEFC_MAX, _LIMIT, _HFIELD, _CONTACT_FULL, _CONSTRAINT_FULL = range(8)
# C MuJoCo's buffer warnings, counted per MjData since its last reset.
_WARNINGS = (mujoco.mjtWarning.mjWARN_CONTACTFULL, mujoco.mjtWarning.mjWARN_CNSTRFULL)


def default_num_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class MujocoBackend:
    def __init__(
        self,
        scene: Scene,
        num_envs: int,
        decimation: int,
        num_threads: int | None = None,
        randomization: PhysicsRandomization | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs: must be at least 1, got {num_envs}")
        self.scene = scene
        self.model = scene.model
        self.num_envs = num_envs
        self.decimation = int(decimation)
        self.physics_dt = float(self.model.opt.timestep)
        self.device = torch.device(device)
        info = scene.info
        self.joint_names = info.joint_names
        self.contact_names = scene.contact_names
        self.standing_height = info.standing_height
        self.terminal_contacts = torch.as_tensor(scene.terminal_contacts, device=self.device)
        self._rng = np.random.default_rng(seed)

        # Physics variants: index 0 is the nominal model.
        self.randomization = randomization or PhysicsRandomization()
        nominal = nominal_params(scene)
        self.models = [self.model]
        self.variant_params = nominal[None, :].copy()
        if self.randomization.enabled:
            count = max(1, min(self.randomization.num_variants, num_envs))
            params = sample_params(self.randomization, count, self._rng, nominal)
            self.models, self.variant_params = [], params
            for p in params:
                m = copy.copy(self.model)
                apply_params(m, scene, p)
                mujoco.mj_setConst(m, mujoco.MjData(m))  # mass changes move derived constants
                self.models.append(m)
        self.env_variant = np.zeros(num_envs, dtype=np.int64)
        if self.randomization.enabled:
            self.env_variant[:] = self._rng.integers(0, len(self.models), num_envs)
        self.env_models = [self.models[v] for v in self.env_variant]

        self.datas = [mujoco.MjData(self.env_models[i]) for i in range(num_envs)]
        m = self.model
        self._qpos = np.zeros((num_envs, m.nq))
        self._qvel = np.zeros((num_envs, m.nv))
        self._sensors = np.zeros((num_envs, m.nsensordata))
        self._time = np.zeros(num_envs)
        self._expected_time = np.zeros(num_envs)
        self._ctrl = np.zeros((num_envs, m.nu))
        # One tuple per env, rewritten by its worker every step (cheaper than numpy row writes).
        self._stats: list[tuple[int, ...]] = [(0,) * 8] * num_envs
        # Views bound once (a fresh attribute lookup costs ~1 us, these ~0.1 us). solver_niter is
        # per island; the robot is one kinematic tree, so it is island 0.
        self._niter = [d.solver_niter for d in self.datas]
        self._warning_stats = [[d.warning[int(w)] for w in _WARNINGS] for d in self.datas]
        self._warned = [(0, 0)] * num_envs  # each env's warning counts after its last step
        self._iteration_limit = int(m.opt.iterations)
        # A geom meets a height field in at most mjMAXCONPAIR prisms; C MuJoCo stops there
        # silently. Only possible with a height field and at least that many contacts.
        floor = scene.floor_geom_id
        self._hfield_id = floor if m.geom_type[floor] == mujoco.mjtGeom.mjGEOM_HFIELD else -1
        key = info.default_key_id
        for i, d in enumerate(self.datas):
            mujoco.mj_resetDataKeyframe(self.env_models[i], d, key)
            mujoco.mj_forward(self.env_models[i], d)
            self._gather_one(i)
        self._ctrl[:] = self.model.key_ctrl[key]

        # Index maps from the raw buffers to the state's fields (torch, for vectorised gathers).
        self._act_ids = info.actuator_ids
        self._qpos_adr = torch.as_tensor(info.qpos_adr)
        self._qvel_adr = torch.as_tensor(info.qvel_adr)
        self._contact_adr = torch.as_tensor(scene.contact_sensor_adr)
        self._foot_adr = torch.as_tensor(scene.foot_sensor_adr)
        self._torque_adr = torch.as_tensor(scene.torque_sensor_adr)
        self._base_q = info.base_qpos_adr
        self._base_v = info.base_qvel_adr

        self.num_threads = max(1, min(num_threads or default_num_threads(), num_envs))
        bounds = np.linspace(0, num_envs, self.num_threads + 1).round().astype(int)
        self._chunks = [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]
        self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="mujoco") if self.num_threads > 1 else None
        self._state: SimState | None = None

    # ---- stepping -------------------------------------------------------------------------

    def _gather_one(self, i: int) -> None:
        d = self.datas[i]
        self._qpos[i] = d.qpos
        self._qvel[i] = d.qvel
        self._sensors[i] = d.sensordata
        self._time[i] = d.time

    def _work(self, lo: int, hi: int, gather: bool) -> None:
        datas, models, ctrl, n = self.datas, self.env_models, self._ctrl, self.decimation
        qpos, qvel, sensors, times = self._qpos, self._qvel, self._sensors, self._time
        stats, warned, warning_stats = self._stats, self._warned, self._warning_stats
        limit, hfield = self._iteration_limit, self._hfield_id
        for i in range(lo, hi):
            d, m, niter = datas[i], models[i], self._niter[i]
            d.ctrl[:] = ctrl[i]
            # One physics step at a time, to read each step's solver iterations and contacts
            # (mj_step(m, d, n) keeps only the last). Cost measured on one thread: +4.5 us per
            # policy step on ~75 us of one standing robot's physics (best of 15); within noise
            # for 64 standing robots (151.4 against 151.5 us per env step, best of 30).
            iters = ncon = ncon_max = nefc_max = at_limit = capped = 0
            for _ in range(n):
                mujoco.mj_step(m, d)
                k, c, e = int(niter[0]), d.ncon, d.nefc
                iters += k
                ncon += c
                if c > ncon_max:
                    ncon_max = c
                    # A geom meets the height field in mjMAXCONPAIR prisms only among as many contacts.
                    if hfield >= 0 and c >= mujoco.mjMAXCONPAIR and not capped:
                        capped = _hfield_pair_capped(d, c, hfield)
                if e > nefc_max:
                    nefc_max = e
                if k >= limit:  # counted also when it converged exactly at the last allowed iteration
                    at_limit = 1
            ws = warning_stats[i]
            full = ws[0].number, ws[1].number
            before = warned[i]
            warned[i] = full
            stats[i] = (iters, ncon, ncon_max, nefc_max, at_limit, capped, full[0] > before[0], full[1] > before[1])
            if gather:
                qpos[i] = d.qpos
                qvel[i] = d.qvel
                sensors[i] = d.sensordata
                times[i] = d.time

    def _run(self, gather: bool) -> None:
        if self._pool is None:
            self._work(0, self.num_envs, gather)
            return
        futures = [self._pool.submit(self._work, lo, hi, gather) for lo, hi in self._chunks]
        for f in futures:
            f.result()

    def step(self, targets: torch.Tensor) -> None:
        """Targets [N, J] in joint order (= actuator order); PD runs inside MuJoCo."""
        self._ctrl[:, self._act_ids] = targets.detach().to("cpu", torch.float64).numpy()
        self._run(gather=True)
        self._expected_time += self.decimation * self.physics_dt
        self._state = None

    def step_physics_only(self, targets: torch.Tensor | np.ndarray | None = None) -> None:
        """Step with the given (or the current) controls and no state gathering: the benchmark's
        baseline, the same pool doing only the physics."""
        if targets is not None:
            self._ctrl[:, self._act_ids] = np.asarray(targets, dtype=np.float64)
        self._run(gather=False)
        self._expected_time += self.decimation * self.physics_dt
        self._state = None

    # ---- simulator health ---------------------------------------------------------------------

    def sim_stats(self) -> dict[str, float]:
        """Counters of the last step (keys: ``base.SIM_STATS``; C MuJoCo has no CCD or EPA
        buffers to overflow, and reports no line-search limit)."""
        s = np.array(self._stats, dtype=np.int64)
        stats = {
            "overflow_contacts": float(s[:, _CONTACT_FULL].mean()),
            "overflow_constraints": float(s[:, _CONSTRAINT_FULL].mean()),
            "overflow_hfield": float(s[:, _HFIELD].mean()),
        }
        stats["solver_iteration_limit"] = float(s[:, _LIMIT].mean())
        stats["solver_iterations"] = float(s[:, _ITERS].mean()) / self.decimation
        stats["contacts_per_world"] = float(s[:, _NCON].mean()) / self.decimation
        stats["contacts_max"] = float(s[:, _NCON_MAX].max())
        stats["constraint_rows_max"] = float(s[:, _NEFC_MAX].max())
        return stats

    # ---- state ----------------------------------------------------------------------------

    def state(self) -> SimState:
        if self._state is None:
            self._state = self._build_state()
        return self._state

    def _build_state(self) -> SimState:
        qpos = torch.from_numpy(self._qpos).float()
        qvel = torch.from_numpy(self._qvel).float()
        sensors = torch.from_numpy(self._sensors).float()
        b, v = self._base_q, self._base_v
        quat = qpos[:, b + 3 : b + 7]
        lin_w = qvel[:, v : v + 3]
        # Free joint: linear velocity in the world frame, angular velocity in the body frame.
        healthy = torch.from_numpy(
            (np.abs(self._time - self._expected_time) < 0.5 * self.physics_dt)
            & (np.abs(self._qvel).max(axis=1) < MAX_SPEED)  # NaN compares False: unhealthy too
            & np.isfinite(self._qpos).all(axis=1)
        )
        state = SimState(
            base_pos=qpos[:, b : b + 3],
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, lin_w),
            base_ang_vel=qvel[:, v + 3 : v + 6],
            joint_pos=qpos.index_select(1, self._qpos_adr),
            joint_vel=qvel.index_select(1, self._qvel_adr),
            joint_torque=sensors.index_select(1, self._torque_adr),
            contacts=sensors.index_select(1, self._contact_adr),
            healthy=healthy,
            foot_contacts=sensors.index_select(1, self._foot_adr),
        )
        if self.device.type != "cpu":
            state = SimState(**{k: t.to(self.device) for k, t in vars(state).items()})
        return state

    # ---- resets and pushes ------------------------------------------------------------------

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
        ids = env_ids.detach().cpu().numpy()
        if ids.size == 0:
            return
        if self.randomization.enabled:
            variants = self._rng.integers(0, len(self.models), ids.size)
            self.env_variant[ids] = variants
            for i, v in zip(ids, variants, strict=True):
                self.env_models[i] = self.models[v]
        quat = base_quat.detach().cpu().double()
        lin_w = quat_rotate(quat, base_lin_vel.detach().cpu().double()).numpy()
        pos, quat = base_pos.detach().cpu().double().numpy(), quat.numpy()
        ang = base_ang_vel.detach().cpu().double().numpy()
        jp, jv = joint_pos.detach().cpu().double().numpy(), joint_vel.detach().cpu().double().numpy()
        info, b, v = self.scene.info, self._base_q, self._base_v
        key = info.default_key_id
        for k, i in enumerate(ids):
            m, d = self.env_models[i], self.datas[i]
            mujoco.mj_resetDataKeyframe(m, d, key)
            d.qpos[b : b + 3] = pos[k]
            d.qpos[b + 3 : b + 7] = quat[k]
            d.qpos[info.qpos_adr] = jp[k]
            d.qvel[v : v + 3] = lin_w[k]
            d.qvel[v + 3 : v + 6] = ang[k]
            d.qvel[info.qvel_adr] = jv[k]
            mujoco.mj_forward(m, d)
            self._gather_one(i)
        for i in ids:
            self._warned[i] = (0, 0)  # mj_resetData zeroes the warning counts
        self._expected_time[ids] = 0.0
        self._state = None

    def push(self, env_ids: torch.Tensor, delta_lin_vel_xy: torch.Tensor) -> None:
        ids = env_ids.detach().cpu().numpy()
        dv = delta_lin_vel_xy.detach().cpu().double().numpy()
        v = self._base_v
        for k, i in enumerate(ids):
            self.datas[i].qvel[v : v + 2] += dv[k]
            self._qvel[i, v : v + 2] = self.datas[i].qvel[v : v + 2]
        self._state = None

    def last_targets(self) -> np.ndarray:
        """The joint targets of the last step [N, J] (a copy)."""
        return self._ctrl[:, self._act_ids].copy()

    def save_states(self) -> np.ndarray:
        """Every env's full integration state (the benchmark replays physics from it)."""
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        out = np.zeros((self.num_envs, mujoco.mj_stateSize(self.model, spec)))
        for i, d in enumerate(self.datas):
            mujoco.mj_getState(self.env_models[i], d, out[i], spec)
        return out

    def load_states(self, states: np.ndarray, expected_time: np.ndarray | None = None) -> None:
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        for i, d in enumerate(self.datas):
            mujoco.mj_setState(self.env_models[i], d, states[i], spec)
            mujoco.mj_forward(self.env_models[i], d)
            self._gather_one(i)
        if expected_time is not None:
            self._expected_time[:] = expected_time
        self._state = None

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue these simulations bit for bit in another process built
        with the same scene, number of environments and seed: each env's integration state and
        physics variant, the state read after the last step (sensors are computed inside a step,
        so they are kept, not recomputed), the time bookkeeping and the variant generator."""
        return {
            "integration": torch.from_numpy(self.save_states()),
            "qpos": torch.from_numpy(self._qpos.copy()),
            "qvel": torch.from_numpy(self._qvel.copy()),
            "sensors": torch.from_numpy(self._sensors.copy()),
            "time": torch.from_numpy(self._time.copy()),
            "expected_time": torch.from_numpy(self._expected_time.copy()),
            "ctrl": torch.from_numpy(self._ctrl.copy()),
            "env_variant": torch.from_numpy(self.env_variant.copy()),
            "variant_params": torch.from_numpy(self.variant_params.copy()),
            "rng": json.dumps(self._rng.bit_generator.state),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`'s output; refuses one from another scene, size or seed."""
        integration = np.asarray(state["integration"], dtype=np.float64)
        size = mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_INTEGRATION)
        if integration.shape != (self.num_envs, size):
            raise ValueError(
                f"simulation state: {tuple(integration.shape)} integration states, this backend has "
                f"{(self.num_envs, size)}"
            )
        params = np.asarray(state["variant_params"])
        if params.shape != self.variant_params.shape or not np.array_equal(params, self.variant_params):
            raise ValueError("simulation state: its physics variants differ from this backend's (another seed?)")
        self.env_variant[:] = np.asarray(state["env_variant"])
        self.env_models = [self.models[v] for v in self.env_variant]
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        for i, d in enumerate(self.datas):
            mujoco.mj_setState(self.env_models[i], d, integration[i], spec)
        for name in ("qpos", "qvel", "sensors", "time", "expected_time", "ctrl"):
            getattr(self, f"_{name}")[:] = np.asarray(state[name])
        self._warned = [(ws[0].number, ws[1].number) for ws in self._warning_stats]
        self._rng.bit_generator.state = json.loads(state["rng"])
        self._state = None

    def physics_params(self) -> torch.Tensor:
        return torch.as_tensor(self.variant_params[self.env_variant], dtype=torch.float32, device=self.device)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()


def _hfield_pair_capped(d: mujoco.MjData, ncon: int, hfield: int) -> bool:
    """Whether some geom has mjMAXCONPAIR contacts with the height field ``hfield`` (C MuJoCo's
    cap per geom pair: the prisms beyond it are not tested)."""
    geoms = d.contact.geom[:ncon]
    other = np.where(geoms[:, 0] == hfield, geoms[:, 1], np.where(geoms[:, 1] == hfield, geoms[:, 0], -1))
    counts = np.bincount(other[other >= 0])
    return bool(counts.size) and int(counts.max()) >= mujoco.mjMAXCONPAIR
