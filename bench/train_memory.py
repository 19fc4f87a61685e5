"""Memory of a training run per 1,000 environments: what a GPU user sizes ``--num-envs`` by.

``python -m bench.train_memory --task aow_rough --json``

Measured by allocating, not estimated from formulas: every part that grows with the number of
environments is built at two sizes and the difference divided by the number of environments
added, so fixed parts (the model, the terrain) do not count per environment.

- ``warp_sim``: MuJoCo Warp's Model and Data for the task's scene (``create_backend("mujoco_warp")``
  with the task's contact and constraint budgets; the arrays are allocated on warp's CPU device,
  and have the same sizes on a GPU). This is what the contact/constraint budgets cost.
- ``env_buffers``: the environment's own torch tensors (commands, observations, episode sums,
  height-scan points, ...), built on the C MuJoCo backend to keep warp kernels out of the
  measurement (the C backend's MjData are left out: a GPU run has the warp ones instead).
- ``warp_step_scratch``: what MuJoCo Warp allocates *inside* one physics step (collision
  scratch: EPA polytopes for every collision slot, broad-phase sort buffers), counted by wrapping
  warp's allocation functions while the step runs on warp's CPU device (the first run compiles
  warp's kernels: minutes, cached afterwards). On a GPU these come from the memory pool, and a
  captured CUDA graph keeps them for its lifetime: the policy step's graph (4 physics steps) holds
  between one and four times this.
- ``rollout_storage``: the runner's RolloutStorage for ``--steps-per-env`` steps with the task's
  observation sizes and cost groups.

Not included (say so when quoting the figure): the CUDA context and warp's compiled modules and
CUDA graphs (a fixed few hundred MB), the caching allocator's slack, and the update's activations
(minibatch-sized, a few hundred MB at 16k envs), and the three further physics steps' scratch a
CUDA graph may hold. The goal checked: the measured parts for 16,384
environments fit in a quarter of an H100's 80 GB, leaving the rest for what is not measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import torch

GOAL_ENVS = 16_384
GOAL_BYTES = 20e9  # a quarter of an H100's 80 GB


def _warp_bytes(obj: Any, seen: set[int]) -> int:
    """Bytes allocated by the warp arrays in a mujoco_warp Model/Data (nested dataclasses)."""
    import warp as wp

    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, wp.array):
        return int(obj.capacity or 0)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(_warp_bytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    return 0


def _tensor_bytes(obj: Any, seen: set[int], depth: int = 0) -> int:
    """Bytes of the torch tensors reachable from ``obj`` (attributes, dicts, lists; shared storage once)."""
    if depth > 4 or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        key = obj.untyped_storage().data_ptr()
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen, depth + 1) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type) and type(obj).__module__.startswith("training"):
        return sum(_tensor_bytes(v, seen, depth + 1) for k, v in vars(obj).items() if k != "sim")
    return 0


class _CountWarpAllocations:
    """Bytes of the warp arrays allocated while the context is open (warp's allocation functions
    wrapped): MuJoCo Warp allocates its collision scratch (EPA polytopes per collision slot, sort
    buffers) inside every step."""

    NAMES = ("empty", "zeros", "full", "ones", "empty_like", "zeros_like", "full_like", "clone")

    def __enter__(self) -> _CountWarpAllocations:
        import warp as wp

        self.bytes = 0
        self._saved = {name: getattr(wp, name) for name in self.NAMES if hasattr(wp, name)}
        for name, fn in self._saved.items():
            setattr(wp, name, self._counting(fn))
        return self

    def _counting(self, fn: Any) -> Any:
        import warp as wp

        def allocate(*args: Any, **kwargs: Any) -> Any:
            array = fn(*args, **kwargs)
            if isinstance(array, wp.array):
                self.bytes += int(array.capacity or 0)
            return array

        return allocate

    def __exit__(self, *exc: object) -> None:
        import warp as wp

        for name, fn in self._saved.items():
            setattr(wp, name, fn)


def warp_sim_bytes(task: str, num_envs: int, overrides: dict[str, Any] | None = None) -> tuple[int, int, int]:
    """(Model bytes, Data bytes, bytes allocated inside one physics step) of MuJoCo Warp for
    ``task``'s scene with ``num_envs`` worlds. The step runs warp's kernels on its CPU device: the
    first time compiles them (minutes; cached in ~/.cache/warp afterwards)."""
    from aow_policy.robot import load_robot
    from training.envs import task_config
    from training.sim.backends.base import PhysicsRandomization
    from training.sim.backends.factory import create_backend
    from training.sim.terrain import Terrain

    cfg = task_config(task, **(overrides or {}))
    terrain = Terrain.generate(cfg.terrain) if cfg.terrain.kind == "rough" else None
    backend = create_backend(
        "mujoco_warp",
        robot=load_robot(),
        wheeled=cfg.wheeled,
        terrain=terrain,
        num_envs=num_envs,
        solver=cfg.sim.solver,
        randomization=PhysicsRandomization(),
        warp_nconmax=cfg.sim.warp_nconmax,
        warp_njmax=cfg.sim.warp_njmax,
        device="cpu",
    )
    import mujoco_warp as mjw
    import warp as wp

    with wp.ScopedDevice("cpu"), _CountWarpAllocations() as step_allocations:
        mjw.step(backend.m, backend.d)
    return _warp_bytes(backend.m, set()), _warp_bytes(backend.d, set()), step_allocations.bytes


def env_and_storage_bytes(task: str, num_envs: int, steps_per_env: int) -> tuple[int, int]:
    """(environment tensor bytes, rollout storage bytes) for ``num_envs`` environments."""
    from training.envs import make_env
    from training.storage import RolloutStorage

    env = make_env(task, num_envs, backend="mujoco", device="cpu", sim={"num_threads": 1})
    try:
        env.reset()
        env_bytes = _tensor_bytes(env, set())
        storage = RolloutStorage(
            num_envs,
            steps_per_env,
            env.obs_spec["policy"].dim,
            env.obs_spec["critic"].dim,
            env.num_actions,
            len(env.cost_groups),
            torch.device("cpu"),
        )
        storage_bytes = _tensor_bytes(storage, set())
    finally:
        env.close()
    return env_bytes, storage_bytes


def measure(
    task: str, small: int, large: int, steps_per_env: int, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Per-environment and fixed bytes of each part; ``overrides`` are task overrides (e.g. the
    warp contact budgets) for the simulator part."""
    added = large - small
    model_s, data_s, scratch_s = warp_sim_bytes(task, small, overrides)
    model_l, data_l, scratch_l = warp_sim_bytes(task, large, overrides)
    env_s, storage_s = env_and_storage_bytes(task, small, steps_per_env)
    env_l, storage_l = env_and_storage_bytes(task, large, steps_per_env)
    per_env = {
        "warp_sim": (model_l + data_l - model_s - data_s) / added,
        "warp_step_scratch": (scratch_l - scratch_s) / added,
        "env_buffers": (env_l - env_s) / added,
        "rollout_storage": (storage_l - storage_s) / added,
    }
    per_env["total"] = sum(per_env.values())
    fixed = {
        "warp_model": float(model_l),
        "warp_data_fixed": data_l - per_env["warp_sim"] * large,
        "env_fixed": env_l - per_env["env_buffers"] * large,
        "warp_step_scratch_fixed": scratch_l - per_env["warp_step_scratch"] * large,
    }
    at_goal = sum(fixed.values()) + per_env["total"] * GOAL_ENVS
    return {
        "task": task,
        "steps_per_env": steps_per_env,
        "sizes": [small, large],
        "per_1000_envs_mb": {k: round(v * 1000 / 1e6, 2) for k, v in per_env.items()},
        "fixed_mb": {k: round(v / 1e6, 2) for k, v in fixed.items()},
        f"measured_parts_at_{GOAL_ENVS}_envs_gb": round(at_goal / 1e9, 2),
        "goal_gb": GOAL_BYTES / 1e9,
        "meets_goal": at_goal <= GOAL_BYTES,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.train_memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--task", default="aow_rough", help="training task (default %(default)s)")
    p.add_argument("--steps-per-env", type=int, default=24, help="rollout length (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (16 and 48 envs instead of 64 and 256)")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    args = p.parse_args(argv)
    small, large = (16, 48) if args.quick else (64, 256)
    result = measure(args.task, small, large, args.steps_per_env)
    if not args.json:
        per = result["per_1000_envs_mb"]
        print(
            f"{args.task}: per 1,000 envs {per['total']:.0f} MB (MuJoCo Warp {per['warp_sim']:.0f} + "
            f"{per['warp_step_scratch']:.0f} allocated inside a step, env buffers "
            f"{per['env_buffers']:.0f}, rollout storage {per['rollout_storage']:.0f}); measured parts at "
            f"{GOAL_ENVS} envs {result[f'measured_parts_at_{GOAL_ENVS}_envs_gb']:.1f} GB "
            f"(goal <= {GOAL_BYTES / 1e9:.0f} GB: {'met' if result['meets_goal'] else 'NOT met'})",
            file=sys.stderr,
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
