"""Parity of the exported graph with the PyTorch actor, on random and on rollout observations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from export.checkpoint_source import PolicySource
from training.networks import ObsNormalizer

DEFAULT_TOLERANCE = 1e-5


def random_observations(source: PolicySource, count: int, seed: int = 0) -> np.ndarray:
    """Half unit-normal, half spread around the normalizer's statistics (3 std, so some clip)."""
    rng = np.random.default_rng(seed)
    dim = source.obs_dim
    plain = rng.standard_normal((count - count // 2, dim))
    normalizer = source.actor.normalizer
    if isinstance(normalizer, ObsNormalizer):
        mean = normalizer.mean.double().numpy()
        std = np.sqrt(normalizer.var.double().numpy() + normalizer.eps)
    else:
        mean, std = np.zeros(dim), np.full(dim, 3.0)
    spread = mean + 3.0 * std * rng.standard_normal((count // 2, dim))
    return np.concatenate([plain, spread]).astype(np.float32)


def rollout_observations(
    source: PolicySource, steps: int, num_envs: int, seed: int = 0
) -> tuple[np.ndarray | None, str]:
    """Policy observations from a short rollout of the checkpoint's own task, or (None, why not)."""
    if steps <= 0:
        return None, "rollout disabled"
    if source.task is None:
        return None, "no rollout: the checkpoint's config names no task"
    try:
        from training.envs import make_env
    except ImportError as e:
        return None, f"no rollout: the environment package is not available ({e})"
    overrides = source.config.get("env_overrides") or {}
    try:
        # Always the C MuJoCo backend: the export runs on a CPU whatever the run trained on.
        env = make_env(source.task, num_envs, backend="mujoco", device="cpu", seed=seed, **overrides)
    except Exception as e:  # any failure to build the env only means "no rollout check"
        return None, f"no rollout: could not build environment {source.task!r} ({type(e).__name__}: {e})"
    try:
        env_layout = env.obs_spec["policy"].to_list()
        if env_layout != source.policy_layout.to_list():
            return None, (
                f"no rollout: environment {source.task!r} builds a different policy observation layout than the "
                f"checkpoint's (a task config override at training time?)"
            )
        obs = env.reset()["policy"]
        collected = []
        with torch.no_grad():
            for _ in range(steps):
                collected.append(obs.detach().cpu().float().numpy())
                obs = env.step(source.actor(obs.float()))[0]["policy"]
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()
    return np.concatenate(collected), f"rollout of {steps} steps x {num_envs} envs on {source.task!r}"


@dataclass
class Verification:
    """Max |onnx - torch| per observation set, against a tolerance."""

    tolerance: float
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values(), default=0.0)

    @property
    def ok(self) -> bool:
        return bool(self.max_abs_diff) and all(
            np.isfinite(v) and v <= self.tolerance for v in self.max_abs_diff.values()
        )

    def summary(self) -> str:
        lines = [
            f"  {name}: {self.counts[name]} observations, max |onnx - torch| = {diff:.3g} "
            f"({'ok' if diff <= self.tolerance else 'ABOVE'} tolerance {self.tolerance:g})"
            for name, diff in self.max_abs_diff.items()
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def torch_actions(source: PolicySource, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return source.actor(torch.from_numpy(obs)).numpy()


def compare(
    source: PolicySource,
    run_onnx: Callable[[np.ndarray], np.ndarray],
    observation_sets: dict[str, np.ndarray],
    tolerance: float,
) -> Verification:
    """Run both sides on every set; non-finite outputs count as an infinite difference."""
    result = Verification(tolerance)
    for name, obs in observation_sets.items():
        expected = torch_actions(source, obs)
        got = run_onnx(obs)
        if got.shape != expected.shape:
            diff = float("inf")
            result.notes.append(f"{name}: ONNX output shape {got.shape}, PyTorch {expected.shape}")
        else:
            err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
            diff = float(err.max()) if np.isfinite(err).all() else float("inf")
        result.max_abs_diff[name] = diff
        result.counts[name] = len(obs)
    return result
