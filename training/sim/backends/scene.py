"""The simulated scene shared by the MuJoCo backends: robot model, terrain, sensors, solver.

Built on :func:`training.sim.model.build_spec`; this module adds what the environment reads
every policy step as MuJoCo sensors, so one copy of ``sensordata`` per env carries it:

- a contact sensor (data "found": number of contacts) on every robot geom other than the wheels
  or feet, so undesired contacts, self-collision included, are counted by MuJoCo itself;
- the same sensor on each leg's wheel or foot (ground contact per leg, for air-time rewards);
- an actuator-force sensor per actuator (the torque after the actuator's force limit).

Solver settings (why these): pyramidal friction cones, impratio 1, Newton, 20 iterations and 20
line-search iterations, the model's defaults (``training.sim.model._set_options``), whose
near-rigid ground impedance keeps loaded contacts from creeping without elliptic cones. Measured
on this model (one thread, standing then rolling at 5 rad/s): 28k physics steps/s with Newton
converging in 1.03 iterations on average; elliptic cones with impratio 100 ran at 131 steps/s and
blew up within 0.5 s against the stiff floor; capping both iteration counts at 4 ran at 45k
steps/s but changed the trajectory (line searches cut short), so the caps stay at 20: they cost
time only on the rare steps that need them. MuJoCo's auto-reset on instability is off, so the
environment sees (and counts) every blow-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from aow_policy.robot import Robot, load_robot
from training.sim.model import BASE_BODY, DC_KD, DC_KP, FLOOR, LegActuator, ModelInfo, build_spec, model_info
from training.sim.terrain import Terrain

CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}
CONTACT_FOUND = 1  # contact sensor data spec bit: number of matching contacts


@dataclass
class SolverConfig:
    cone: str = "pyramidal"
    impratio: float = 1.0
    iterations: int = 20
    ls_iterations: int = 20

    def validate(self) -> None:
        if self.cone not in CONES:
            raise ValueError(f"sim.solver.cone: expected one of {sorted(CONES)}, got {self.cone!r}")
        if not self.impratio >= 1.0:
            raise ValueError(f"sim.solver.impratio: must be >= 1, got {self.impratio}")
        if self.iterations < 1 or self.ls_iterations < 1:
            raise ValueError("sim.solver: iterations and ls_iterations must be at least 1")


@dataclass
class Scene:
    model: mujoco.MjModel
    info: ModelInfo
    terrain: Terrain | None
    contact_names: tuple[str, ...]  # watched geoms (not wheels or feet), columns of SimState.contacts
    terminal_contacts: np.ndarray  # [C] bool: geoms on the base or a thigh
    contact_sensor_adr: np.ndarray  # [C] index into sensordata
    foot_names: tuple[str, ...]  # each leg's wheel or foot geom, in the model's leg order
    foot_sensor_adr: np.ndarray  # [L] index into sensordata: contacts of each wheel / foot
    torque_sensor_adr: np.ndarray  # [J] index into sensordata, per joint in info.joint_names order
    floor_geom_id: int


def build_scene(
    wheeled: bool = True,
    terrain: Terrain | None = None,
    solver: SolverConfig | None = None,
    robot: Robot | None = None,
    leg_actuator: LegActuator | None = None,
) -> Scene:
    robot = robot if robot is not None else load_robot()
    solver = solver or SolverConfig()
    solver.validate()
    spec = build_spec(wheeled=wheeled, robot=robot, leg_actuator=leg_actuator)
    if terrain is not None:
        terrain.add_to_spec(spec)
    opt = spec.option
    opt.cone = CONES[solver.cone]
    opt.impratio = solver.impratio
    opt.iterations = solver.iterations
    opt.ls_iterations = solver.ls_iterations
    # No silent auto-reset on a blow-up: the bad state reaches the environment, which flags it,
    # counts it and resets that robot itself (an auto-reset robot would just reappear elsewhere).
    opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET

    plain = spec.compile()  # to resolve names before adding sensors
    info0 = model_info(plain, robot)
    base_id = info0.base_body_id
    terminal_bodies = {base_id, *info0.thigh_body_ids.tolist()}
    names, terminal = [], []
    for gid in info0.undesired_contact_geom_ids:
        name = mujoco.mj_id2name(plain, mujoco.mjtObj.mjOBJ_GEOM, int(gid))
        if not name:
            raise ValueError(f"robot geom {gid} has no name; contact sensors need named geoms")
        names.append(name)
        terminal.append(int(plain.geom_bodyid[gid]) in terminal_bodies)
        _add_contact_sensor(spec, f"contact:{name}", name)
    feet = [mujoco.mj_id2name(plain, mujoco.mjtObj.mjOBJ_GEOM, int(g)) for g in info0.contact_geom_ids]
    for name in feet:
        _add_contact_sensor(spec, f"foot:{name}", name)
    for joint in info0.joint_names:
        spec.add_sensor(
            name=f"torque:{joint}",
            type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
            objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
            objname=joint,
        )
    model = spec.compile()
    info = model_info(model, robot)

    def adr(sensor: str) -> int:
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, sensor)
        return int(model.sensor_adr[sid])

    return Scene(
        model=model,
        info=info,
        terrain=terrain,
        contact_names=tuple(names),
        terminal_contacts=np.array(terminal, dtype=bool),
        contact_sensor_adr=np.array([adr(f"contact:{n}") for n in names], dtype=np.int64),
        foot_names=tuple(feet),
        foot_sensor_adr=np.array([adr(f"foot:{n}") for n in feet], dtype=np.int64),
        torque_sensor_adr=np.array([adr(f"torque:{j}") for j in info.joint_names], dtype=np.int64),
        floor_geom_id=int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, FLOOR)),
    )


def _add_contact_sensor(spec: mujoco.MjSpec, sensor: str, geom: str) -> None:
    """A contact sensor on ``geom`` whose data is its number of contacts (with anything)."""
    spec.add_sensor(
        name=sensor,
        type=mujoco.mjtSensor.mjSENS_CONTACT,
        objtype=mujoco.mjtObj.mjOBJ_GEOM,
        objname=geom,
        intprm=[CONTACT_FOUND, 0, 1],
    )


def base_body(scene: Scene) -> int:
    return int(mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, BASE_BODY))


# ---- physics variants (friction, mass, gains) -------------------------------------------------

PARAM_NAMES = ("friction", "added_base_mass", "kp_scale", "kd_scale", "motor_strength")


def nominal_params(scene: Scene) -> np.ndarray:
    return np.array([scene.model.geom_friction[scene.floor_geom_id, 0], 0.0, 1.0, 1.0, 1.0])


def scaled_gains(
    base_gain: Any, base_bias: Any, is_dc: Any, kp_scale: Any, kd_scale: Any, strength: Any, where: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """The actuator parameters :func:`apply_params` writes, from the nominal ones: (gainprm[:, 0],
    gainprm[:, DC_KP], gainprm[:, DC_KD], biasprm[:, 1], biasprm[:, 2]). Works on numpy arrays (one
    parameter set, ``where`` = ``np.where``) and on torch tensors (a parameter set per world as
    [N, 1] columns, ``where`` = ``torch.where``), so the C MuJoCo and MuJoCo Warp backends scale
    alike. ``base_gain``/``base_bias``: [nu, 10]; ``is_dc``: [nu] bool.

    A position actuator is force = gain*ctrl + bias1*q + bias2*qdot with gain = kp, bias1 = -kp,
    bias2 = -kd; a velocity actuator has gain = kd, bias2 = -kd; strength scales the whole force, as
    legged_gym scales its PD torques. A DC-motor leg keeps its servo's kp and kd in gainprm[DC_KP]
    and [DC_KD]: strength scales the PD torque there, and its other parameters (the drive's
    torque-speed line) stay the drive's."""
    is_position = base_bias[:, 1] != 0.0
    stiffness = where(is_position, kp_scale, kd_scale)
    return (
        where(is_dc, base_gain[:, 0], base_gain[:, 0] * stiffness * strength),
        where(is_dc, base_gain[:, DC_KP] * kp_scale * strength, base_gain[:, DC_KP]),
        where(is_dc, base_gain[:, DC_KD] * kd_scale * strength, base_gain[:, DC_KD]),
        where(is_dc, base_bias[:, 1], base_bias[:, 1] * kp_scale * strength),
        where(is_dc, base_bias[:, 2], base_bias[:, 2] * kd_scale * strength),
    )


def apply_params(model: mujoco.MjModel, scene: Scene, params: np.ndarray) -> None:
    """Write one set of physics parameters into ``model`` (a copy of the scene's model).

    Friction: the floor has the higher geom priority, so its friction is the contact's. Base mass:
    the nominal plus the added mass. Gains: :func:`scaled_gains`.
    """
    base = scene.model
    friction, added_mass, kp_scale, kd_scale, strength = (float(p) for p in params)
    model.geom_friction[scene.floor_geom_id, 0] = friction
    bid = scene.info.base_body_id
    model.body_mass[bid] = base.body_mass[bid] + added_mass
    ids = scene.info.actuator_ids
    is_dc = base.actuator_gaintype[ids] == mujoco.mjtGain.mjGAIN_DCMOTOR
    nominal_gain, nominal_bias = base.actuator_gainprm[ids], base.actuator_biasprm[ids]
    gains = scaled_gains(nominal_gain, nominal_bias, is_dc, kp_scale, kd_scale, strength, np.where)
    (
        model.actuator_gainprm[ids, 0],
        model.actuator_gainprm[ids, DC_KP],
        model.actuator_gainprm[ids, DC_KD],
        model.actuator_biasprm[ids, 1],
        model.actuator_biasprm[ids, 2],
    ) = gains


def sample_params(rand, n: int, rng: np.random.Generator, nominal: np.ndarray) -> np.ndarray:
    """[n, 5] parameter sets drawn uniformly in the configured ranges (nominal where off)."""
    out = np.tile(nominal, (n, 1))
    for k, name in enumerate(PARAM_NAMES):
        rng_range = getattr(rand, name)
        if rng_range is not None:
            out[:, k] = rng.uniform(rng_range[0], rng_range[1], size=n)
    return out
