"""The runner's checkpoints and resume: what a checkpoint holds, and how a run continues from one,
on the same machine or another (:class:`RunnerCheckpoints`, a part of :class:`training.runner.Runner`).

Exact resume: a checkpoint also holds every rank's sampling-generator state, the environment's
``state_dict()`` when it has one, and the current observations. An environment whose state is
complete (attribute ``resume_exact``: the toy CMDP, the locomotion tasks on C MuJoCo) continues the
very same trajectory; other environments (the MuJoCo tasks on MuJoCo Warp save their generators
and curriculum but not the physics) restart their episodes on resume, while the model, optimizer,
normalizers, penalty weights and sampling generators continue exactly.

Resume on another machine: ``device``, ``backend``, ``num_envs`` and the checkpoint cadence
(training.config.PLACEMENT_FIELDS) may change on resume, so a run started on a GPU continues on a
CPU and back. The model, optimizer, normalizers, penalty state, iteration and terrain levels carry
over exactly; what cannot (a CUDA generator's state on a CPU, the episodes of another number of
environments) is derived afresh and written to ``segments.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aow_policy.fileio import atomic_write_text
from aow_policy.layout import ObservationLayout
from training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from training.config import PLACEMENT_FIELDS, TrainConfig
from training.distributed import DistContext
from training.networks import ActorCritic, convert_legacy_cost_critics
from training.run_files import read_jsonl
from training.scan_transfer import ScanTransferError, add_height_scan, needs_height_scan


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = dataclasses.asdict(x)
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two plain config dicts differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            keys += _changed_keys(old.get(k), new.get(k), f"{prefix}{k}.")
        return keys
    return [] if old == new else [prefix.rstrip(".")]


def same_task_config(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two configs build the same task: the same task name, and overrides that resolve to
    the same task config (an override may set what the task already has). Toy and Gymnasium
    tasks have no resolved config: equal overrides only."""
    if a.task != b.task:
        return False
    if a.env_overrides == b.env_overrides:
        return True
    from training.envs import TASKS, task_config  # MuJoCo and the tasks: only where the overrides differ

    if a.task not in TASKS:
        return False
    try:
        return task_config(a.task, **a.env_overrides) == task_config(b.task, **b.env_overrides)
    except (TypeError, ValueError):
        return False


def spread_terrain_levels(levels: torch.Tensor, num_envs: int) -> torch.Tensor:
    """The saved per-environment terrain levels handed out over ``num_envs`` environments in the
    same proportions: each level's share of the new environments is within one environment of
    its share of the saved ones, for more, fewer or a non-multiple number of environments.

    The saved environments are ranked by (level, index) and picked at evenly spaced ranks (each
    level value occupies a contiguous run of ranks, so it gets its share of the picks); the picks
    are then put back in the order of the saved environments, because an environment's terrain
    type (column) follows its index, and a sorted hand-out would give each column one level.
    """
    saved = len(levels)
    if saved == 0 or num_envs <= 0:
        raise ValueError(f"cannot spread {saved} saved terrain levels over {num_envs} environments")
    by_level = torch.sort(levels.cpu(), stable=True).indices  # ties keep the saved order
    ranks = (2 * torch.arange(num_envs) + 1) * saved // (2 * num_envs)  # the midpoint rank of each new env's share
    picked = torch.sort(by_level[ranks]).values
    return levels[picked.to(levels.device)]


class RunnerCheckpoints:
    """Checkpoint and resume methods of :class:`training.runner.Runner`, over the runner's state
    (the attributes below, set by ``Runner.__init__``); ``_robot_contract_hash`` is the runner's."""

    cfg: TrainConfig
    dist: DistContext
    env: Any
    model: ActorCritic
    algo: Any
    device: torch.device
    num_envs: int
    group_names: list[str]
    generator: torch.Generator
    iteration: int
    obs: dict[str, torch.Tensor] | None
    history: list[dict[str, float]]
    run_dir: Path | None
    last_checkpoint: Path | None
    resumed_from: dict[str, Any] | None
    resume_notes: list[str]
    _episode_return: torch.Tensor
    _episode_length: torch.Tensor
    _robot_contract_hash: Callable[[], str]  # the runner's: it knows the task names

    def _init_from(self, path: Path) -> None:
        """Networks and normalizers from another run's checkpoint (same task layout, or a blind
        task's where this one adds the height scan: training.scan_transfer). Its cost critics are
        taken where it has them for the same groups; otherwise they start fresh."""
        ckpt = load_checkpoint(path)
        state = dict(ckpt["model"])
        convert_legacy_cost_critics(state, "cost_critics.")
        source = {k: ObservationLayout.from_list(v, known_only=False) for k, v in ckpt["obs_layout"].items()}
        target = {k: self.env.obs_spec[k] for k in ("policy", "critic")}
        if needs_height_scan(source, target):
            # A blind policy starts a perceptive one: the same function at first (training.scan_transfer).
            try:
                state = add_height_scan(state, source, target, self.model)
            except ScanTransferError as e:
                raise CheckpointError(f"init_from {path}: {e}") from None
        own = self.model.state_dict()
        cost_keys = {k for k in own if k.startswith("cost_critics.")}
        theirs_cost = {k for k in state if k.startswith("cost_critics.")}
        same_groups = list(ckpt.get("cost_groups") or {}) == self.group_names
        if not (cost_keys and theirs_cost == cost_keys and same_groups):
            state = {k: v for k, v in state.items() if not k.startswith("cost_critics.")}
            state.update({k: own[k] for k in cost_keys})
        # A symmetric actor started from a plain one keeps its own mirror (the weights fit as they are).
        state.update({k: own[k] for k in own if k.startswith("actor.mirror_") and k not in state})
        try:
            self.model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise CheckpointError(f"init_from {path}: its networks do not fit this task ({e})") from None

    def _rank_state(self) -> dict[str, Any]:
        env_state = self.env.state_dict() if hasattr(self.env, "state_dict") else None
        # The current observations continue a run only with the simulation they came from; an env
        # that does not save its simulation restarts its episodes on resume (and a rough-terrain
        # run's observations are 8 MB per 4,096 envs), so they are kept only where it does.
        exact = getattr(self.env, "resume_exact", False)
        return {
            "generator": self.generator.get_state().cpu(),
            "env": env_state,
            "obs": {k: v.detach().cpu().clone() for k, v in self.obs.items()} if exact else {},
            "episode_return": self._episode_return.cpu().clone(),
            "episode_length": self._episode_length.cpu().clone(),
        }

    def checkpoint_payload(self) -> dict[str, Any]:
        ranks = self.dist.gather_objects(self._rank_state())
        env = self.env
        return {
            "iteration": self.iteration,
            "config": self.cfg.to_dict(),
            "obs_layout": {k: env.obs_spec[k].to_list() for k in ("policy", "critic")},
            "action_layout": _plain(env.action_layout),
            "num_actions": int(env.num_actions),
            "cost_groups": {k: list(v) for k, v in env.cost_groups.items()},
            "cost_names": list(env.cost_names),
            "model": self.model.state_dict(),
            "optimizer": self.algo.optimizer.state_dict(),
            "algo_state": self.algo.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "generators": [r["generator"] for r in ranks]},
            "robot_contract_hash": self._robot_contract_hash(),
            "env_config": _plain(getattr(env, "cfg", None)),
            "runner_state": {"world_size": self.dist.world_size, "ranks": ranks},
        }

    def save(self) -> Path | None:
        payload = self.checkpoint_payload()  # collective: every rank takes part
        if not self.dist.is_main or self.run_dir is None:
            return None
        path = save_checkpoint(self.run_dir / f"model_{self.iteration}.pt", payload)
        self.last_checkpoint = path
        return path

    def _resume(self) -> None:
        path = latest_checkpoint(self.run_dir)
        ckpt = load_checkpoint(path)
        stored = TrainConfig.from_dict(ckpt["config"])
        mine = self.cfg.to_dict()
        theirs = stored.to_dict()
        for name in PLACEMENT_FIELDS:  # where the run executes may change; what it learns may not
            mine.pop(name, None)
            theirs.pop(name, None)
        if mine != theirs:
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise CheckpointError(
                f"{path}: the run's config differs from this one in {diff}; resume uses the stored config"
            )
        if ckpt["algo_state"].get("name") != self.cfg.algo:
            raise CheckpointError(f"{path}: checkpoint is for algorithm {ckpt['algo_state'].get('name')!r}")
        try:
            self.model.load_state_dict(ckpt["model"])
        except RuntimeError as e:
            raise CheckpointError(f"{path}: model does not fit this task ({e})") from None
        self.resumed_from = self._placement(stored)
        self.resume_notes = []
        self._continue_from(ckpt, stored)
        self.last_checkpoint = path
        self._trim_metrics()

    def _continue_from(self, ckpt: dict[str, Any], stored: TrainConfig, keep_simulation: bool = True) -> None:
        """Everything of a checkpoint but its networks (loaded before the ranks' broadcast): the
        optimizer, the algorithm's state, the generators, the iteration count and each rank's
        environment and episodes (see :meth:`_restore_rank_state`); shared by resume and fork."""
        self.algo.load_optimizer_state(ckpt["optimizer"])
        self.algo.load_state_dict(ckpt["algo_state"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        self.iteration = int(ckpt["iteration"])
        runner_state = ckpt.get("runner_state") or {}
        ranks = runner_state.get("ranks") or []
        if runner_state.get("world_size") == self.dist.world_size and len(ranks) == self.dist.world_size:
            self._restore_rank_state(ranks[self.dist.rank], stored, keep_simulation=keep_simulation)
        else:
            self.resume_notes.append(
                f"{runner_state.get('world_size')} process(es) wrote it, {self.dist.world_size} continue: sampling "
                "generators start fresh"
            )

    def _load_fork_model(self, path: Path) -> dict[str, Any]:
        """The networks of the checkpoint a fork continues (strict: the same task and networks);
        returns the checkpoint for :meth:`_fork`."""
        ckpt = load_checkpoint(path)
        stored = TrainConfig.from_dict(ckpt["config"])
        if stored.task != self.cfg.task:
            raise CheckpointError(
                f"fork_from {path}: a {stored.task!r} run cannot continue as {self.cfg.task!r} "
                "(--init-from starts a new task from its weights)"
            )
        if ckpt["algo_state"].get("name") != self.cfg.algo:
            raise CheckpointError(
                f"fork_from {path}: a {ckpt['algo_state'].get('name')!r} run cannot continue as {self.cfg.algo!r} "
                "(--init-from starts another algorithm from its weights)"
            )
        try:
            self.model.load_state_dict(ckpt["model"])
        except RuntimeError as e:
            raise CheckpointError(
                f"fork_from {path}: its networks do not fit this config ({e}); --init-from takes what fits"
            ) from None
        return ckpt

    def _fork(self, path: Path, ckpt: dict[str, Any]) -> None:
        """Continue ``ckpt`` (loaded by :meth:`_load_fork_model`) under this run's config: the
        optimizer, the algorithm's state, the generators, the iteration count and the environment's
        state as a resume restores them, except that a changed task config (``env_overrides``)
        restarts the episodes (the curriculum's levels carry over), since the saved simulation
        belongs to the old one. What differs from the parent's config is listed in segments.jsonl."""
        stored = TrainConfig.from_dict(ckpt["config"])
        mine, theirs = self.cfg.to_dict(), stored.to_dict()
        for name in (*PLACEMENT_FIELDS, "fork_from", "init_from"):
            mine.pop(name, None)
            theirs.pop(name, None)
        changed = sorted(_changed_keys(theirs, mine))
        same_task = same_task_config(stored, self.cfg)
        if same_task and stored.env_overrides != self.cfg.env_overrides:
            # An override that sets what the task already has changes nothing: say so, where a
            # "changed" would let its author believe in a lever that was never pulled.
            unchanged = [k for k in changed if k.startswith("env_overrides.")]
            changed = [k for k in changed if k not in unchanged]
            changed.append(f"{', '.join(unchanged)} (already the parent's value: the task is unchanged)")
        self.resumed_from = self._placement(stored)
        what = ", ".join(changed) or "nothing"
        self.resume_notes = [f"forked from {path} at iteration {int(ckpt['iteration'])}; changed: {what}"]
        self._continue_from(ckpt, stored, keep_simulation=same_task)

    def _placement(self, cfg: TrainConfig) -> dict[str, Any]:
        return {"device": cfg.device, "backend": cfg.backend, "num_envs": cfg.num_envs}

    def _restore_rank_state(self, state: dict[str, Any], stored: TrainConfig, keep_simulation: bool = True) -> None:
        """This rank's generators, environment state and current episodes from the checkpoint.

        Same device type, backend and number of environments: all of it (exact continuation).
        Otherwise what carries over is restored and the rest is derived afresh, deterministically:
        a CPU generator's state cannot drive a CUDA generator (different algorithms), so on a
        change of device type both generators are reseeded from (seed, iteration, rank); with
        another number of environments the saved observations and episodes do not fit, and the
        terrain levels are handed out in the same proportions over the new environments.
        """
        same_device = torch.device(stored.device).type == self.device.type
        same_envs = stored.num_envs == self.cfg.num_envs
        same_backend = stored.backend == self.cfg.backend
        if same_device:
            self.generator.set_state(state["generator"])
        else:
            self.generator.manual_seed(self._reseed(0))
            self.resume_notes.append(
                f"device {stored.device} -> {self.cfg.device}: sampling generators reseeded from (seed, iteration)"
            )
        levels_spread = False
        env_state = state.get("env")
        full_state = getattr(self.env, "resume_exact", False)  # its state_dict holds the whole simulation
        holds_whole = getattr(self.env, "holds_whole_state", None)
        if full_state and holds_whole is not None and not holds_whole(env_state):
            # Written before this env saved its whole simulation (or by a backend that cannot):
            # its observations do not belong to any simulation this env can restore.
            full_state = False
            self.resume_notes.append("the checkpoint holds no simulation state: episodes restart")
        if full_state and not keep_simulation:
            self.resume_notes.append("the task's config changed: episodes restart")
        if not (full_state and same_device and same_envs and same_backend and keep_simulation):
            # A whole simulation state does not move to another device, backend or size, nor into an
            # env that cannot hold one (C MuJoCo's checkpoint resumed on MuJoCo Warp): fresh episodes,
            # with the part that does carry over (generator, counters, terrain levels) where the env says which.
            portable = getattr(self.env, "portable_state", None)
            env_state = portable(env_state) if portable is not None and env_state is not None else None
            full_state = False
        if env_state is not None and hasattr(self.env, "load_state_dict"):
            env_state = dict(env_state)
            if not same_device:
                env_state.pop("generator", None)
                env_state["seed"] = self._reseed(1)
            levels = env_state.get("terrain_levels")
            if levels is not None and len(levels) != self.num_envs:
                env_state["terrain_levels"] = spread_terrain_levels(torch.as_tensor(levels), self.num_envs)
                levels_spread = True
            self.env.load_state_dict(env_state)
            if full_state:
                self.obs = {k: v.to(self.device) for k, v in state["obs"].items()}
                self._episode_return = state["episode_return"].to(self.device)
                self._episode_length = state["episode_length"].to(self.device)
        if levels_spread:
            what = "terrain levels spread over the new ones"
            self.resume_notes.append(f"{stored.num_envs} -> {self.cfg.num_envs} environments: {what}")
        if not same_backend:
            self.resume_notes.append(f"backend {stored.backend} -> {self.cfg.backend}: episodes restart")
        elif not same_envs and not levels_spread:
            self.resume_notes.append(f"{stored.num_envs} -> {self.cfg.num_envs} environments: episodes restart")

    def _reseed(self, stream: int) -> int:
        return (self.cfg.seed * 1_000_003 + 7_919 * self.iteration + 104_729 * self.dist.rank + stream) % (2**63)

    def _trim_metrics(self) -> None:
        """Drop metric records past the resumed iteration (written after the last checkpoint),
        and any line that is not JSON (a kill mid-write), saying which in the resume notes."""
        if not self.dist.is_main or self.run_dir is None:
            return
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return
        bad: list[int] = []
        records = read_jsonl(path, on_bad_line=lambda number, _reason: bad.append(number))
        kept = [r for r in records if r.get("iteration", math.inf) < self.iteration]
        if bad:
            self.resume_notes.append(f"metrics.jsonl line(s) {bad} not JSON (cut off mid-write): dropped")
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
        self.history = kept
