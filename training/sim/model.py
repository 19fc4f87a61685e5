"""The MuJoCo model of the wheeled-legged ANYmal C (AoW), built with MjSpec from the robot contract.

Physical properties come from ``training.sim.anymal_c``; joint names, limits, PD gains, torque limits and
the physics step come from the robot contract (``aow_policy.robot.load_robot``), so nothing is stated twice.
``build_model(wheeled=False)`` builds plain ANYmal C with point feet (12 joints) for the legged comparison.

Conventions the rest of the toolkit relies on:

- World and base frames: x forward, y left, z up. LF is at (+x, +y).
- Bodies ``base``, ``{leg}_HIP``, ``{leg}_THIGH``, ``{leg}_SHANK`` and, wheeled, ``{leg}_WHEEL``; the ground
  contact geom of each leg is named ``{leg}_WHEEL`` (wheeled) or ``{leg}_FOOT`` (plain).
- Joints and actuators carry the contract's joint names, actuators in contract order (legs, then wheels).
  Legs: position actuators, force = kp (target - q) - kd q̇, clipped to ±torque_limit (``LegActuator``
  "pd", legged_gym's model), or the same PD law through a DC motor's torque-speed line ("dc_motor", see
  ``LegActuator``). Wheels: velocity actuators, force = kd (target - q̇), clipped to ±torque_limit, target
  clipped to ±velocity_limit.
- Wheel hinges turn about +y, so a positive wheel speed rolls the robot forward (+x): the contact point
  of a wheel turning at ω about +y moves at ω × (0, 0, -r) = (-ωr, 0, 0) relative to the axle, so with no
  slip the axle moves at +ωr.
- Keyframe ``default``: the contract's default joint positions with the wheels (feet) just touching flat
  ground at z = 0.
- Collision geometry is primitives only. The floor is a plane named ``floor``; ``add_heightfield``
  swaps it for a heightfield of the same name. Other terrain code calls ``remove_floor`` and gives its
  own ground geom ``configure_ground_contact`` (the floor's friction, stiffness and priority).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from aow_policy.robot import Joint, Robot, load_robot
from training.sim import anymal_c
from training.sim.anymal_c import Cylinder, Inertial, Leg

FLOOR = "floor"
LEG_ACTUATOR_MODELS = ("pd", "dc_motor")
DC_KP, DC_KD = 4, 6  # where MuJoCo's dcmotor keeps its position servo's gains in gainprm
# ANYdrive 3's stall torque in Isaac Lab's DC-motor model of ANYmal C's legs (ANYDRIVE_3_SIMPLE_ACTUATOR_CFG:
# saturation_effort 120 N·m with effort_limit 80 N·m and velocity_limit 7.5 rad/s, the contract's two).
ANYDRIVE_SATURATION_TORQUE = 120.0
BASE_BODY = "base"
DEFAULT_KEY = "default"
WHEEL_ROLE = "WHEEL"

# The floor's contact parameters govern every ground contact: with a higher geom priority MuJoCo takes
# the pair's friction, solref and solimp from the floor alone, so an environment randomises friction by
# editing one geom.
FLOOR_FRICTION = (1.0, 0.005, 0.0001)
ROBOT_FRICTION = (1.0, 0.005, 0.0001)
# Near-rigid ground (impedance 0.99 -> 0.999 within 1 mm). MuJoCo's soft friction lets a loaded contact
# creep at a speed proportional to (1 - impedance): with the default 0.9 -> 0.95 the feet of the plain
# robot standing at kp 80 slid apart ~1 cm/s at a friction use of only 0.43 and the robot sank 5 cm in
# 4 s. With these values it holds within 1 cm and penetration stays at a few mm.
FLOOR_SOLIMP = (0.99, 0.999, 0.001, 0.5, 2.0)
# Contact time constant in physics steps: 2 is the stiffest MuJoCo integrates stably.
FLOOR_SOLREF_STEPS = 2.0

_GREY = (0.55, 0.55, 0.55, 1.0)
_DARK = (0.15, 0.15, 0.15, 1.0)
_RED = (0.7, 0.15, 0.1, 1.0)


def _set_inertial(body: mujoco.MjsBody, inertial: Inertial) -> None:
    body.explicitinertial = True
    body.mass = inertial.mass
    body.ipos = list(inertial.com)
    body.fullinertia = list(inertial.inertia)


def _add_fromto(
    body: mujoco.MjsBody, name: str, kind: mujoco.mjtGeom, c: Cylinder, rgba: tuple[float, ...]
) -> mujoco.MjsGeom:
    return body.add_geom(
        name=name, type=kind, fromto=[*c.start, *c.end], size=[c.radius, 0, 0], rgba=list(rgba), friction=ROBOT_FRICTION
    )


def _leg_prefixes(robot: Robot) -> tuple[str, ...]:
    """Leg prefixes (LF, RF, ...) in the order the contract lists the legs' joints."""
    prefixes: list[str] = []
    for name in robot.leg_joint_names:
        prefix = name.split("_", 1)[0]
        if prefix not in prefixes:
            prefixes.append(prefix)
    return tuple(prefixes)


def _add_joint(
    body: mujoco.MjsBody, joint: Joint, axis: tuple[float, float, float], armature: float, damping: float
) -> mujoco.MjsJoint:
    j = body.add_joint(name=joint.name, type=mujoco.mjtJoint.mjJNT_HINGE, axis=list(axis))
    j.armature = armature
    j.damping = [damping, 0.0, 0.0]  # linear coefficient; the others are polynomial terms
    if joint.position_limits is not None:
        j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
        j.range = list(joint.position_limits)
    else:
        j.limited = mujoco.mjtLimited.mjLIMITED_FALSE
    return j


def _add_leg(spec: mujoco.MjSpec, base: mujoco.MjsBody, prefix: str, robot: Robot, wheeled: bool) -> None:
    leg: Leg = anymal_c.mirrored(anymal_c.LF_LEG, prefix)
    dyn = anymal_c.JOINT_DYNAMICS
    cylinder, capsule = mujoco.mjtGeom.mjGEOM_CYLINDER, mujoco.mjtGeom.mjGEOM_CAPSULE

    hip = base.add_body(name=f"{prefix}_HIP", pos=list(leg.haa_position))
    _set_inertial(hip, leg.hip)
    _add_joint(hip, robot.joint(f"{prefix}_HAA"), leg.haa_axis, dyn.leg_armature, dyn.leg_damping)
    _add_fromto(hip, f"{prefix}_HFE_drive", cylinder, leg.hfe_drive, _DARK)

    thigh = hip.add_body(name=f"{prefix}_THIGH", pos=list(leg.hfe_offset))
    _set_inertial(thigh, leg.thigh)
    _add_joint(thigh, robot.joint(f"{prefix}_HFE"), leg.hfe_axis, dyn.leg_armature, dyn.leg_damping)
    _add_fromto(thigh, f"{prefix}_THIGH_link", capsule, leg.thigh_link, _GREY)
    _add_fromto(thigh, f"{prefix}_KFE_drive", cylinder, leg.kfe_drive, _DARK)

    shank = thigh.add_body(name=f"{prefix}_SHANK", pos=list(leg.kfe_offset))
    _set_inertial(shank, leg.shank)
    _add_joint(shank, robot.joint(f"{prefix}_KFE"), leg.kfe_axis, dyn.leg_armature, dyn.leg_damping)
    _add_fromto(shank, f"{prefix}_SHANK_link", capsule, leg.shank_link, _GREY)
    _add_fromto(shank, f"{prefix}_SHANK_tube", capsule, leg.shank_tube, _GREY)

    if not wheeled:
        shank.add_geom(
            name=f"{prefix}_FOOT",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            pos=list(leg.foot_offset),
            size=[leg.foot_radius, 0, 0],
            rgba=list(_DARK),
            friction=ROBOT_FRICTION,
        )
        return

    w = anymal_c.WHEEL
    sy = anymal_c.LEG_SIDES[prefix][1]
    centre = (leg.foot_offset[0], leg.foot_offset[1] + sy * w.lateral_offset, leg.foot_offset[2])
    wheel = shank.add_body(name=f"{prefix}_WHEEL", pos=list(centre))
    _set_inertial(wheel, Inertial(w.mass, (0.0, 0.0, 0.0), w.inertia))
    _add_joint(wheel, robot.joint(f"{prefix}_{WHEEL_ROLE}"), anymal_c.WHEEL_AXIS, dyn.wheel_armature, dyn.wheel_damping)
    # A cylinder's axis is its local z; rotate it onto y (90° about x).
    wheel.add_geom(
        name=f"{prefix}_WHEEL",
        type=cylinder,
        size=[w.radius, w.half_width, 0],
        quat=[np.sqrt(0.5), np.sqrt(0.5), 0.0, 0.0],
        rgba=list(_DARK),
        friction=ROBOT_FRICTION,
    )


def _add_base(spec: mujoco.MjSpec) -> mujoco.MjsBody:
    b = anymal_c.BASE
    base = spec.worldbody.add_body(name=BASE_BODY, pos=[0.0, 0.0, 1.0])
    base.add_freejoint(name="base_free")
    _set_inertial(base, b.inertial)
    base.add_geom(
        name="base_trunk",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=list(b.trunk.center),
        size=list(b.trunk.half_size),
        rgba=list(_RED),
        friction=ROBOT_FRICTION,
    )
    for side, c in zip(("left", "right"), b.trunk_sides, strict=True):
        _add_fromto(base, f"base_side_{side}", mujoco.mjtGeom.mjGEOM_CYLINDER, c, _RED)
    _add_fromto(base, "base_lidar_cage", mujoco.mjtGeom.mjGEOM_CYLINDER, b.lidar_cage, _DARK)
    return base


def _set_options(spec: mujoco.MjSpec, robot: Robot) -> None:
    opt = spec.option
    opt.timestep = robot.rates.physics_dt
    # Pyramidal cones with impratio 1 run ~4x faster than elliptic cones with impratio 100 (17k vs ~4k
    # env-steps/s measured on this robot). Elliptic cones need the high impratio to stop soft friction from
    # creeping; here the near-rigid floor impedance (FLOOR_SOLIMP) does that job instead. Newton converges
    # in 1-5 iterations on this model (standing, dropping, rolling), so the caps only bound the worst case.
    opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    opt.impratio = 1.0
    opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    opt.iterations = 20
    opt.ls_iterations = 20
    # implicitfast integrates the actuators' velocity feedback (leg kd, wheel kv) implicitly: a wheel's
    # own inertia over the wheel loop's gain is shorter than the 5 ms step, so explicit Euler would
    # oscillate when the wheel is in the air.
    opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST


def _add_floor(spec: mujoco.MjSpec) -> None:
    spec.worldbody.add_light(
        name="sun", pos=[0.0, 0.0, 4.0], dir=[0.0, 0.0, -1.0], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
    )
    floor = spec.worldbody.add_geom(
        name=FLOOR, type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 0.05], rgba=[0.4, 0.45, 0.5, 1.0]
    )
    configure_ground_contact(floor, spec.option.timestep)


def configure_ground_contact(geom: mujoco.MjsGeom, timestep: float) -> None:
    """Give a ground geom (plane or heightfield) the floor's contact parameters and priority.

    Any terrain added to a spec from ``build_spec`` must go through this, or its contacts fall back to
    MuJoCo's soft defaults and loaded wheels and feet creep.
    """
    geom.friction = list(FLOOR_FRICTION)
    geom.solimp = list(FLOOR_SOLIMP)
    geom.solref = [FLOOR_SOLREF_STEPS * timestep, 1.0]
    geom.priority = 1


def add_heightfield(
    spec: mujoco.MjSpec, heights: np.ndarray, half_extent: tuple[float, float], base_depth: float = 1.0
) -> None:
    """Replace the flat floor by a heightfield named ``floor``, centred on the world origin.

    ``heights[i, j]`` (metres, world z) is the terrain height at y = -half_y + i * 2 half_y / (nrow - 1)
    and x = -half_x + j * 2 half_x / (ncol - 1): rows run along y and columns along x (MuJoCo's layout).
    MuJoCo normalises elevation data to [0, 1], so the heights are stored normalised with the range as the
    field's vertical size and the minimum as the geom's z. ``base_depth`` is the solid slab under the
    lowest point. The keyframe's base height is for flat ground; place the robot above the terrain.
    """
    h = np.asarray(heights, dtype=np.float64)
    if h.ndim != 2 or min(h.shape) < 2:
        raise ValueError(f"heights: expected a 2-D array with at least 2 rows and 2 columns, got shape {h.shape}")
    if not np.all(np.isfinite(h)):
        raise ValueError("heights: contains NaN or infinite values")
    if len(half_extent) != 2 or min(half_extent) <= 0:
        raise ValueError(f"half_extent: expected two positive half-sizes (x, y) in metres, got {half_extent}")
    if base_depth <= 0:
        raise ValueError(f"base_depth: must be positive, got {base_depth}")
    remove_floor(spec)
    low, span = float(h.min()), float(h.max() - h.min())
    # A flat field still needs a positive vertical size; any value works because every sample is 0.
    z_size = span if span > 0 else 1e-3
    normalised = (h - low) / z_size
    spec.add_hfield(
        name=FLOOR,
        size=[float(half_extent[0]), float(half_extent[1]), z_size, float(base_depth)],
        nrow=h.shape[0],
        ncol=h.shape[1],
        userdata=normalised.ravel().tolist(),
    )
    geom = spec.worldbody.add_geom(
        name=FLOOR, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=FLOOR, pos=[0.0, 0.0, low], rgba=[0.4, 0.45, 0.5, 1.0]
    )
    configure_ground_contact(geom, spec.option.timestep)


def remove_floor(spec: mujoco.MjSpec) -> None:
    """Delete the ``floor`` geom (and its heightfield asset, if any) so other terrain can take its place."""
    floor = spec.geom(FLOOR)
    if floor is None:
        raise ValueError(f"the spec has no geom named {FLOOR!r} to remove")
    spec.delete(floor)
    if spec.hfield(FLOOR) is not None:
        spec.delete(spec.hfield(FLOOR))


def _ground_contact_geoms(model: mujoco.MjModel, prefixes: tuple[str, ...], wheeled: bool) -> list[int]:
    suffix = WHEEL_ROLE if wheeled else "FOOT"
    return [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"{p}_{suffix}") for p in prefixes]


def lowest_point(model: mujoco.MjModel, data: mujoco.MjData, geom_id: int) -> float:
    """World z of the lowest point of a sphere or cylinder geom (after forward kinematics)."""
    centre_z = data.geom_xpos[geom_id, 2]
    radius = model.geom_size[geom_id, 0]
    if model.geom_type[geom_id] == mujoco.mjtGeom.mjGEOM_SPHERE:
        return float(centre_z - radius)
    if model.geom_type[geom_id] == mujoco.mjtGeom.mjGEOM_CYLINDER:
        axis_z = data.geom_xmat[geom_id].reshape(3, 3)[2, 2]  # z component of the cylinder's axis
        half_length = model.geom_size[geom_id, 1]
        return float(centre_z - radius * np.sqrt(max(0.0, 1.0 - axis_z**2)) - half_length * abs(axis_z))
    raise ValueError(f"geom {geom_id}: lowest_point handles spheres and cylinders only")


def _default_qpos_ctrl(model: mujoco.MjModel, robot: Robot) -> tuple[np.ndarray, np.ndarray]:
    qpos = model.qpos0.copy()
    ctrl = np.zeros(model.nu)
    for joint in robot.joints:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint.name)
        if jid < 0:
            continue  # wheel joints in the plain model
        qpos[model.jnt_qposadr[jid]] = joint.default_position
        aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, joint.name)
        # Position actuators hold the default angle; velocity actuators (wheels) hold still.
        ctrl[aid] = joint.default_position if joint.kind == "leg" else 0.0
    return qpos, ctrl


def build_spec(
    wheeled: bool = True,
    robot: Robot | None = None,
    heightfield: tuple[np.ndarray, tuple[float, float]] | None = None,
    leg_actuator: LegActuator | None = None,
) -> mujoco.MjSpec:
    """The AoW (``wheeled``) or plain ANYmal C as an MjSpec, with the ``default`` keyframe.

    ``heightfield``: optional (heights, (half_x, half_y)) replacing the flat floor (see ``add_heightfield``).
    ``leg_actuator``: how the leg drives are simulated (default: PD with a torque limit).
    """
    leg_actuator = leg_actuator or LegActuator()
    robot = robot if robot is not None else load_robot()
    spec = mujoco.MjSpec()
    spec.modelname = "anymal_c_on_wheels" if wheeled else "anymal_c"
    spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    spec.compiler.degree = False  # the contract's angles are radians; MjSpec defaults to degrees
    _set_options(spec, robot)  # first: the floor's contact time constant follows the timestep
    _add_floor(spec)
    base = _add_base(spec)
    prefixes = _leg_prefixes(robot)
    for prefix in prefixes:
        _add_leg(spec, base, prefix, robot, wheeled)
        # The thigh's drive housing swings through the base's outline at large HAA angles; ANYmal's
        # descriptions do not collide them either.
        spec.add_exclude(bodyname1=BASE_BODY, bodyname2=f"{prefix}_THIGH")

    # Contract order, matched by name: actuator i drives the contract's i-th (present) joint.
    for joint in robot.joints:
        if joint.kind == "wheel" and not wheeled:
            continue
        act = spec.add_actuator(name=joint.name, target=joint.name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        if joint.kind == "leg" and leg_actuator.model == "dc_motor":
            _set_to_dc_motor(act, joint, leg_actuator.saturation_torque)
        elif joint.kind == "leg":
            act.set_to_position(kp=joint.kp, kv=joint.kd)
        else:
            act.set_to_velocity(kv=joint.kd)
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.ctrlrange = [-joint.velocity_limit, joint.velocity_limit]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-joint.torque_limit, joint.torque_limit]

    # Keyframe: compile once to learn the address layout and where the wheels reach in the default pose.
    model = spec.compile()
    qpos, ctrl = _default_qpos_ctrl(model, robot)
    qpos[0:3] = 0.0
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    lowest = min(lowest_point(model, data, g) for g in _ground_contact_geoms(model, prefixes, wheeled))
    qpos[2] = -lowest
    spec.body(BASE_BODY).pos = [0.0, 0.0, -lowest]
    spec.add_key(name=DEFAULT_KEY, qpos=qpos.tolist(), ctrl=ctrl.tolist())

    if heightfield is not None:
        add_heightfield(spec, heightfield[0], heightfield[1])
    return spec


def build_model(
    wheeled: bool = True,
    robot: Robot | None = None,
    heightfield: tuple[np.ndarray, tuple[float, float]] | None = None,
    leg_actuator: LegActuator | None = None,
) -> mujoco.MjModel:
    """Compiled model of the AoW (``wheeled``) or plain ANYmal C; actuator names equal joint names."""
    return build_spec(wheeled=wheeled, robot=robot, heightfield=heightfield, leg_actuator=leg_actuator).compile()


@dataclass(frozen=True)
class LegActuator:
    """How the simulated leg drives turn the PD law into torque.

    "pd": τ = clip(kp (q* - q) - kd q̇, ±torque_limit) at any speed, as legged_gym simulates ANYmal.
    "dc_motor": the same PD torque, but a drive only delivers it within its torque-speed line:
    τ ∈ [-S (1 + q̇/ω₀), S (1 - q̇/ω₀)], still capped at ±torque_limit, with S the stall torque
    (``saturation_torque``) and ω₀ the contract's velocity_limit (no-load speed). Isaac Lab's DCMotor
    model of ANYmal C (S 120 N·m, cap 80, ω₀ 7.5 rad/s): from 2.5 rad/s on, the torque available in the
    direction of motion falls to zero at 7.5 rad/s, so a leg cannot swing much faster than the real one.
    It is MuJoCo's own ``dcmotor`` actuator (quasi-static, a position servo as its controller, the
    voltage saturated), so C MuJoCo and MuJoCo Warp integrate it alike, its damping implicitly.
    Beyond ω₀ the line keeps going (the motor brakes), where Isaac Lab's clips the torque at zero.
    """

    model: str = "pd"
    saturation_torque: float = ANYDRIVE_SATURATION_TORQUE  # N·m, "dc_motor" only

    def __post_init__(self) -> None:
        if self.model not in LEG_ACTUATOR_MODELS:
            raise ValueError(f"leg_actuator: expected one of {LEG_ACTUATOR_MODELS}, got {self.model!r}")
        if not self.saturation_torque > 0.0:
            raise ValueError(f"leg_saturation_torque: must be positive, got {self.saturation_torque}")


def _set_to_dc_motor(act: mujoco.MjsActuator, joint: Joint, saturation_torque: float) -> None:
    """A DC motor whose quasi-static torque-speed line has stall torque S and no-load speed ω₀, driven
    by a PD position servo. MuJoCo's dcmotor: τ = (K/R)(V - K q̇) with V = (R/K) τ_pd + K q̇ clipped to
    ±Vmax; unsaturated τ = τ_pd, saturated τ = ±K Vmax/R - (K²/R) q̇. Only S = K Vmax/R and
    ω₀ = Vmax/K matter here (no inductance, no heating), so R = 1 Ω and K = √(S/ω₀)."""
    if saturation_torque < joint.torque_limit:
        raise ValueError(
            f"{joint.name}: saturation_torque {saturation_torque} is below its torque_limit {joint.torque_limit}"
        )
    motor_constant = float(np.sqrt(saturation_torque / joint.velocity_limit))
    act.set_to_dcmotor(
        motorconst=[motor_constant, motor_constant],
        resistance=1.0,
        # controller: kp, ki, kd, slew rate, integral clamp, Vmax; ctrlspec 1: the control is a position target
        controller=[joint.kp, 0.0, joint.kd, 0.0, 0.0, saturation_torque / motor_constant],
        ctrlspec=1,
    )


def servo_gains(model: mujoco.MjModel, actuator_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(is_position, kp, kd) of the given actuators as compiled: a position actuator keeps kp in gainprm[0]
    and -kd in biasprm[2]; a dcmotor leg (position servo) kp in gainprm[4] and kd in gainprm[6]; a velocity
    actuator (wheel) has no kp and its loop gain kd in gainprm[0]."""
    gain, bias = model.actuator_gainprm[actuator_ids], model.actuator_biasprm[actuator_ids]
    is_dc = model.actuator_gaintype[actuator_ids] == mujoco.mjtGain.mjGAIN_DCMOTOR
    is_position = is_dc | (bias[:, 1] != 0.0)
    kp = np.where(is_dc, gain[:, DC_KP], np.where(is_position, gain[:, 0], 0.0))
    kd = np.where(is_dc, gain[:, DC_KD], np.where(is_position, -bias[:, 2], gain[:, 0]))
    return is_position, kp, kd


@dataclass(frozen=True)
class ModelInfo:
    """Indices an environment needs, resolved by name. Per-joint arrays follow the contract's order.

    Per-leg arrays follow ``leg_names`` (the contract's leg order: LF, RF, LH, RH).
    """

    wheeled: bool
    joint_names: tuple[str, ...]  # the contract's joints present in the model, contract order
    contract_indices: np.ndarray  # their positions in the contract's per-joint arrays
    joint_ids: np.ndarray
    qpos_adr: np.ndarray
    qvel_adr: np.ndarray
    actuator_ids: np.ndarray
    base_body_id: int
    base_qpos_adr: int  # 7 entries: position, then quaternion (w, x, y, z)
    base_qvel_adr: int  # 6 entries: linear velocity (world), then angular velocity (base frame)
    floor_geom_id: int
    leg_names: tuple[str, ...]
    hip_body_ids: np.ndarray
    thigh_body_ids: np.ndarray
    shank_body_ids: np.ndarray
    contact_body_ids: np.ndarray  # wheel bodies (wheeled) or shanks (plain), one per leg
    contact_geom_ids: np.ndarray  # the allowed ground contacts: wheels or feet, one per leg
    base_geom_ids: np.ndarray  # touching the ground with these ends an episode
    undesired_contact_geom_ids: np.ndarray  # every robot geom except wheels/feet (base included)
    default_key_id: int
    standing_height: float  # base z of the default keyframe on flat ground (m)

    @property
    def leg_joint_mask(self) -> np.ndarray:
        return np.array([not n.endswith(f"_{WHEEL_ROLE}") for n in self.joint_names])


def _ids(model: mujoco.MjModel, kind: mujoco.mjtObj, names: list[str]) -> np.ndarray:
    ids = [mujoco.mj_name2id(model, kind, n) for n in names]
    missing = [n for n, i in zip(names, ids, strict=True) if i < 0]
    if missing:
        raise KeyError(f"model has no {kind.name} named {missing}")
    return np.array(ids, dtype=np.int64)


def model_info(model: mujoco.MjModel, robot: Robot | None = None, floor_geom: str = FLOOR) -> ModelInfo:
    """Resolve the contract's joints, actuators, bodies and contact geoms in ``model`` by name.

    ``floor_geom``: the name of the ground geom, if terrain replaced ``floor`` under another name.
    """
    robot = robot if robot is not None else load_robot()
    wheeled = all(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) >= 0 for n in robot.wheel_joint_names)
    names = list(robot.joint_names if wheeled else robot.leg_joint_names)
    joint_ids = _ids(model, mujoco.mjtObj.mjOBJ_JOINT, names)
    actuator_ids = _ids(model, mujoco.mjtObj.mjOBJ_ACTUATOR, names)
    if not np.array_equal(model.actuator_trnid[actuator_ids, 0], joint_ids):
        raise ValueError("an actuator does not drive the joint of the same name")
    prefixes = _leg_prefixes(robot)
    body = mujoco.mjtObj.mjOBJ_BODY
    base_id = int(_ids(model, body, [BASE_BODY])[0])
    free = int(model.body_jntadr[base_id])
    contact_geoms = np.array(_ground_contact_geoms(model, prefixes, wheeled), dtype=np.int64)
    robot_geoms = np.flatnonzero(model.geom_bodyid != 0)
    key_id = int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, DEFAULT_KEY))
    return ModelInfo(
        wheeled=wheeled,
        joint_names=tuple(names),
        contract_indices=robot.index_of(names),
        joint_ids=joint_ids,
        qpos_adr=model.jnt_qposadr[joint_ids].astype(np.int64),
        qvel_adr=model.jnt_dofadr[joint_ids].astype(np.int64),
        actuator_ids=actuator_ids,
        base_body_id=base_id,
        base_qpos_adr=int(model.jnt_qposadr[free]),
        base_qvel_adr=int(model.jnt_dofadr[free]),
        floor_geom_id=int(_ids(model, mujoco.mjtObj.mjOBJ_GEOM, [floor_geom])[0]),
        leg_names=prefixes,
        hip_body_ids=_ids(model, body, [f"{p}_HIP" for p in prefixes]),
        thigh_body_ids=_ids(model, body, [f"{p}_THIGH" for p in prefixes]),
        shank_body_ids=_ids(model, body, [f"{p}_SHANK" for p in prefixes]),
        contact_body_ids=model.geom_bodyid[contact_geoms].astype(np.int64),
        contact_geom_ids=contact_geoms,
        base_geom_ids=np.flatnonzero(model.geom_bodyid == base_id).astype(np.int64),
        undesired_contact_geom_ids=np.setdiff1d(robot_geoms, contact_geoms).astype(np.int64),
        default_key_id=key_id,
        standing_height=float(model.key_qpos[key_id, 2]) if key_id >= 0 else float("nan"),
    )
