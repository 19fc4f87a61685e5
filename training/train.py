"""``aow-train`` / ``python -m training.train``: train a policy with one of the seven algorithms.

Examples::

    aow-train --task aow_flat --algo np3o --num-envs 4096 --iterations 1500 --seed 0 --run-dir runs/np3o
    aow-train --task toy_speed_limit --algo ppo_lag --num-envs 64 --iterations 100 --run-dir runs/toy
    aow-train --task gym:AoWSafetyHopperVelocity-v1 --algo np3o --cost-limit 25 --num-envs 32 --steps-per-env 64
    aow-train --resume runs/np3o --iterations 3000          # continue to 3000 iterations in total
    aow-train --resume runs/rough --device cpu --backend mujoco --num-envs 1024 --max-minutes 60  # a GPU run, on a CPU
    aow-train --task aow_flat --algo ppo --env-override rewards.constraint_rewards=true   # PPO baseline
    aow-train --config policies/aow_flat_np3o/config.yaml --init-from policies/aow_flat_np3o/model_250.pt \
        --set algo_params.kappa_init=1 --set algo_params.kappa_max=1 --iterations 150  # fine-tune
    aow-train --config my.yaml --set ppo.learning_rate=3e-4 --set algo_params.kappa_max=2
    aow-train --fork runs/rough/model_232.pt --set ppo.entropy_coef=0.001 --run-dir runs/rough_lowent  # a branch
    torchrun --nproc-per-node 2 -m training.train --task toy_speed_limit --algo np3o --num-envs 128 ...

Exit status: 0 done, 1 training error (divergence, bad checkpoint), 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from training.algorithms import ALGORITHMS
from training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from training.config import (
    PLACEMENT_FIELDS,
    ConfigError,
    TrainConfig,
    add_env_override,
    apply_override,
    load_config_yaml,
)
from training.distributed import init_distributed, shutdown_distributed

# CLI flag -> config field (flags default to None so that "given" can be told from "default").
FLAG_FIELDS = {
    "task": "task",
    "algo": "algo",
    "num_envs": "num_envs",
    "iterations": "iterations",
    "seed": "seed",
    "device": "device",
    "backend": "backend",
    "steps_per_env": "num_steps_per_env",
    "save_interval": "save_interval",
    "save_minutes": "save_minutes",
    "init_from": "init_from",
    "cost_limit": "episode_cost_limit",
}

PLACEMENT_FLAGS = [f"--{flag.replace('_', '-')}" for flag, field in FLAG_FIELDS.items() if field in PLACEMENT_FIELDS]

COST_LIMIT_HELP = (
    "constraint limit of every cost group, as the expected cost PER EPISODE (the undiscounted sum of "
    "the costs over one full episode of the task, T = max_episode_length steps; Safety-Gymnasium's and "
    "OmniSafe's cost_limit, e.g. 25 per 1000-step episode). Every algorithm gets the same internal eps "
    "= COST / (T (1 - gamma)), the discounted cost return J_C of a policy spending COST per episode at a "
    "constant rate (25 per 1000 steps, gamma 0.99: eps = 2.5). Default: each algorithm's own "
    "algo_params.cost_limit, already in that internal unit (the paper's Table III values). With a "
    "positive limit N-P3O and P3O raise kappa after every rollout that breaks it (default kappa_adapt "
    "0.05, the exact-penalty update; never lowered, capped at algo_params.kappa_adapt_max), so that they "
    "hold it when the reward pays for the cost; algo_params.kappa_adapt=0 restores the paper's kappa "
    "schedule, and algo_params.kappa_relax_margin=0.2 (opt-in) also lowers kappa after every rollout 20 %% "
    "inside the limit (more return, the cost nearer the limit and over it more often). A limit of 0 (the "
    "paper's robot setting) keeps the paper's schedule"
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aow-train",
        description="Train a locomotion policy with constrained RL (N-P3O and six baselines).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--task", help="task name (aow_flat, ..., toy_speed_limit, or gym:<gymnasium id>)")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), help="algorithm (default np3o)")
    p.add_argument("--num-envs", type=int, help="environments over all processes (default 4096)")
    p.add_argument("--iterations", type=int, help="total learning iterations of the run (default 1500)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--device", help="cpu or cuda (default cpu)")
    p.add_argument("--backend", help="simulator backend of the task (default mujoco)")
    p.add_argument("--steps-per-env", type=int, help="rollout length per environment (default 24)")
    p.add_argument("--save-interval", type=int, help="checkpoint every N iterations (default 50)")
    p.add_argument(
        "--save-minutes",
        type=float,
        help="also checkpoint when this many minutes have passed since the last checkpoint (default 4; 0: off)",
    )
    p.add_argument(
        "--run-dir", type=Path, help="where checkpoints, config and logs go (default runs/<task>_<algo>_...)"
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint, with its stored config; only --iterations, "
        "--device, --backend, --num-envs, --save-interval and --save-minutes may change (e.g. a GPU run "
        "continued on a CPU); segments.jsonl in RUN_DIR lists where each stretch ran",
    )
    p.add_argument(
        "--init-from",
        metavar="CHECKPOINT",
        help="start the networks from this checkpoint's weights (a new run: iteration 0, fresh optimizer)",
    )
    p.add_argument(
        "--fork",
        type=Path,
        metavar="CHECKPOINT",
        help="continue this checkpoint (a file, or a run directory's latest) as a new run in --run-dir, with "
        "its config changed by --set/--env-override: networks, optimizer, algorithm state, iteration count "
        "and terrain levels carry over (the simulation too unless the task's config changed); a branch that "
        "differs from its parent only in what you change",
    )
    p.add_argument(
        "--cost-limit",
        type=float,
        metavar="COST_PER_EPISODE",
        help=COST_LIMIT_HELP,
    )
    p.add_argument("--config", type=Path, help="YAML config (a TrainConfig; flags and --set override it)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. ppo.learning_rate=3e-4 or algo_params.kappa_max=2 (repeatable)",
    )
    p.add_argument(
        "--env-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the task's config, e.g. rewards.constraint_rewards=true (repeatable)",
    )
    p.add_argument(
        "--max-minutes",
        type=float,
        help="wall-clock budget: stop (and checkpoint) after the iteration that ends past it; --resume continues",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-tensorboard", action="store_true", help="do not write TensorBoard event files")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    data = load_config_yaml(args.config).to_dict() if args.config else TrainConfig().to_dict()
    if args.algo and args.algo != data.get("algo"):
        data["algo"] = args.algo
        data.pop("algo_params", None)  # the new algorithm's defaults
    apply_cli_changes(data, args)
    return TrainConfig.from_dict(data)


def apply_cli_changes(data: dict, args: argparse.Namespace) -> None:
    """The flags given, then --set, then --env-override (dotted paths kept), onto a config dict."""
    for flag, field in FLAG_FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            data[field] = value
    for assignment in args.set:
        apply_override(data, assignment)
    for assignment in args.env_override:
        add_env_override(data.setdefault("env_overrides", {}), assignment)


def fork_config(args: argparse.Namespace) -> TrainConfig:
    """The parent checkpoint's config with --set/--env-override and the placement flags applied."""
    path = latest_checkpoint(args.fork) if args.fork.is_dir() else args.fork
    data = dict(load_checkpoint(path)["config"])
    conflicts = [
        f"--{flag.replace('_', '-')}"
        for flag, field in FLAG_FIELDS.items()
        if field in ("task", "algo", "init_from") and getattr(args, flag) is not None
    ]
    if args.config or args.resume:
        conflicts.append("--config/--resume")
    if conflicts:
        raise ConfigError(
            f"{', '.join(conflicts)}: --fork continues {path} with its own task, algorithm and networks "
            "(--init-from starts a new run from its weights instead)"
        )
    if args.run_dir is None:
        raise ConfigError("--fork needs --run-dir: the branch is a new run beside its parent")
    apply_cli_changes(data, args)
    data["init_from"], data["fork_from"] = None, str(path)
    return TrainConfig.from_dict(data)


def resume_config(args: argparse.Namespace) -> TrainConfig:
    """The stored config of the run; only where it runs (PLACEMENT_FIELDS) may change on resume."""
    ckpt = load_checkpoint(latest_checkpoint(args.resume))
    data = dict(ckpt["config"])
    conflicts = [
        f"--{flag.replace('_', '-')}"
        for flag, field in FLAG_FIELDS.items()
        if field not in PLACEMENT_FIELDS and getattr(args, flag) is not None
    ]
    if args.config or args.set or args.env_override:
        conflicts.append("--config/--set/--env-override")
    if args.run_dir is not None and args.run_dir.resolve() != args.resume.resolve():
        conflicts.append("--run-dir")
    if conflicts:
        raise ConfigError(
            f"{', '.join(conflicts)}: cannot change a resumed run (it continues with the config stored in "
            f"{args.resume}); only {', '.join(PLACEMENT_FLAGS)} may be given"
        )
    for flag, field in FLAG_FIELDS.items():
        if field in PLACEMENT_FIELDS and getattr(args, flag) is not None:
            data[field] = getattr(args, flag)
    return TrainConfig.from_dict(data)


class StopRequest:
    """SIGTERM (systemd, docker, ``timeout``, a lent machine being taken back) or a first Ctrl-C:
    finish the iteration in progress, checkpoint it and exit; a second Ctrl-C stops at once."""

    def __init__(self, program: str = "aow-train", on_stop: Callable[[], None] | None = None) -> None:
        self.program = program
        self.on_stop = on_stop  # called once, at the first signal (aow-compare: tell its workers)
        self.signal_name: str | None = None
        self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def __enter__(self) -> StopRequest:
        for sig in self._previous:
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        first = self.signal_name is None
        self.signal_name = self.signal_name or name
        print(
            f"\n{self.program}: {name}: stopping after this iteration (checkpointed; Ctrl-C again stops now)",
            file=sys.stderr,
        )
        if first and self.on_stop is not None:
            self.on_stop()

    def __call__(self) -> bool:
        return self.signal_name is not None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.fork is not None:
            cfg = fork_config(args)
        else:
            cfg = resume_config(args) if args.resume else config_from_args(args)
        cfg.validate()
    except (ConfigError, CheckpointError) as e:
        print(f"aow-train: error: {e}", file=sys.stderr)
        return 2
    run_dir = (
        args.resume
        or args.run_dir
        or Path("runs") / f"{cfg.task}_{cfg.algo}_s{cfg.seed}_{time.strftime('%Y%m%d-%H%M%S')}"
    )

    from training.runner import Runner, TrainingError  # heavy imports after the argument checks

    dist = init_distributed(cfg.device)
    try:
        runner = Runner(
            cfg,
            run_dir=run_dir,
            dist=dist,
            resume=args.resume is not None,
            progress=not args.no_progress,
            tensorboard=not args.no_tensorboard,
        )
        if runner.iteration >= cfg.iterations:
            print(f"aow-train: {run_dir} already has {runner.iteration} iterations (target {cfg.iterations})")
            return 0
        if args.max_minutes is not None and not args.max_minutes > 0:
            raise ConfigError(f"--max-minutes: must be positive, got {args.max_minutes}")
        for note in runner.resume_notes:
            print(f"aow-train: resumed on {runner.device} ({note})", file=sys.stderr)
        with StopRequest() as stop:
            runner.learn(
                time_budget_s=None if args.max_minutes is None else 60.0 * args.max_minutes, stop_requested=stop
            )
    except (ConfigError, CheckpointError) as e:
        print(f"aow-train: error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"aow-train: error: {e}", file=sys.stderr)
        return 1
    finally:
        shutdown_distributed(dist)
    if dist.is_main:
        if stop.signal_name is not None and runner.stopped_by_budget:
            print(
                f"aow-train: stopped by {stop.signal_name} after {runner.iteration} of {cfg.iterations} iterations; "
                f"checkpoint {runner.last_checkpoint} (--resume {run_dir} continues)"
            )
        elif runner.stopped_by_budget:
            print(
                f"aow-train: time budget of {args.max_minutes:g} min reached after {runner.iteration} of "
                f"{cfg.iterations} iterations; checkpoints in {run_dir} (--resume {run_dir} continues)"
            )
        else:
            print(f"aow-train: {cfg.iterations} iterations done; checkpoints in {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
