"""Environments: ``make_env(task, num_envs, backend="mujoco", device="cpu", seed=0, **overrides)``.

The batched environment API (INTERFACES.md section 1) over the constrained locomotion task of
the paper; tasks are registered by name in :mod:`training.envs.tasks`.
"""

from __future__ import annotations

from typing import Any

import torch

from training.envs.config import TaskConfig, apply_overrides
from training.envs.locomotion import LocomotionEnv
from training.envs.tasks import TASKS, register_task


def task_config(task: str | TaskConfig, **overrides: Any) -> TaskConfig:
    """The config of a registered task (or a given one), with ``overrides`` applied and validated.

    Overrides name config fields: ``episode_length_s=5.0``, nested sections as dicts
    (``rewards={"constraint_rewards": True}``) or paths (``**{"rewards.constraint_rewards": True}``,
    ``rewards__constraint_rewards=True``).
    """
    if isinstance(task, TaskConfig):
        cfg = task
    elif task in TASKS:
        cfg = TASKS[task]()
    else:
        raise ValueError(f"task: unknown task {task!r} (known: {sorted(TASKS)})")
    apply_overrides(cfg, overrides)
    cfg.validate()
    return cfg


def make_env(
    task: str | TaskConfig,
    num_envs: int,
    backend: str = "mujoco",
    device: str | torch.device = "cpu",
    seed: int = 0,
    **overrides: Any,
) -> LocomotionEnv:
    """Build the environment of ``task`` with ``num_envs`` robots on the simulator ``backend``."""
    return LocomotionEnv(task_config(task, **overrides), num_envs, backend=backend, device=device, seed=seed)


__all__ = ["TASKS", "LocomotionEnv", "TaskConfig", "make_env", "register_task", "task_config"]
