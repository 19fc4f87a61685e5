"""Build a backend by name; each is imported only when asked for (isaacgym may be absent)."""

from __future__ import annotations

import torch

from aow_policy.robot import Robot
from training.sim.backends.base import BACKENDS, PhysicsRandomization
from training.sim.backends.scene import SolverConfig, build_scene
from training.sim.model import LegActuator
from training.sim.terrain import HeightSampler, Terrain


def create_backend(
    name: str,
    *,
    robot: Robot,
    wheeled: bool,
    terrain: Terrain | None,
    num_envs: int,
    solver: SolverConfig,
    randomization: PhysicsRandomization,
    num_threads: int | None = None,
    warp_nconmax: int | None = None,
    warp_njmax: int | None = None,
    leg_actuator: LegActuator | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
):
    """The simulator backend ``name``, with a ``height_sampler`` attribute for the height scan."""
    decimation = robot.rates.decimation
    if name == "mujoco":
        from training.sim.backends.mujoco_cpu import MujocoBackend

        scene = build_scene(wheeled, terrain, solver, robot, leg_actuator)
        backend = MujocoBackend(scene, num_envs, decimation, num_threads, randomization, seed, device)
        backend.height_sampler = HeightSampler.from_model(scene.model).to(backend.device)
        return backend
    if name == "mujoco_warp":
        from training.sim.backends.mujoco_warp import MujocoWarpBackend

        scene = build_scene(wheeled, terrain, solver, robot, leg_actuator)
        backend = MujocoWarpBackend(scene, num_envs, decimation, randomization, seed, device, warp_nconmax, warp_njmax)
        backend.height_sampler = HeightSampler.from_model(scene.model).to(backend.device)
        return backend
    if name == "isaacgym":
        if leg_actuator is not None and leg_actuator.model != "pd":
            model = leg_actuator.model
            raise ValueError(f"sim.leg_actuator: the isaacgym backend simulates 'pd' legs only, got {model!r}")
        from training.sim.backends.isaacgym import IsaacGymBackend  # needs isaacgym installed

        return IsaacGymBackend(robot, wheeled, terrain, num_envs, decimation, randomization, seed, device)
    raise ValueError(f"backend: unknown simulator backend {name!r} (known: {list(BACKENDS)})")
