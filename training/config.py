"""Typed run configuration: one dataclass tree, validated before any simulation starts.

A run is fully described by :class:`TrainConfig`. It is saved as ``config.yaml`` beside the
checkpoints and as plain data inside every checkpoint, so a run can be resumed or reproduced
from its directory alone. Bad values are refused with :class:`ConfigError` naming the field
(``ppo.clip_param: must be in (0, 1), got 1.5``).

Algorithm parameters live in ``algo_params``, whose type depends on ``algo``; the defaults are
the paper's best settings (Table III). See ``training/algorithms`` for what each one means.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from aow_policy.fileio import atomic_write_text
from training.networks import NetworkConfig


class ConfigError(ValueError):
    """A config value is invalid; the message names the field."""


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {message}")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _positive(v: Any) -> bool:
    return _finite(v) and v > 0


def _nonneg(v: Any) -> bool:
    return _finite(v) and v >= 0


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


@dataclass
class PPOConfig:
    """The PPO machinery shared by every algorithm (defaults as rsl_rl's legged-robot setup)."""

    gamma: float = 0.99
    lam: float = 0.95  # GAE lambda
    clip_param: float = 0.2
    num_epochs: int = 5
    num_minibatches: int = 4
    learning_rate: float = 1.0e-3
    schedule: str = "adaptive"  # "adaptive": learning rate follows the KL (rsl_rl); "fixed"
    desired_kl: float = 0.01
    min_learning_rate: float = 1.0e-5
    max_learning_rate: float = 1.0e-2
    max_grad_norm: float = 1.0
    value_loss_coef: float = 1.0
    cost_value_loss_coef: float = 1.0
    use_clipped_value_loss: bool = True
    # Decaying entropy coefficient (appendix C): coef_i = final + (initial - final) * decay**i.
    entropy_coef: float = 0.01
    entropy_coef_final: float = 0.001
    entropy_decay: float = 0.998
    # Left-right mirror loss (issue 23; rsl_rl's "mirror loss", Mittal et al. 2024): the squared
    # difference between the actor's mean on a mirrored observation and its mirrored mean on the
    # observation, this many times, added to the loss. 0: off (the paper's setting).
    mirror_loss_coef: float = 0.0
    # On a GPU, run the networks' forward and backward passes of a minibatch step as CUDA graphs
    # (training.algorithms.graphs); no effect on a CPU.
    cuda_graphs: bool = True

    def validate(self, prefix: str = "ppo") -> None:
        _check(_finite(self.gamma) and 0 < self.gamma < 1, f"{prefix}.gamma", f"must be in (0, 1), got {self.gamma!r}")
        _check(_finite(self.lam) and 0 <= self.lam <= 1, f"{prefix}.lam", f"must be in [0, 1], got {self.lam!r}")
        _check(
            _finite(self.clip_param) and 0 < self.clip_param < 1,
            f"{prefix}.clip_param",
            f"must be in (0, 1), got {self.clip_param!r}",
        )
        for name in ("num_epochs", "num_minibatches"):
            v = getattr(self, name)
            _check(_positive_int(v), f"{prefix}.{name}", f"must be a positive integer, got {v!r}")
        for name in ("learning_rate", "desired_kl", "min_learning_rate", "max_learning_rate", "max_grad_norm"):
            v = getattr(self, name)
            _check(_positive(v), f"{prefix}.{name}", f"must be a positive number, got {v!r}")
        _check(
            self.min_learning_rate <= self.max_learning_rate,
            f"{prefix}.min_learning_rate",
            f"must not exceed max_learning_rate ({self.min_learning_rate} > {self.max_learning_rate})",
        )
        _check(
            self.schedule in ("adaptive", "fixed"),
            f"{prefix}.schedule",
            f"must be 'adaptive' or 'fixed', got {self.schedule!r}",
        )
        for name in (
            "value_loss_coef",
            "cost_value_loss_coef",
            "entropy_coef",
            "entropy_coef_final",
            "mirror_loss_coef",
        ):
            v = getattr(self, name)
            _check(_nonneg(v), f"{prefix}.{name}", f"must be a non-negative number, got {v!r}")
        _check(
            _finite(self.entropy_decay) and 0 < self.entropy_decay <= 1,
            f"{prefix}.entropy_decay",
            f"must be in (0, 1], got {self.entropy_decay!r}",
        )
        _check(
            isinstance(self.cuda_graphs, bool),
            f"{prefix}.cuda_graphs",
            f"must be true or false, got {self.cuda_graphs!r}",
        )
        _check(
            isinstance(self.use_clipped_value_loss, bool),
            f"{prefix}.use_clipped_value_loss",
            f"must be true or false, got {self.use_clipped_value_loss!r}",
        )


# --- algorithm parameters (defaults: Table III, best runs) ---------------------------------


@dataclass
class PPOParams:
    """Plain PPO: no constraint handling. For the paper's baseline with "constraint rewards"
    (Table I) set the task's switch through ``env_overrides``; the algorithm stays PPO."""

    def validate(self, prefix: str) -> None:
        pass


# kappa_adapt of a cost group with a positive limit when the user sets none (docs/benchmarks.md:
# with the paper's schedule alone N-P3O loses a limit that the reward pays to break).
DEFAULT_KAPPA_ADAPT = 0.05


@dataclass
class KappaParams:
    """Penalty weight schedule kappa_i = min(kappa_max, kappa_init * kappa_growth**i)."""

    kappa_max: float = 1.0
    kappa_init: float | None = None  # None: kappa_max / 2 (the appendix's 0.1 -> 0.2 ratio)
    kappa_growth: float = 1.0004
    cost_limit: float = 0.0  # eps in the internal unit (discounted cost return J_C); see --cost-limit
    # Raise kappa by the factor 1 + kappa_adapt after every rollout that violates the constraint,
    # up to kappa_adapt_max, lowering it only with kappa_relax_margin (below; algorithms/np3o.py).
    # None (not set): per cost group,
    # DEFAULT_KAPPA_ADAPT where its limit eps is positive and 0 (the paper's schedule) where eps = 0,
    # so the paper's robot setting (eps = 0) is unchanged. A number, 0 included, is used as given
    # for every group: ``kappa_adapt: 0`` restores the paper's schedule with any limit. None stays
    # None in the saved config; :meth:`kappa_adapt_rates` resolves it when the algorithm is built.
    kappa_adapt: float | None = None
    kappa_adapt_max: float = 20.0
    # Opt-in: also lower kappa, dividing its scale by 1 + kappa_adapt after every rollout inside the
    # limit with this margin (sampled J_C < (1 - margin) eps), never below the schedule. None: never
    # lowered (the default: it holds the limit). On Hopper over 3 M steps a margin of 0.2 gave 42 %
    # more return at 18 instead of 6 per episode against the limit 25, but over the limit in a
    # quarter of the second half's rollouts instead of 2 % (docs/benchmarks.md, "Should κ come down").
    kappa_relax_margin: float | None = None

    def kappa_adapt_rates(self, cost_limits: Sequence[float]) -> list[float]:
        """The kappa_adapt of every cost group, given the groups' limits eps (internal unit)."""
        if self.kappa_adapt is not None:
            return [float(self.kappa_adapt)] * len(cost_limits)
        return [DEFAULT_KAPPA_ADAPT if float(eps) > 0 else 0.0 for eps in cost_limits]

    def validate(self, prefix: str) -> None:
        if self.kappa_adapt is not None:
            _check(
                _finite(self.kappa_adapt) and 0 <= self.kappa_adapt < 1,
                f"{prefix}.kappa_adapt",
                f"must be in [0, 1) or null (automatic), got {self.kappa_adapt!r}",
            )
        if self.kappa_relax_margin is not None:
            _check(
                _finite(self.kappa_relax_margin) and 0 <= self.kappa_relax_margin < 1,
                f"{prefix}.kappa_relax_margin",
                f"must be in [0, 1) or null (kappa never lowered), got {self.kappa_relax_margin!r}",
            )
        _check(
            _positive(self.kappa_adapt_max),
            f"{prefix}.kappa_adapt_max",
            f"must be positive, got {self.kappa_adapt_max!r}",
        )
        _check(_positive(self.kappa_max), f"{prefix}.kappa_max", f"must be positive, got {self.kappa_max!r}")
        if self.kappa_init is not None:
            _check(_positive(self.kappa_init), f"{prefix}.kappa_init", f"must be positive, got {self.kappa_init!r}")
        _check(
            _finite(self.kappa_growth) and self.kappa_growth >= 1,
            f"{prefix}.kappa_growth",
            f"must be >= 1, got {self.kappa_growth!r}",
        )
        _check(_nonneg(self.cost_limit), f"{prefix}.cost_limit", f"must be >= 0, got {self.cost_limit!r}")


@dataclass
class P3OParams(KappaParams):
    kappa_max: float = 120.0
    # kappa_adapt's cap at the same 20 times kappa_max as N-P3O's (20 against 1): P3O's kappa weighs
    # raw cost advantages, so N-P3O's 20 would sit below P3O's scheduled kappa and stop any raise.
    kappa_adapt_max: float = 2400.0


@dataclass
class NP3OParams(KappaParams):
    kappa_max: float = 1.0


@dataclass
class PPOLagParams:
    lambda_init: float = -1.3  # before Softplus: lambda = softplus(-1.3) = 0.241
    lambda_lr: float = 0.001  # Adam learning rate alpha_lambda
    cost_limit: float = 0.0

    def validate(self, prefix: str) -> None:
        _check(_finite(self.lambda_init), f"{prefix}.lambda_init", f"must be a finite number, got {self.lambda_init!r}")
        _check(_nonneg(self.lambda_lr), f"{prefix}.lambda_lr", f"must be >= 0, got {self.lambda_lr!r}")
        _check(_nonneg(self.cost_limit), f"{prefix}.cost_limit", f"must be >= 0, got {self.cost_limit!r}")


@dataclass
class NIPOParams:
    cost_limit: float = 0.1
    barrier_k: float = 20.0
    recovery_coef: float = 1.0  # lambda_rec

    def validate(self, prefix: str) -> None:
        _check(_nonneg(self.cost_limit), f"{prefix}.cost_limit", f"must be >= 0, got {self.cost_limit!r}")
        _check(_positive(self.barrier_k), f"{prefix}.barrier_k", f"must be positive, got {self.barrier_k!r}")
        _check(_nonneg(self.recovery_coef), f"{prefix}.recovery_coef", f"must be >= 0, got {self.recovery_coef!r}")


@dataclass
class CRPOParams:
    cost_limit: float = 0.01

    def validate(self, prefix: str) -> None:
        _check(_nonneg(self.cost_limit), f"{prefix}.cost_limit", f"must be >= 0, got {self.cost_limit!r}")


@dataclass
class FOCOPSParams:
    nu_init: float = 0.1  # cost weight nu
    nu_lr: float = 0.0  # alpha_nu (0: nu stays fixed, the best run of Table III)
    nu_max: float = 2.0
    temperature: float = 0.5  # lambda of FOCOPS
    kl_bound: float = 0.02  # delta: samples whose KL exceeds it are dropped from the loss
    cost_limit: float = 0.0

    def validate(self, prefix: str) -> None:
        _check(_nonneg(self.nu_init), f"{prefix}.nu_init", f"must be >= 0, got {self.nu_init!r}")
        _check(_nonneg(self.nu_lr), f"{prefix}.nu_lr", f"must be >= 0, got {self.nu_lr!r}")
        _check(_nonneg(self.nu_max), f"{prefix}.nu_max", f"must be >= 0, got {self.nu_max!r}")
        _check(self.nu_init <= self.nu_max, f"{prefix}.nu_init", f"must not exceed nu_max ({self.nu_max})")
        _check(_positive(self.temperature), f"{prefix}.temperature", f"must be positive, got {self.temperature!r}")
        _check(_positive(self.kl_bound), f"{prefix}.kl_bound", f"must be positive, got {self.kl_bound!r}")
        _check(_nonneg(self.cost_limit), f"{prefix}.cost_limit", f"must be >= 0, got {self.cost_limit!r}")


ALGO_PARAMS: dict[str, type] = {
    "ppo": PPOParams,
    "p3o": P3OParams,
    "np3o": NP3OParams,
    "ppo_lag": PPOLagParams,
    "nipo": NIPOParams,
    "crpo": CRPOParams,
    "focops": FOCOPSParams,
}
AlgoParams = Union[PPOParams, P3OParams, NP3OParams, PPOLagParams, NIPOParams, CRPOParams, FOCOPSParams]  # noqa: UP007


# Where and how wide a run executes, and how often it checkpoints: what ``--resume`` may change
# (a run started on a GPU continues on a CPU and back). Everything else defines what is learned
# and stays as stored.
PLACEMENT_FIELDS = ("device", "backend", "num_envs", "save_interval", "save_minutes", "iterations")


@dataclass
class TrainConfig:
    task: str = "aow_flat"
    algo: str = "np3o"
    num_envs: int = 4096  # over all ranks
    num_steps_per_env: int = 24
    iterations: int = 1500  # total learning iterations of the run
    seed: int = 0
    device: str = "cpu"
    backend: str = "mujoco"
    save_interval: int = 50
    # Also checkpoint when this many wall-clock minutes have passed since the last checkpoint, so a
    # run on a lent machine that is taken away after a fixed window (e.g. 10 minutes of GPU time)
    # always leaves a recent checkpoint, whatever an iteration costs there. 0: by iteration only.
    save_minutes: float = 4.0
    # Per cost group limit overriding the algorithm's cost_limit: {"limits": 0.0}. Internal unit:
    # the discounted cost return J_C (see ``cost_limit_from_episode_cost``).
    cost_limits: dict[str, float] = field(default_factory=dict)
    # THE command-line convention (``--cost-limit``): the expected cost per episode of every cost
    # group, summed undiscounted over one full episode of the task (max_episode_length steps), as
    # Safety-Gymnasium and OmniSafe state their cost_limit. Every algorithm gets the same internal
    # eps = episode_cost_limit / (T (1 - gamma)). None: the algorithm's own cost_limit (internal unit).
    episode_cost_limit: float | None = None
    env_overrides: dict[str, Any] = field(default_factory=dict)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    algo_params: AlgoParams | None = None  # None: the defaults of `algo`
    # Start the networks (and observation normalizers) from this checkpoint's weights: a new run
    # (iteration 0, fresh optimizer) that fine-tunes, e.g. with other penalty weights.
    init_from: str | None = None
    # Continue another run's checkpoint under this config, as a new run: networks, optimizer,
    # algorithm state (kappa, learning rate), generators, iteration count and the environment's
    # state (terrain levels; the simulation itself where the task's config is unchanged) carry
    # over, while what --set and --env-override change applies from there (``aow-train --fork``).
    # A branch that keeps everything but the lever it measures.
    fork_from: str | None = None

    def __post_init__(self) -> None:
        if self.algo_params is None and self.algo in ALGO_PARAMS:
            self.algo_params = ALGO_PARAMS[self.algo]()

    def validate(self) -> None:
        """Refuse bad values before any environment is built; the error names the field."""
        _check(isinstance(self.task, str) and bool(self.task), "task", f"must be a task name, got {self.task!r}")
        _check(self.algo in ALGO_PARAMS, "algo", f"unknown algorithm {self.algo!r} (known: {sorted(ALGO_PARAMS)})")
        for name in ("num_envs", "num_steps_per_env", "iterations", "save_interval"):
            v = getattr(self, name)
            _check(_positive_int(v), name, f"must be a positive integer, got {v!r}")
        _check(
            isinstance(self.seed, int) and not isinstance(self.seed, bool), "seed", f"must be an int, got {self.seed!r}"
        )
        _check(_nonneg(self.save_minutes), "save_minutes", f"must be >= 0 (0: off), got {self.save_minutes!r}")
        _check(
            self.device == "cpu" or self.device.startswith("cuda"),
            "device",
            f"must be 'cpu' or 'cuda[:N]', got {self.device!r}",
        )
        _check(isinstance(self.cost_limits, dict), "cost_limits", "must be a mapping {group: limit}")
        for group, limit in self.cost_limits.items():
            _check(_nonneg(limit), f"cost_limits.{group}", f"must be >= 0, got {limit!r}")
        if self.episode_cost_limit is not None:
            _check(
                _nonneg(self.episode_cost_limit),
                "episode_cost_limit",
                f"must be >= 0 (cost per episode), got {self.episode_cost_limit!r}",
            )
            _check(
                not self.cost_limits,
                "episode_cost_limit",
                "give either episode_cost_limit (--cost-limit, per episode) or cost_limits (per group, internal "
                "unit), not both",
            )
        _check(isinstance(self.env_overrides, dict), "env_overrides", "must be a mapping")
        _check(
            self.init_from is None or (isinstance(self.init_from, str) and bool(self.init_from)),
            "init_from",
            f"must be a checkpoint path or null, got {self.init_from!r}",
        )
        _check(
            self.fork_from is None or (isinstance(self.fork_from, str) and bool(self.fork_from)),
            "fork_from",
            f"must be a checkpoint path or null, got {self.fork_from!r}",
        )
        _check(
            self.init_from is None or self.fork_from is None,
            "fork_from",
            "a run starts from another's weights (init_from) or continues its whole state (fork_from), not both",
        )
        batch = self.num_envs * self.num_steps_per_env
        _check(
            batch >= self.ppo.num_minibatches,
            "ppo.num_minibatches",
            f"{self.ppo.num_minibatches} minibatches but a rollout holds only {batch} samples",
        )
        try:
            self.network.validate()
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.ppo.validate("ppo")
        expected = ALGO_PARAMS[self.algo]
        _check(
            type(self.algo_params) is expected,
            "algo_params",
            f"algo {self.algo!r} takes {expected.__name__}, got {type(self.algo_params).__name__}",
        )
        self.algo_params.validate("algo_params")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, dicts, numbers, strings): YAML- and checkpoint-safe."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"config: expected a mapping, got {type(data).__name__}")
        data = dict(data)
        algo = data.get("algo", cls.algo)
        params = data.pop("algo_params", None)
        cfg = _build(cls, data, "")
        if algo not in ALGO_PARAMS:
            raise ConfigError(f"algo: unknown algorithm {algo!r} (known: {sorted(ALGO_PARAMS)})")
        cfg.algo_params = _build(ALGO_PARAMS[algo], params or {}, "algo_params.")
        return cfg


def cost_limit_from_episode_cost(episode_cost: float, episode_length: int, gamma: float) -> float:
    """Per-episode cost limit -> the internal eps every algorithm compares J_C with.

    J_C (training.algorithms.rollout) is the discounted cost-to-go averaged over the visited states,
    time-outs bootstrapped, so a policy that spends ``episode_cost`` per episode of
    ``episode_length`` steps at a constant rate c = episode_cost / episode_length has
    J_C = c / (1 - gamma). Example: 25 per 1000-step episode with gamma = 0.99 gives eps = 2.5."""
    if not (episode_length > 0 and 0 < gamma < 1):
        raise ValueError(f"episode_length must be > 0 and gamma in (0, 1), got {episode_length}, {gamma}")
    return float(episode_cost) / float(episode_length) / (1.0 - float(gamma))


def episode_cost_from_cost_limit(cost_return: float, episode_length: int, gamma: float) -> float:
    """The inverse of :func:`cost_limit_from_episode_cost`: J_C (or eps) in cost per episode."""
    return float(cost_return) * (1.0 - float(gamma)) * float(episode_length)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown field (known: {sorted(names)})")
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, name + ".")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        return tuple(value)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _coerce(args[0], value, name)
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def load_config_yaml(path: str | os.PathLike[str]) -> TrainConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read config ({e})") from None
    return TrainConfig.from_dict(data or {})


def save_config_yaml(cfg: TrainConfig, path: str | os.PathLike[str]) -> Path:
    """Write atomically (temp file, then rename)."""
    return atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def parse_assignment(assignment: str) -> tuple[str, Any]:
    """``a.b.c=value`` as (``"a.b.c"``, the value parsed as YAML)."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r}: expected KEY=VALUE, e.g. ppo.learning_rate=3e-4")
    key, raw = assignment.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"override {key}: cannot parse value {raw!r} ({e})") from None
    return key.strip(), value


def add_env_override(env_overrides: dict[str, Any], assignment: str) -> None:
    """Record ``a.b.c=value`` in a run's ``env_overrides`` under its dotted path. Kept as a path,
    not nested: the task applies a nested dict to a plain dict field (``rewards.weights``) as the
    whole new dict, so ``rewards.weights.hip_range=-1`` nested would drop every other weight."""
    key, value = parse_assignment(assignment)
    env_overrides[key] = value


def apply_override(cfg_dict: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to a config dict in place."""
    key, value = parse_assignment(assignment)
    parts = key.split(".")
    node = cfg_dict
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {key}: {p} is not a section")
        node = nxt
    node[parts[-1]] = value
