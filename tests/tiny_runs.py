"""Tiny real training runs for tests that need a run's checkpoints (export, averaging)."""

from __future__ import annotations

from pathlib import Path

import training.config as config_module
import training.envs  # noqa: F401  (registers the tasks)
import training.runner as runner_module
from training.networks import NetworkConfig


def train_tiny_rough_np3o(run_dir: Path, iterations: int) -> Path:
    """np3o on aow_rough (height scan), 4 envs x 8 steps per iteration, a checkpoint after each."""
    cfg = config_module.TrainConfig(
        task="aow_rough",
        algo="np3o",
        num_envs=4,
        num_steps_per_env=8,
        iterations=iterations,
        save_interval=1,
        network=NetworkConfig(
            scan_encoder=(16, 8), actor_hidden=(32, 16), critic_hidden=(32, 16), cost_critic_hidden=(16,)
        ),
    )
    cfg.ppo.num_minibatches = 2
    runner_module.Runner(cfg, run_dir, progress=False, tensorboard=False).learn()
    return run_dir
