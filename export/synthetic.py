"""Checkpoints with random weights in the training format, for tests and benchmarks.

They follow the conventions of the locomotion task (proprioception terms, legs as position
offsets around the default pose, wheels as velocity targets, 187-point height scan) with every
number read from the robot contract, so a synthetic policy fits the robot exactly as a trained
one would.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from aow_policy.layout import ObservationLayout
from aow_policy.robot import Robot
from aow_policy.testing import locomotion_layout
from training.checkpoint import save_checkpoint
from training.networks import ActorCritic, NetworkConfig, ObsNormalizer


def paper_observation_layout(robot: Robot, height_scan: bool = True) -> ObservationLayout:
    """Proprioception (+ height scan): 56 + 187 values for the AoW, as in the paper's robot task.

    The one definition lives in the runtime's test support (aow_policy.testing), which the
    controller tests also use; tests/test_export_trained.py checks it equals the trained layout.
    """
    return locomotion_layout(robot, height_scan=height_scan)


def robot_action_layout(robot: Robot) -> dict[str, list]:
    """Legs: position around the default pose within position limits; wheels: velocity within limits."""
    legs = [j.kind == "leg" for j in robot.joints]
    return {
        "joint_names": list(robot.joint_names),
        "kinds": [j.kind for j in robot.joints],
        "scales": robot.action_scales.tolist(),
        "offsets": [j.default_position if leg else 0.0 for j, leg in zip(robot.joints, legs, strict=True)],
        "low": [j.position_limits[0] if leg else -j.velocity_limit for j, leg in zip(robot.joints, legs, strict=True)],
        "high": [j.position_limits[1] if leg else j.velocity_limit for j, leg in zip(robot.joints, legs, strict=True)],
    }


def synthetic_payload(
    robot: Robot,
    layout: ObservationLayout | None = None,
    network: NetworkConfig | None = None,
    seed: int = 0,
    iteration: int = 0,
    task: str = "aow_rough",
    cost_critics: bool = True,
) -> dict[str, Any]:
    """A full checkpoint payload with random weights and a non-trivial normalizer.

    ``cost_critics=False`` gives a model without cost critics, as plain PPO trains it.
    """
    layout = layout if layout is not None else paper_observation_layout(robot)
    network = network if network is not None else NetworkConfig()
    action_layout = robot_action_layout(robot)
    cost_groups = {"smoothness": ["c1", "c2"], "limits": ["joint_speed", "joint_torque"]}
    torch.manual_seed(seed)
    num_critics = len(cost_groups) if cost_critics else 0
    model = ActorCritic(layout, layout, len(action_layout["joint_names"]), num_critics, network)
    with torch.no_grad():
        for module in (model.actor.normalizer, model.critic.normalizer):
            if isinstance(module, ObsNormalizer):
                module.update(torch.randn(64, layout.dim) * 2.0 + torch.randn(layout.dim))
    return {
        "iteration": iteration,
        "config": {"task": task, "algo": "np3o", "seed": seed, "network": asdict(network)},
        "obs_layout": {"policy": layout.to_list(), "critic": layout.to_list()},
        "action_layout": action_layout,
        "num_actions": len(action_layout["joint_names"]),
        "cost_groups": cost_groups,
        "model": model.state_dict(),
        "optimizer": {},
        "algo_state": {},
        "rng": {"torch": torch.get_rng_state()},
        "robot_contract_hash": robot.contract_hash,
    }


def write_synthetic_checkpoint(path: str | os.PathLike[str], robot: Robot, **kwargs: Any) -> Path:
    return save_checkpoint(path, synthetic_payload(robot, **kwargs))
