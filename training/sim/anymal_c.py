"""Physical properties of ANYmal C (and of the AoW's wheels) as a table of frozen dataclasses.

Numbers, not code, taken from two public BSD-3 descriptions of the robot:

- MuJoCo Menagerie, ``anybotics_anymal_c/anymal_c.xml`` (google-deepmind/mujoco_menagerie): lumped link
  masses, centres of mass and inertias, collision primitives.
- ANYbotics ``anymal_c_simple_description`` (``urdf/anymal.urdf``): joint frames and axes, the per-part
  collision primitives the Menagerie model was made from.

Convention used throughout (ANYbotics'): the base frame has x forward, y left, z up; at zero joint angles
every link frame is parallel to the base frame, every HAA axis is +x and every HFE and KFE axis is +y.
Menagerie stores its links in rotated frames; the inertias below are those of Menagerie re-expressed in
this base-aligned frame (rotate the principal inertia by the body and inertial orientations,
I = R diag(I) Rᵀ), with products of inertia kept.

Only the left-front (LF) leg is tabulated. The other legs are its mirror images (``mirrored``): right
legs mirror y, hind legs mirror x. Menagerie's four legs agree with that to within 0.2 mm in centre of
mass and 2e-4 kg·m² in products of inertia (ANYmal C uses one thigh part on all four legs, so its small
products of inertia do not mirror exactly); mirroring keeps the model exactly symmetric.

Joint names, limits, gains and rates are NOT here: they belong to the robot contract
(``aow_policy.robot.load_robot``).
"""

from __future__ import annotations

from dataclasses import dataclass

Vec3 = tuple[float, float, float]
# Full inertia about the centre of mass in the link's base-aligned frame: (Ixx, Iyy, Izz, Ixy, Ixz, Iyz).
Inertia6 = tuple[float, float, float, float, float, float]


@dataclass(frozen=True)
class Inertial:
    mass: float  # kg
    com: Vec3  # m, in the link frame
    inertia: Inertia6  # kg·m², about the centre of mass


@dataclass(frozen=True)
class Cylinder:
    """A cylinder or capsule between two points of its link frame (MuJoCo ``fromto``)."""

    radius: float
    start: Vec3
    end: Vec3


@dataclass(frozen=True)
class Box:
    half_size: Vec3
    center: Vec3


@dataclass(frozen=True)
class Base:
    inertial: Inertial
    trunk: Box  # main body and both faces merged into one box
    trunk_sides: tuple[Cylinder, Cylinder]  # the rounded long edges, left then right
    lidar_cage: Cylinder


@dataclass(frozen=True)
class Leg:
    """The LF leg; ``mirrored`` gives the others. Offsets are joint-to-joint in base-aligned frames."""

    haa_position: Vec3  # HAA joint in the base frame
    hfe_offset: Vec3  # HFE joint relative to HAA
    kfe_offset: Vec3  # KFE joint relative to HFE
    foot_offset: Vec3  # foot-sphere centre relative to KFE
    haa_axis: Vec3
    hfe_axis: Vec3
    kfe_axis: Vec3
    hip: Inertial  # moved by HAA (hip housing and the HFE drive)
    thigh: Inertial  # moved by HFE (thigh and the KFE drive)
    shank: Inertial  # moved by KFE (shank, foot adapter and foot)
    hfe_drive: Cylinder  # on the hip
    thigh_link: Cylinder  # capsule on the thigh
    kfe_drive: Cylinder  # on the thigh
    shank_link: Cylinder  # capsule: knee flange to the foot adapter
    shank_tube: Cylinder  # capsule: the foot adapter down to the foot centre
    foot_radius: float


@dataclass(frozen=True)
class Wheel:
    """The AoW's wheel replacing each foot (a design choice of this project, not an ANYbotics number).

    The wheel's centre sits at the former foot-sphere centre, moved outward along the axle by
    ``lateral_offset`` so the tyre clears the foot adapter tube, as on ANYmal on wheels where the hub
    motor is mounted on the outside of the shank. The robot therefore stands about one wheel radius
    minus one foot radius taller than plain ANYmal C in the same joint pose.
    """

    radius: float  # m
    half_width: float  # m
    mass: float  # kg, tyre, rim and hub motor
    lateral_offset: float  # m, outward from the foot centre along the axle

    @property
    def inertia(self) -> Inertia6:
        """Solid-disc inertia about the centre, axle along y."""
        axial = 0.5 * self.mass * self.radius**2
        transverse = self.mass * (3.0 * self.radius**2 + (2.0 * self.half_width) ** 2) / 12.0
        return (transverse, axial, transverse, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class JointDynamics:
    """Passive joint properties; the PD and velocity loops themselves are the contract's gains.

    Armature stands for the drive's reflected rotor inertia; damping for the gearbox's viscous loss.
    Neither is published for ANYmal C, so these are small plausible values.
    """

    leg_armature: float  # kg·m²
    leg_damping: float  # N·m·s/rad
    wheel_armature: float
    wheel_damping: float


BASE = Base(
    inertial=Inertial(
        mass=19.2035, com=(0.0025, 0.0, 0.0502071), inertia=(0.217374, 0.639559, 0.624031, 0.0, 0.0, 0.0)
    ),
    # URDF: centre box 0.58 x 0.14 x 0.18 m, faces 0.11 m deep at +-0.4145 m; merged, spanning +-0.5245 m.
    trunk=Box(half_size=(0.5245, 0.07, 0.09), center=(0.0, 0.0, 0.0)),
    trunk_sides=(
        Cylinder(radius=0.09, start=(-0.5245, 0.07, 0.0), end=(0.5245, 0.07, 0.0)),
        Cylinder(radius=0.09, start=(-0.5245, -0.07, 0.0), end=(0.5245, -0.07, 0.0)),
    ),
    lidar_cage=Cylinder(radius=0.07, start=(-0.364, 0.0, 0.0735), end=(-0.364, 0.0, 0.1935)),
)

LF_LEG = Leg(
    haa_position=(0.2999, 0.104, 0.0),
    hfe_offset=(0.0599, 0.08381, 0.0),
    kfe_offset=(0.0, 0.1003, -0.285),
    foot_offset=(0.08795, 0.01305, -0.31547),
    haa_axis=(1.0, 0.0, 0.0),
    hfe_axis=(0.0, 1.0, 0.0),
    kfe_axis=(0.0, 1.0, 0.0),
    hip=Inertial(
        mass=2.781,
        com=(0.0566606, 0.0173939, -0.0004609),
        inertia=(0.00329552, 0.00493830, 0.00583295, -0.00004453, -0.00009791, 0.00013581),
    ),
    thigh=Inertial(
        mass=3.071,
        com=(-0.0000465, 0.0308149, -0.245696),
        inertia=(0.02990406, 0.02956380, 0.00486109, -0.00004430, -0.00009445, 0.00414246),
    ),
    shank=Inertial(
        mass=0.58842,
        com=(0.0612528, 0.0054621, -0.0806598),
        inertia=(0.00881038, 0.01016118, 0.00154978, 0.00005357, 0.00181936, -0.00002265),
    ),
    # Hip frame: the HFE drive housing sits inboard of the HFE joint, its axis along y.
    hfe_drive=Cylinder(radius=0.05, start=(0.0599, -0.05619, 0.0), end=(0.0599, 0.08381, 0.0)),
    # Thigh frame: URDF box 0.075 x 0.06 x 0.283 m as a capsule; KFE drive housing at the knee.
    thigh_link=Cylinder(radius=0.04, start=(0.0, 0.03, 0.0), end=(0.0, 0.03, -0.285)),
    kfe_drive=Cylinder(radius=0.05, start=(0.0, -0.0397, -0.285), end=(0.0, 0.1003, -0.285)),
    # Shank frame: the short plate from the knee forward to the adapter, then the adapter tube.
    shank_link=Cylinder(radius=0.034, start=(0.0, 0.02, 0.0), end=(0.08795, 0.02, 0.0)),
    shank_tube=Cylinder(radius=0.0175, start=(0.08795, 0.01305, 0.0), end=(0.08795, 0.01305, -0.31547)),
    foot_radius=0.03,
)

WHEEL = Wheel(radius=0.1, half_width=0.025, mass=1.0, lateral_offset=0.045)
WHEEL_AXIS: Vec3 = (0.0, 1.0, 0.0)  # every wheel turns about +y: equal speeds roll the robot straight

JOINT_DYNAMICS = JointDynamics(leg_armature=0.01, leg_damping=0.1, wheel_armature=0.002, wheel_damping=0.01)

# Leg name prefixes and their sides: (+1 front / -1 hind, +1 left / -1 right).
LEG_SIDES: dict[str, tuple[int, int]] = {"LF": (1, 1), "RF": (1, -1), "LH": (-1, 1), "RH": (-1, -1)}


def mirror_vec(v: Vec3, sx: int, sy: int) -> Vec3:
    return (sx * v[0], sy * v[1], v[2])


def mirror_inertia(i: Inertia6, sx: int, sy: int) -> Inertia6:
    """Reflecting x (sx=-1) flips Ixy and Ixz; reflecting y (sy=-1) flips Ixy and Iyz."""
    ixx, iyy, izz, ixy, ixz, iyz = i
    return (ixx, iyy, izz, sx * sy * ixy, sx * ixz, sy * iyz)


def _mirror_inertial(i: Inertial, sx: int, sy: int) -> Inertial:
    return Inertial(i.mass, mirror_vec(i.com, sx, sy), mirror_inertia(i.inertia, sx, sy))


def _mirror_cylinder(c: Cylinder, sx: int, sy: int) -> Cylinder:
    return Cylinder(c.radius, mirror_vec(c.start, sx, sy), mirror_vec(c.end, sx, sy))


def mirrored(leg: Leg, prefix: str) -> Leg:
    """The leg named ``prefix`` (LF, RF, LH, RH) as a mirror image of the tabulated LF leg.

    Axes are not mirrored: ANYbotics defines every HAA about +x and every HFE/KFE about +y, so equal joint
    angles mean the same motion on both sides (the contract's default pose relies on this).
    """
    if prefix not in LEG_SIDES:
        raise KeyError(f"unknown leg {prefix!r}; expected one of {sorted(LEG_SIDES)}")
    sx, sy = LEG_SIDES[prefix]
    return Leg(
        haa_position=mirror_vec(leg.haa_position, sx, sy),
        hfe_offset=mirror_vec(leg.hfe_offset, sx, sy),
        kfe_offset=mirror_vec(leg.kfe_offset, sx, sy),
        foot_offset=mirror_vec(leg.foot_offset, sx, sy),
        haa_axis=leg.haa_axis,
        hfe_axis=leg.hfe_axis,
        kfe_axis=leg.kfe_axis,
        hip=_mirror_inertial(leg.hip, sx, sy),
        thigh=_mirror_inertial(leg.thigh, sx, sy),
        shank=_mirror_inertial(leg.shank, sx, sy),
        hfe_drive=_mirror_cylinder(leg.hfe_drive, sx, sy),
        thigh_link=_mirror_cylinder(leg.thigh_link, sx, sy),
        kfe_drive=_mirror_cylinder(leg.kfe_drive, sx, sy),
        shank_link=_mirror_cylinder(leg.shank_link, sx, sy),
        shank_tube=_mirror_cylinder(leg.shank_tube, sx, sy),
        foot_radius=leg.foot_radius,
    )


def total_mass(wheeled: bool) -> float:
    """Mass of the robot described by this table (kg)."""
    leg = LF_LEG.hip.mass + LF_LEG.thigh.mass + LF_LEG.shank.mass + (WHEEL.mass if wheeled else 0.0)
    return BASE.inertial.mass + 4.0 * leg
