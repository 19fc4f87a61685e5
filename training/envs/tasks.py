"""The registered tasks: the paper's robot experiment (flat and rough) and its comparison
experiment (plain ANYmal C, flat ground, joint speed constraint only)."""

from __future__ import annotations

from collections.abc import Callable

from training.envs.config import CostsConfig, CostTermConfig, ObservationsConfig, TaskConfig
from training.sim.terrain import TerrainConfig

TASKS: dict[str, Callable[[], TaskConfig]] = {}


def register_task(name: str, factory: Callable[[], TaskConfig]) -> None:
    """Register a task config factory under ``name`` (refuses to replace one silently)."""
    if name in TASKS:
        raise ValueError(f"task {name!r} is already registered")
    TASKS[name] = factory


def aow_flat() -> TaskConfig:
    """Wheeled ANYmal C on flat ground, blind (proprioception only), all the paper's constraints."""
    return TaskConfig(name="aow_flat", wheeled=True, terrain=TerrainConfig(kind="plane"))


def aow_rough() -> TaskConfig:
    """The robot experiment: rough terrain with curriculum, 187-point height scan, all constraints."""
    return TaskConfig(
        name="aow_rough",
        wheeled=True,
        terrain=TerrainConfig(kind="rough"),
        observations=ObservationsConfig(height_scan=True),
    )


def anymal_flat_speed_limit() -> TaskConfig:
    """The comparison experiment (Section IV-A): plain ANYmal C, flat ground, one constraint,
    joint speed <= 6.0 rad/s (indicator cost)."""
    return TaskConfig(
        name="anymal_flat_speed_limit",
        wheeled=False,
        terrain=TerrainConfig(kind="plane"),
        costs=CostsConfig(terms={"joint_speed": CostTermConfig("joint_speed", "indicator")}),
    )


register_task("aow_flat", aow_flat)
register_task("aow_rough", aow_rough)
register_task("anymal_flat_speed_limit", anymal_flat_speed_limit)
