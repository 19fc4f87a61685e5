"""What every simulator backend provides: batched state as torch tensors, stepping, resetting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

BACKENDS = ("mujoco", "mujoco_warp", "isaacgym")

# Simulator health of one step() (its ``decimation`` physics steps), as returned by
# ``SimBackend.sim_stats``; the environment passes them on as ``infos["sim_stats"]`` and the
# runner logs them per iteration as ``sim/<key>``. A backend returns the keys it can measure.
# Shares count a world once per step() if any of its physics steps had the event.
SIM_STATS = {
    "contacts_per_world": "contacts per world, mean over worlds and physics steps",
    "contacts_max": "most contacts in one world at one physics step",
    "constraint_rows_max": "most constraint rows (nefc) in one world at one physics step",
    "solver_iterations": "constraint solver iterations per world and physics step, mean",
    "solver_iteration_limit": "share of worlds where the solver stopped at opt.iterations unconverged",
    "linesearch_iteration_limit": "share of worlds where a line search stopped at opt.ls_iterations",
    "overflow_contacts": "share of worlds that lost contacts to a full contact buffer (nconmax)",
    "overflow_constraints": "share of worlds that lost constraint rows to a full buffer (njmax)",
    "overflow_hfield": "share of worlds where a geom met the height field in more than 50 prisms",
    "overflow_ccd": "share of worlds that lost convex collisions to a full CCD buffer",
    "overflow_epa_horizon": "share of worlds where EPA dropped a penetrating contact (horizon buffer full)",
    "overflow_other": "share of worlds with any other overflow the simulator reports",
    "contacts_into_terrain": "share of worlds given a height-field contact pointing into the terrain, > 5 mm deep "
    "(a collision error; dropped before the solver)",
}


@dataclass
class SimState:
    """Batched simulator state after a policy step (batch first, float32, on the env's device).

    Joint arrays follow the backend's ``joint_names`` (the contract's order, present joints only);
    ``contacts`` follows ``contact_names`` (robot parts other than wheels or feet; > 0 when the
    part touches anything, self-collision included).
    """

    base_pos: torch.Tensor  # [N, 3] world
    base_quat: torch.Tensor  # [N, 4] (w, x, y, z), world
    base_lin_vel: torch.Tensor  # [N, 3] base frame
    base_ang_vel: torch.Tensor  # [N, 3] base frame
    joint_pos: torch.Tensor  # [N, J]
    joint_vel: torch.Tensor  # [N, J]
    joint_torque: torch.Tensor  # [N, J] actuator torque (after the actuator's force limit)
    contacts: torch.Tensor  # [N, C] contact counts of the watched robot parts
    healthy: torch.Tensor  # [N] bool: False where the state holds NaN or inf, or the simulator blew up
    # [N, L] ground-contact counts of each leg's wheel or foot (legs in the robot's leg order:
    # LF, RF, LH, RH); None where a backend cannot tell (air-time rewards then refuse to run).
    foot_contacts: torch.Tensor | None = None


@dataclass
class PhysicsRandomization:
    """Ranges of the per-environment physics randomisation (None: off). Each robot gets new values
    when it is reset."""

    friction: tuple[float, float] | None = None  # ground friction coefficient
    added_base_mass: tuple[float, float] | None = None  # kg added to the base
    kp_scale: tuple[float, float] | None = None  # multiplies the legs' PD stiffness
    kd_scale: tuple[float, float] | None = None  # multiplies the legs' PD damping (and wheel gains)
    motor_strength: tuple[float, float] | None = None  # multiplies every actuator's force
    num_variants: int = 16  # C MuJoCo: distinct randomised models shared by the envs

    @property
    def enabled(self) -> bool:
        return any(
            r is not None
            for r in (self.friction, self.added_base_mass, self.kp_scale, self.kd_scale, self.motor_strength)
        )


class SimBackend(Protocol):
    num_envs: int
    device: torch.device
    joint_names: tuple[str, ...]
    contact_names: tuple[str, ...]
    terminal_contacts: torch.Tensor  # [C] bool: which watched parts end an episode (base, thighs)
    physics_dt: float
    decimation: int
    standing_height: float  # base height of the default pose on flat ground (m)
    height_sampler: Any  # training.sim.terrain.HeightSampler over the ground the robots touch

    def step(self, targets: torch.Tensor) -> None:
        """Apply joint targets [N, J] (legs: position, wheels: velocity) for ``decimation`` physics
        steps; the PD loops run inside the simulator at the physics rate."""

    def state(self) -> SimState:
        """The state after the last step or reset (tensors owned by the backend; do not modify)."""

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
        """Put the given envs into the given state (velocities in the base frame) and refresh
        their rows of :meth:`state`; other envs are untouched."""

    def push(self, env_ids: torch.Tensor, delta_lin_vel_xy: torch.Tensor) -> None:
        """Add a world-frame horizontal velocity [n, 2] to the bases of the given envs."""

    def physics_params(self) -> torch.Tensor:
        """[N, 5] current friction, added mass, kp, kd and strength scales (privileged info)."""

    def sim_stats(self) -> dict[str, float]:
        """Simulator health over the physics steps of the last :meth:`step` (keys: ``SIM_STATS``)."""

    def close(self) -> None: ...
