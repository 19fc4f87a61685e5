"""Simulator backends: state access and stepping only; every MDP term lives in ``training.mdp``.

``mujoco`` (C MuJoCo, one MjData per env, thread pool), ``mujoco_warp`` (MuJoCo Warp, batched on
GPU or, slowly, CPU) and ``isaacgym`` (NVIDIA Isaac Gym, imported only where it is installed)
all produce the same :class:`~training.sim.backends.base.SimState`.
"""

from training.sim.backends.base import BACKENDS, PhysicsRandomization, SimBackend, SimState

__all__ = ["BACKENDS", "PhysicsRandomization", "SimBackend", "SimState"]
