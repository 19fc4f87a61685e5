"""The seven first-order CMDP algorithms of the paper, on shared PPO machinery (``base``)."""

from __future__ import annotations

from typing import Any

import torch

from training.algorithms.base import ConstrainedPPO, NonFiniteLossError, RolloutStats
from training.algorithms.crpo import CRPO
from training.algorithms.focops import FOCOPS
from training.algorithms.nipo import NIPO
from training.algorithms.np3o import NP3O
from training.algorithms.p3o import P3O
from training.algorithms.ppo import PPO
from training.algorithms.ppo_lag import PPOLagrangian
from training.config import PPOConfig
from training.distributed import DistContext
from training.networks import ActorCritic

ALGORITHMS: dict[str, type[ConstrainedPPO]] = {
    cls.name: cls for cls in (PPO, P3O, NP3O, PPOLagrangian, NIPO, CRPO, FOCOPS)
}


def make_algorithm(
    name: str,
    model: ActorCritic,
    cfg: PPOConfig,
    params: Any,
    cost_limits: torch.Tensor | None = None,
    dist: DistContext | None = None,
    group_names: list[str] | None = None,
) -> ConstrainedPPO:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r} (known: {sorted(ALGORITHMS)})")
    return ALGORITHMS[name](model, cfg, params, cost_limits=cost_limits, dist=dist, group_names=group_names)


__all__ = [
    "ALGORITHMS",
    "CRPO",
    "FOCOPS",
    "NIPO",
    "NP3O",
    "P3O",
    "PPO",
    "ConstrainedPPO",
    "NonFiniteLossError",
    "PPOLagrangian",
    "RolloutStats",
    "make_algorithm",
]
