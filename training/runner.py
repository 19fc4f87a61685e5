"""The training loop: collect a rollout, update, log, checkpoint; resumable exactly.

One :class:`Runner` per process. Under ``torchrun`` every rank builds its share of the
environments and the same model (same seed, then rank 0's weights broadcast); see
:mod:`training.distributed` for what is reduced across ranks. Only rank 0 writes.

Run directory (rank 0)::

    config.yaml          the TrainConfig, written before the first step
    model_<it>.pt        checkpoints every ``save_interval`` iterations and at the end
                         (format: training/checkpoint.py; <it> = completed iterations)
    metrics.jsonl        one JSON record per iteration (what aow-compare reads)
    segments.jsonl       one line per start or resume: device, backend, envs, host, and what a
                         resume on another device or size could not carry over exactly
    events.out.tfevents.*  TensorBoard scalars

Checkpoints and resume, also on another device, backend or number of environments:
:mod:`training.runner_checkpoints`.

Observation normalizers are updated after each policy update from that rollout's observations
(moments reduced over ranks), so the rollout and its update see the same normalization.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from training.algorithms import ALGORITHMS, NonFiniteLossError, make_algorithm
from training.config import (
    ConfigError,
    TrainConfig,
    cost_limit_from_episode_cost,
    episode_cost_from_cost_limit,
    save_config_yaml,
)
from training.distributed import DistContext, local_device, split_envs
from training.networks import ActorCritic, ObsNormalizer
from training.progress import TrainingProgress
from training.runner_checkpoints import RunnerCheckpoints, spread_terrain_levels  # noqa: F401 (the old import path)
from training.storage import RolloutStorage
from training.toy_cmdp import TOY_TASKS, make_toy_env

GYM_PREFIX = "gym:"


class TrainingError(RuntimeError):
    """Training cannot go on (diverged, or the run directory is unusable); the message says why."""


def check_task(task: str, overrides: dict[str, Any] | None = None) -> None:
    """Refuse an unknown task name or bad task overrides before anything is built."""
    if task in TOY_TASKS:
        return
    if task.startswith(GYM_PREFIX):
        import gymnasium as gym

        import training.gym_adapter  # noqa: F401 (registers the example task)

        try:
            gym.spec(task[len(GYM_PREFIX) :])
        except gym.error.Error as e:
            raise ConfigError(f"task: {task!r}: {e}") from None
        return
    from training.envs import task_config  # MuJoCo and the tasks: imported only for a task of them

    try:
        task_config(task, **(overrides or {}))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"task {task!r}: {e}") from None


def make_task_env(task: str, num_envs: int, backend: str, device: str, seed: int, overrides: dict[str, Any]) -> Any:
    """The environment for a task name: a toy task, ``gym:<id>``, or a task of training.envs."""
    if task in TOY_TASKS:
        try:
            return make_toy_env(task, num_envs, device=device, seed=seed, **overrides)
        except (TypeError, ValueError) as e:
            raise ConfigError(str(e)) from None
    if task.startswith(GYM_PREFIX):
        from training.gym_adapter import make_gym_env  # imports gymnasium

        return make_gym_env(task[len(GYM_PREFIX) :], num_envs, device=device, seed=seed, **overrides)
    from training.envs import make_env

    return make_env(task, num_envs, backend=backend, device=device, seed=seed, **overrides)


def _robot_contract_hash(env: Any, task: str) -> str:
    robot = getattr(env, "robot", None)
    if robot is not None and hasattr(robot, "contract_hash"):
        return str(robot.contract_hash)
    if task in TOY_TASKS or task.startswith(GYM_PREFIX):
        return f"none:{task}"
    from aow_policy.robot import load_robot

    return load_robot().contract_hash


class EpisodeLog:
    """Per-iteration episode statistics: sums and counts, reduced over ranks at the end."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, values: dict[str, float], count: int) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v) * count
            self.counts[k] = self.counts.get(k, 0.0) + count

    def reduced(self, dist: DistContext) -> dict[str, float]:
        parts = dist.gather_objects((self.sums, self.counts))
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for s, c in parts:
            for k in s:
                sums[k] = sums.get(k, 0.0) + s[k]
                counts[k] = counts.get(k, 0.0) + c[k]
        return {k: sums[k] / counts[k] for k in sorted(sums) if counts[k] > 0}


class Runner(RunnerCheckpoints):
    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | os.PathLike[str] | None = None,
        dist: DistContext | None = None,
        env: Any = None,
        resume: bool = False,
        progress: bool = True,
        tensorboard: bool = True,
    ):
        cfg.validate()
        check_task(cfg.task, cfg.env_overrides)
        self.cfg = cfg
        self.dist = dist or DistContext()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress = progress and self.dist.is_main
        self.progress_file: IO[str] | None = None  # where the bar goes (tqdm's default, stderr, when None)
        self.use_tensorboard = tensorboard
        self.writer = None
        if self.run_dir is not None and not resume and self.dist.is_main and any(self.run_dir.glob("model_*.pt")):
            raise TrainingError(
                f"{self.run_dir} already holds checkpoints; continue it with --resume {self.run_dir} "
                "or choose another --run-dir"
            )
        self.device = torch.device(local_device(cfg.device, self.dist))
        rank = self.dist.rank
        self.num_envs = split_envs(cfg.num_envs, self.dist)
        # Same seed on every rank: identical initial weights (and rank 0's are broadcast anyway).
        torch.manual_seed(cfg.seed)
        if env is None:
            env = make_task_env(
                cfg.task, self.num_envs, cfg.backend, str(self.device), cfg.seed + 100_003 * rank, cfg.env_overrides
            )
        self.env = env
        self.group_names = list(env.cost_groups)
        unknown = sorted(set(cfg.cost_limits) - set(self.group_names))
        if unknown:
            raise ConfigError(f"cost_limits.{unknown[0]}: no such cost group (groups: {self.group_names})")
        algo_cls = ALGORITHMS[cfg.algo]
        if algo_cls.uses_cost_critics and not self.group_names:
            raise ConfigError(f"algo: {cfg.algo!r} needs cost groups, but task {cfg.task!r} defines none")
        self.group_matrix = torch.zeros(len(env.cost_names), len(self.group_names), device=self.device)
        for g, name in enumerate(self.group_names):
            for term in env.cost_groups[name]:
                if term not in env.cost_names:
                    raise ConfigError(f"cost group {name!r} lists {term!r}, not a cost term of the task")
                self.group_matrix[env.cost_names.index(term), g] = 1.0
        model_groups = len(self.group_names) if algo_cls.uses_cost_critics else 0
        self.model = ActorCritic(
            env.obs_spec["policy"], env.obs_spec["critic"], env.num_actions, model_groups, cfg.network
        ).to(self.device)
        if cfg.network.symmetric_actor:
            mirror = self._robot_mirror(env, "network.symmetric_actor")
            self.model.actor.set_mirror(
                mirror.observations.index, mirror.observations.sign, mirror.actions.index, mirror.actions.sign
            )
        if cfg.init_from and not resume:
            self._init_from(Path(cfg.init_from))
        fork = None
        if cfg.fork_from and not resume:  # the networks now: the rank broadcast below carries them
            fork = self._load_fork_model(Path(cfg.fork_from))
        self.dist.broadcast_module(self.model)
        self.episode_length = getattr(env, "max_episode_length", None)
        self.cost_limits = self.internal_cost_limits(cfg, self.group_names, self.episode_length)
        limits = [self.cost_limits[g] for g in self.group_names[:model_groups]]
        self.algo = make_algorithm(
            cfg.algo,
            self.model,
            cfg.ppo,
            cfg.algo_params,
            cost_limits=torch.tensor(limits),
            dist=self.dist,
            group_names=self.group_names[:model_groups],
        )
        if cfg.ppo.mirror_loss_coef > 0:
            self.algo.mirror = self._robot_mirror(env, "ppo.mirror_loss_coef")
        self.storage = RolloutStorage(
            self.num_envs,
            cfg.num_steps_per_env,
            env.obs_spec["policy"].dim,
            env.obs_spec["critic"].dim,
            env.num_actions,
            model_groups,
            self.device,
        )
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed * 1_000_003 + 17 + rank)
        self.iteration = 0
        self.obs = None
        self.history: list[dict[str, float]] = []
        self.stopped_by_budget = False
        self._episode_return = torch.zeros(self.num_envs, device=self.device)
        self._episode_length = torch.zeros(self.num_envs, device=self.device)
        self.last_checkpoint: Path | None = None
        self.resumed_from: dict[str, Any] | None = None  # the stored run's device, backend, num_envs
        self.resume_notes: list[str] = []  # what a resume could not carry over exactly, and why
        if resume:
            if self.run_dir is None:
                raise TrainingError("resume needs a run directory")
            self._resume()
        elif fork is not None:
            self._fork(Path(cfg.fork_from), fork)

    @staticmethod
    def internal_cost_limits(cfg: TrainConfig, groups: list[str], episode_length: int | None) -> dict[str, float]:
        """eps per cost group in the internal unit (the discounted cost return J_C), the same for
        every algorithm: ``cfg.episode_cost_limit`` (cost per episode) converted, else the
        per-group ``cost_limits``, else the algorithm's ``cost_limit`` (0 for PPO)."""
        if cfg.episode_cost_limit is not None:
            if not episode_length:
                raise ConfigError(
                    f"episode_cost_limit: task {cfg.task!r} has no max_episode_length to convert a per-episode limit"
                )
            eps = cost_limit_from_episode_cost(cfg.episode_cost_limit, int(episode_length), cfg.ppo.gamma)
            return dict.fromkeys(groups, eps)
        default = float(getattr(cfg.algo_params, "cost_limit", 0.0))
        return {g: float(cfg.cost_limits.get(g, default)) for g in groups}

    @staticmethod
    def _robot_mirror(env: Any, option: str) -> Any:
        """The left-right mirrors of the task's robot, for ``option`` (legged tasks only)."""
        from training.envs import LocomotionEnv
        from training.mdp.symmetry import robot_mirror

        if not isinstance(env, LocomotionEnv):
            raise ConfigError(
                f"ppo.mirror_loss_coef: the task's environment ({type(env).__name__}) has no robot to mirror"
            )
        try:
            return robot_mirror(env).to(env.device)
        except ValueError as e:
            raise ConfigError(f"{option}: {e}") from None

    def _robot_contract_hash(self) -> str:
        return _robot_contract_hash(self.env, self.cfg.task)

    # ---- the loop ----------------------------------------------------------------------------

    @torch.no_grad()
    def collect(self) -> tuple[EpisodeLog, dict[str, float]]:
        cfg, env, algo, storage = self.cfg, self.env, self.algo, self.storage
        episodes = EpisodeLog()
        cost_sums = torch.zeros(len(env.cost_names), device=self.device)
        model_groups = storage.num_cost_groups
        storage.clear()
        for _ in range(cfg.num_steps_per_env):
            obs = self.obs
            out = algo.act(obs["policy"], obs["critic"], self.generator)
            next_obs, rewards, costs, dones, infos = env.step(out["actions"])
            rewards = rewards.to(self.device, torch.float32)
            costs = costs.to(self.device, torch.float32)
            dones = dones.to(self.device).bool()
            time_outs = infos.get("time_outs")
            time_outs = torch.zeros_like(dones) if time_outs is None else time_outs.to(self.device).bool()
            boot_v = boot_c = None
            terminal = infos.get("terminal_obs")
            if terminal is not None and bool(time_outs.any()):
                terminal_critic = terminal["critic"] if isinstance(terminal, dict) else terminal
                boot_v, boot_c = algo.values(terminal_critic.to(self.device))
            storage.add(
                obs["policy"],
                obs["critic"],
                out["actions"],
                out["log_probs"],
                out["action_mean"],
                out["action_std"],
                rewards,
                costs @ self.group_matrix[:, :model_groups],
                dones,
                time_outs,
                out["values"],
                out["cost_values"],
                cfg.ppo.gamma,
                boot_v,
                boot_c,
            )
            cost_sums += costs.sum(0)
            self._episode_return += rewards
            self._episode_length += 1
            n_done = int(dones.sum())
            if n_done:
                episodes.add(
                    {
                        "return": float(self._episode_return[dones].mean()),
                        "length": float(self._episode_length[dones].mean()),
                    },
                    n_done,
                )
                self._episode_return[dones] = 0.0
                self._episode_length[dones] = 0.0
                episode_info = infos.get("episode") or {}
                if episode_info:
                    episodes.add({f"episode/{k}": float(v) for k, v in episode_info.items()}, n_done)
            sim_stats = infos.get("sim_stats")
            if sim_stats:  # the simulator's own health (contact overflows, solver limits): a mean over the steps
                episodes.add({f"sim/{k}": float(v) for k, v in sim_stats.items()}, 1)
            self.obs = {k: v.to(self.device) for k, v in next_obs.items()}
        last_v, last_c = algo.values(self.obs["critic"])
        storage.compute_returns(last_v, last_c, cfg.ppo.gamma, cfg.ppo.lam)
        steps = torch.tensor([float(cfg.num_steps_per_env * self.num_envs)], device=self.device)
        packed = self.dist.all_reduce_sum(torch.cat([steps, cost_sums]))
        cost_rates = {f"cost_rate/{n}": float(packed[1 + k] / packed[0]) for k, n in enumerate(env.cost_names)}
        return episodes, cost_rates

    @torch.no_grad()
    def update_normalizers(self) -> None:
        pairs = (
            (self.model.actor.normalizer, self.storage.obs),
            (self.model.critic.normalizer, self.storage.critic_obs),
        )
        for normalizer, data in pairs:
            if not isinstance(normalizer, ObsNormalizer):
                continue
            x = data.reshape(-1, data.shape[-1]).double()
            count = torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)
            packed = self.dist.all_reduce_sum(torch.cat([count, x.sum(0), x.square().sum(0)]))
            n, d = packed[0], x.shape[-1]
            mean = packed[1 : 1 + d] / n
            var = (packed[1 + d :] / n - mean.square()).clamp(min=0)
            normalizer.update_from_moments(mean.float(), var.float(), float(n))

    def learn(
        self,
        iterations: int | None = None,
        time_budget_s: float | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> list[dict[str, float]]:
        """Train until ``iterations`` completed iterations in total (default: the config's).

        With ``time_budget_s``, also stop after the first iteration that ends past the budget
        and checkpoint it (``stopped_by_budget`` tells); a later ``--resume`` continues from there.
        ``stop_requested`` (e.g. set by SIGTERM) does the same after the iteration in progress.
        Checkpoints: every ``save_interval`` iterations, after ``save_minutes`` of wall time since
        the last one, and at the end.
        """
        target = self.cfg.iterations if iterations is None else iterations
        self.stopped_by_budget = False
        started = last_save = time.perf_counter()
        main = self.dist.is_main
        if main and self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config_yaml(self.cfg, self.run_dir / "config.yaml")
            self._log_segment(target, time_budget_s)
            if self.use_tensorboard and self.writer is None:
                from torch.utils.tensorboard import SummaryWriter  # slow import

                # On resume, TensorBoard hides events logged after the checkpoint (they are redone).
                self.writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=self.iteration or None)
        if self.obs is None:
            self.obs = {k: v.to(self.device) for k, v in self.env.reset().items()}
        bar = None
        if self.progress:
            bar = TrainingProgress(
                f"{self.cfg.algo} {self.cfg.task}", self.iteration, target, time_budget_s, file=self.progress_file
            )
        try:
            while self.iteration < target:
                t0 = time.perf_counter()
                self.model.eval()
                episodes, cost_rates = self.collect()
                t1 = time.perf_counter()
                self.model.train()
                try:
                    stats = self.algo.update(self.storage, self.iteration, self.generator)
                except NonFiniteLossError as e:
                    where = (
                        f"the last good checkpoint is {self.last_checkpoint}"
                        if self.last_checkpoint is not None
                        else "no checkpoint was written yet"
                    )
                    raise TrainingError(f"training diverged: {e}; {where} (nothing was written after it)") from None
                self.update_normalizers()
                t2 = time.perf_counter()
                record = self._record(episodes.reduced(self.dist), cost_rates, stats, t1 - t0, t2 - t1)
                self.iteration += 1
                if main:
                    self._log(record)
                now = time.perf_counter()
                # one decision for all ranks (a checkpoint is collective): any rank's clock or signal
                flags = torch.tensor(
                    [
                        float(time_budget_s is not None and now - started > time_budget_s),
                        float(self.cfg.save_minutes > 0 and now - last_save > 60.0 * self.cfg.save_minutes),
                        float(stop_requested is not None and stop_requested()),
                    ],
                    device=self.device,
                )
                out_of_time, save_due, stop = (bool(f > 0) for f in self.dist.all_reduce_sum(flags).tolist())
                out_of_time = out_of_time or stop
                if self.iteration % self.cfg.save_interval == 0 or self.iteration == target or out_of_time or save_due:
                    self.save()
                    last_save = time.perf_counter()
                if bar is not None:
                    figures = {
                        "reward": f"{record.get('mean_reward', float('nan')):.2f}",
                        "viol": f"{record.get('violations_per_episode', float('nan')):.2f}",
                    }
                    bar.update(self.iteration, time.perf_counter() - started, figures)
                if out_of_time and self.iteration < target:
                    self.stopped_by_budget = True
                    break
        finally:
            if bar is not None:
                bar.close()
            if self.writer is not None:
                self.writer.flush()
        return self.history

    def _log_segment(self, target: int, time_budget_s: float | None) -> None:
        """One line per start or resume in ``segments.jsonl``: where each stretch of the run ran,
        and its time budget (``aow-status`` tells from it when a running stretch ends)."""
        import platform

        record = {
            "iteration": self.iteration,
            "target": target,
            "device": str(self.device),
            "backend": self.cfg.backend,
            "num_envs": self.cfg.num_envs,
            "world_size": self.dist.world_size,
            "host": platform.node(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "time_budget_s": time_budget_s,
            "resumed_from": self.resumed_from,
            "notes": self.resume_notes,
        }
        assert self.run_dir is not None
        with open(self.run_dir / "segments.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    @torch.no_grad()
    def evaluate(self, num_steps: int, deterministic: bool = True) -> dict[str, float]:
        """Run the current policy for ``num_steps`` steps from fresh resets (the mean action when
        ``deterministic``); per-step reward and cost rates. Consumes environment steps only: it
        leaves the training state untouched except the environment, which it resets."""
        obs = self.env.reset()
        reward_sum = 0.0
        cost_sums = torch.zeros(len(self.env.cost_names), device=self.device)
        for _ in range(num_steps):
            obs_p = obs["policy"].to(self.device)
            if deterministic:
                actions = self.model.actor(obs_p)
            else:
                actions = self.algo.act(obs_p, obs["critic"].to(self.device), self.generator)["actions"]
            obs, rewards, costs, _dones, _infos = self.env.step(actions)
            reward_sum += float(rewards.float().mean())
            cost_sums += costs.to(self.device).float().mean(0)
        self.obs = None  # the next learn() call starts from a reset
        out = {"reward_per_step": reward_sum / num_steps}
        out.update({f"cost_rate/{n}": float(cost_sums[k] / num_steps) for k, n in enumerate(self.env.cost_names)})
        return out

    def _record(
        self,
        episodes: dict[str, float],
        cost_rates: dict[str, float],
        stats: dict[str, float],
        collect_s: float,
        update_s: float,
    ) -> dict[str, float]:
        record: dict[str, float] = {"iteration": self.iteration}
        if "return" in episodes:
            record["mean_reward"] = episodes.pop("return")
            record["mean_episode_length"] = episodes.pop("length")
        violations = [v for k, v in episodes.items() if k.startswith("episode/violations/")]
        if violations:
            record["violations_per_episode"] = float(sum(violations))
        record.update(episodes)
        record.update(cost_rates)
        record.update(stats)
        if self.episode_length:  # J_C and eps also in the command line's unit, cost per episode
            T, gamma = int(self.episode_length), self.cfg.ppo.gamma
            for g, eps in self.cost_limits.items():
                record[f"cost_limit_per_episode/{g}"] = episode_cost_from_cost_limit(eps, T, gamma)
                if f"cost_return/{g}" in stats:
                    record[f"cost_return_per_episode/{g}"] = episode_cost_from_cost_limit(
                        stats[f"cost_return/{g}"], T, gamma
                    )
        steps = self.cfg.num_envs * self.cfg.num_steps_per_env
        record.update(
            {"time/collection_s": collect_s, "time/update_s": update_s, "time/steps_per_s": steps / collect_s}
        )
        return record

    def _log(self, record: dict[str, float]) -> None:
        self.history.append(record)
        if self.run_dir is None:
            return
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            step = int(record["iteration"])
            for key, value in record.items():
                if key != "iteration" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(tensorboard_tag(key), value, step)


def tensorboard_tag(key: str) -> str:
    """Metric record key -> TensorBoard tag, grouped by section."""
    if key in ("mean_reward", "mean_episode_length", "violations_per_episode"):
        return f"Train/{key}"
    head, _, rest = key.partition("/")
    sections = {
        "episode": "Episode",
        "cost_rate": "Cost_per_step",
        "loss": "Loss",
        "time": "Perf",
        "cost_return": "Constraint/J_C",
        "cost_limit": "Constraint/eps",
        "cost_return_over_limit": "Constraint/J_C_over_eps",
        "constraint_gap": "Constraint/J_C_minus_eps",
        "cost_return_per_episode": "Constraint/J_C_per_episode",
        "cost_limit_per_episode": "Constraint/eps_per_episode",
        "cost_adv_mean": "Constraint/adv_mean",
        "cost_adv_std": "Constraint/adv_std",
        "adv_corr": "Constraint/adv_corr",
        "violation": "Constraint/violation",
        "violation_active": "Constraint/violation_active",
        "violation_offset": "Constraint/violation_offset",
        "violation_offset_raw": "Constraint/violation_offset_raw",
        "lambda": "Penalty/lambda",
        "nu": "Penalty/nu",
        "kappa_eff": "Penalty/kappa_eff",
        "grad_norm": "GradNorm",
        "sim": "Sim",
    }
    if head in sections and rest:
        return f"{sections[head]}/{rest}"
    if key in ("kappa", "penalty", "penalty_share"):
        return f"Penalty/{key}"
    if key in ("kl", "learning_rate", "action_std", "entropy_coef"):
        return f"Policy/{key}"
    return f"Algo/{key}"
