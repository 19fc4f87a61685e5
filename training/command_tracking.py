"""``python -m training.command_tracking RUN_OR_CHECKPOINT``: does a trained policy go where it is sent?

Loads a checkpoint's deterministic policy (the mean action, its normalizer included) and runs it
in the task it was trained on, for any robot the toolkit trains (the legs-only ANYmal C too, which
sim-to-sim cannot run: its contract is the wheeled robot's). Each command of the list is held
for ``--seconds`` on ``--robots`` robots at once, with pushes, observation noise and command
resampling off and the ground friction fixed (``--friction``, default 1.0, the deployment's
nominal); the base-frame velocities are averaged over the last half of the hold. Reported per
command: mean vx, vy, yaw rate, the settled tracking errors, robots fallen (terminated), the
share of leg joints' steps above the joint-speed limit, the share of (wheel or foot, step)
off the ground (a few % for a robot that only rolls: rolling wheels' contact flickers; about
half for a trot), the fastest leg joint (rad/s), and robots "tripped": a leg joint past the
deployment controller's plausibility bound (2 x the actuator limit), where the node on the
robot stops the policy and damps (sim2sim shows it as a fall).

``--reversals`` holds instead pairs of opposite commands, each for ``--seconds``, switched at
once (a joystick flicked from one side to the other: sim2sim's full-range sequence does this, and
a policy that tracks each command alone can still fall at the switch); ``--sequence`` holds any
commands in turn, each for ``--seconds``. Each robot switches at another moment of its gait
(spread over 1 s); falls count over the whole test, the errors are the last command's.

This answers issue 23's question "does it walk forward, sideways and turn?" on the training
simulator in a minute; the sim-to-sim evaluation (``python -m sim2sim.evaluate``) remains the
bar for the wheeled policies.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from aow_policy.controller_config import ControllerConfig
from aow_policy.layout import ObservationLayout
from training.checkpoint import latest_checkpoint, load_checkpoint
from training.networks import Actor, NetworkConfig

# (name, vx m/s, vy m/s, yaw rate rad/s): the checks (forward, sideways, turning in
# place) and the paper's experiment B (sideways 1.0 m/s).
DEFAULT_COMMANDS: tuple[tuple[str, float, float, float], ...] = (
    ("forward 1.0", 1.0, 0.0, 0.0),
    ("left 0.5", 0.0, 0.5, 0.0),
    ("right 0.5", 0.0, -0.5, 0.0),
    ("left 1.0", 0.0, 1.0, 0.0),
    ("right 1.0", 0.0, -1.0, 0.0),
    ("turn left 1.0", 0.0, 0.0, 1.0),
    ("turn right 1.0", 0.0, 0.0, -1.0),
    ("backward 0.5", -0.5, 0.0, 0.0),
    ("stand", 0.0, 0.0, 0.0),
)


Velocity = tuple[float, float, float]
# (name, first command, second command), each (vx, vy, yaw rate): the sudden reversals of
# sim2sim's full-range sequence, and the same the other way round.
DEFAULT_REVERSALS: tuple[tuple[str, Velocity, Velocity], ...] = (
    ("left->right 1.0", (0.0, 1.0, 0.0), (0.0, -1.0, 0.0)),
    ("right->left 1.0", (0.0, -1.0, 0.0), (0.0, 1.0, 0.0)),
    ("fwd 2.0->back 1.0", (2.0, 0.0, 0.0), (-1.0, 0.0, 0.0)),
    ("back 1.0->fwd 1.0", (-1.0, 0.0, 0.0), (1.0, 0.0, 0.0)),
    ("turn l->r 1.5", (0.0, 0.0, 1.5), (0.0, 0.0, -1.5)),
    ("turn r->l 1.5", (0.0, 0.0, -1.5), (0.0, 0.0, 1.5)),
)

SWITCH_SPREAD_S = 1.0  # a switch's moments spread over about a gait cycle and more
# A test: (name, vx, vy, yaw rate) held alone, or (name, first, second, ...): commands held in turn.
Test = tuple[str, float, float, float] | tuple[Any, ...]


def _phases(test: Test) -> tuple[str, list[Velocity]]:
    name, *rest = test
    if all(isinstance(v, int | float) for v in rest):
        vx, vy, wz = rest
        return str(name), [(float(vx), float(vy), float(wz))]
    return str(name), [(float(vx), float(vy), float(wz)) for vx, vy, wz in rest]


@dataclass
class TrackingResult:
    name: str
    command: tuple[float, float, float]  # the command scored (a reversal's second)
    mean_velocity: tuple[float, float, float]  # vx, vy, yaw rate, over the settled window
    error: tuple[float, float, float]  # |command - mean velocity| per component, mean over robots
    fallen: int  # robots whose episode terminated during the hold
    joint_speed_violation_share: float  # share of (robot, step) with a leg joint over the limit
    air_share: float = 0.0  # share of (robot, wheel or foot, step) off the ground: does it step?
    peak_joint_speed: float = 0.0  # rad/s, fastest leg joint of any robot at any policy step of the test
    # Robots with a leg joint past the deployment controller's plausibility bound (its
    # joint_velocity_factor x the actuator limit) at some policy step: on the robot the node
    # would have stopped the policy there (DAMPING), whatever happened in simulation.
    tripped: int = 0
    reversed_from: tuple[float, float, float] | None = None  # the command before the scored one


def load_actor(path: str | Path) -> tuple[torch.nn.Module, dict[str, Any], int]:
    """(deterministic actor in eval mode, the checkpoint's run config, iteration)."""
    path = Path(path)
    if path.is_dir():
        path = latest_checkpoint(path)
    return actor_from_checkpoint(load_checkpoint(path))


def actor_from_checkpoint(data: dict[str, Any]) -> tuple[torch.nn.Module, dict[str, Any], int]:
    """:func:`load_actor` on a checkpoint already loaded (its other parts read by the caller)."""
    config = data["config"]
    net = NetworkConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.get("network", {}).items()})
    layouts = data["obs_layout"]
    actor = Actor(ObservationLayout.from_list(layouts["policy"]), data["num_actions"], net)
    actor.load_state_dict({k.removeprefix("actor."): v for k, v in data["model"].items() if k.startswith("actor.")})
    return actor.eval(), config, int(data["iteration"])


def evaluate(
    source: str | Path,
    commands: Sequence[Test] = DEFAULT_COMMANDS,
    robots: int = 32,
    seconds: float = 6.0,
    friction: float = 1.0,
    seed: int = 1,
    braked_wheels: bool = False,
) -> tuple[list[TrackingResult], dict[str, Any]]:
    """Holds each command on ``robots`` robots for ``seconds`` (a reversal's two commands for
    ``seconds`` each); returns the results and run info. The wheels roll freely (the deployment's
    robot) unless ``braked_wheels``: then every robot's wheels are held at zero speed, as the
    training's braked share, to see whether it can walk."""
    from training.envs import make_env

    actor, config, iteration = load_actor(source)
    overrides = dict(config.get("env_overrides") or {})
    overrides.update(
        {
            "domain_rand.push_robots": False,
            "domain_rand.observation_noise": False,
            "domain_rand.friction": (friction, friction),
            "domain_rand.added_base_mass": None,
            "domain_rand.motor_strength": None,
            "domain_rand.braked_wheels_share": 1.0 if braked_wheels else 0.0,
            "commands.resampling_time": 1.0e6,
            "commands.heading_command": False,
            "init.random_episode_start": False,
            "init.base_vel_range": 0.0,
            "init.joint_pos_scale": (1.0, 1.0),
        }
    )
    env = make_env(config["task"], robots, seed=seed, **overrides)
    steps = round(seconds / env.dt)
    settle = steps // 2
    results = []
    try:
        speed_limits = env.speed_limits[env.leg_ids]
        trip_speed = ControllerConfig().joint_velocity_factor * env.actuator_speed_limits[env.leg_ids]
        for test in commands:
            name, phases = _phases(test)
            vx, vy, wz = phases[-1]
            obs = env.reset()
            fallen = torch.zeros(robots, dtype=torch.bool)
            sums = torch.zeros(robots, 3)
            over = 0
            airborne = 0.0
            peak = 0.0
            tripped = torch.zeros(robots, dtype=torch.bool)
            # Robot i switches SWITCH_SPREAD_S * i / robots later than robot 0: each switch meets
            # each robot at another moment of its gait (one moment can be lucky).
            spread = round(SWITCH_SPREAD_S / env.dt) if len(phases) > 1 else 0
            offset = (torch.arange(robots) * spread) // robots
            total = steps * len(phases) + spread
            start = total - steps  # the scored command's window is this one's last half
            table = torch.tensor(phases)
            for t in range(total):
                phase = ((t - offset).clamp(min=0) // steps).clamp(max=len(phases) - 1)
                command = table[phase]
                env.commands[:, :3] = command
                obs["policy"][:, env.obs_spec["policy"].term("velocity_commands").slice] = (
                    command * env.cfg.observations.scales["velocity_commands"]
                )
                with torch.no_grad():
                    actions = actor(obs["policy"])
                obs, _, _, dones, infos = env.step(actions)
                # A fallen robot is reset by the environment and stands up again: count it once.
                fallen |= dones & ~infos["time_outs"]
                s = env.sim.state()
                leg_speed = s.joint_vel[:, env.leg_ids].abs()
                peak = max(peak, float(leg_speed.max()))
                tripped |= (leg_speed > trip_speed).any(-1)
                if t >= start + settle:
                    sums += torch.stack([s.base_lin_vel[:, 0], s.base_lin_vel[:, 1], s.base_ang_vel[:, 2]], -1)
                    over += int((leg_speed > speed_limits).any(-1).sum())
                    if s.foot_contacts is not None:
                        airborne += float((s.foot_contacts <= 0).float().mean())
            mean = sums / (steps - settle)
            standing = ~fallen
            rows = mean[standing] if standing.any() else mean
            cmd = torch.tensor([vx, vy, wz])
            results.append(
                TrackingResult(
                    name=name,
                    command=(vx, vy, wz),
                    mean_velocity=tuple(round(float(v), 3) for v in rows.mean(0)),
                    error=tuple(round(float(v), 3) for v in (rows - cmd).abs().mean(0)),
                    fallen=int(fallen.sum()),
                    joint_speed_violation_share=round(over / (robots * (steps - settle)), 4),
                    air_share=round(airborne / (steps - settle), 4),
                    reversed_from=phases[-2] if len(phases) > 1 else None,
                    peak_joint_speed=round(peak, 2),
                    tripped=int(tripped.sum()),
                )
            )
    finally:
        env.close()
    info = {"source": str(source), "task": config["task"], "algo": config.get("algo"), "iteration": iteration}
    info.update({"robots": robots, "seconds": seconds, "friction": friction, "braked_wheels": braked_wheels})
    return results, info


def _parse_command(text: str) -> tuple[str, float, float, float]:
    try:
        vx, vy, wz = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected VX,VY,YAW_RATE (three numbers), got {text!r}") from None
    return (f"({vx:g}, {vy:g}, {wz:g})", vx, vy, wz)


def _parse_sequence(text: str) -> tuple[Any, ...]:
    commands = [_parse_command(part) for part in text.split()]
    if len(commands) < 2:
        raise argparse.ArgumentTypeError(f"expected two or more VX,VY,YAW_RATE separated by spaces, got {text!r}")
    return (" -> ".join(c[0] for c in commands), *(c[1:] for c in commands))


def format_table(results: Sequence[TrackingResult], info: dict[str, Any]) -> str:
    width = max([14] + [len(r.name) for r in results])
    lines = [
        f"{info['task']} {info['algo']} iteration {info['iteration']}: {info['robots']} robots, "
        f"{info['seconds']:g} s per command, friction {info['friction']:g}"
        + (", wheels braked" if info.get("braked_wheels") else ""),
        f"{'command':<{width}} {'vx':>6} {'vy':>6} {'yaw':>6}   {'err vx':>6} {'err vy':>6} {'err yaw':>7} "
        f"{'fallen':>6} {'speed viol.':>11} {'feet up':>7} {'peak q.':>7} {'tripped':>7}",
    ]
    for r in results:
        (vx, vy, wz), (ex, ey, ew) = r.mean_velocity, r.error
        lines.append(
            f"{r.name:<{width}} {vx:6.2f} {vy:6.2f} {wz:6.2f}   {ex:6.2f} {ey:6.2f} {ew:7.2f} "
            f"{r.fallen:6d} {r.joint_speed_violation_share:11.1%} {r.air_share:7.1%} {r.peak_joint_speed:7.1f} "
            f"{r.tripped:7d}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m training.command_tracking",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="checkpoint (model_<it>.pt) or run directory (its latest checkpoint)")
    p.add_argument(
        "--command",
        action="append",
        type=_parse_command,
        metavar="VX,VY,YAW_RATE",
        help="a command to hold (repeatable; default: forward 1, sideways 0.5 and 1 to each side, turn 1 each way, "
        "backward 0.5, stand); a negative first number needs --command=-1,0,0",
    )
    p.add_argument(
        "--reversals",
        action="store_true",
        help="hold pairs of opposite commands switched at once (left 1 -> right 1, forward 2 -> back 1, turn 1.5 "
        "each way; each --seconds), falls over both: after any --command",
    )
    p.add_argument(
        "--sequence",
        action="append",
        type=_parse_sequence,
        metavar="'VX,VY,YAW VX,VY,YAW ...'",
        help="commands held in turn, each --seconds, scored on the last (repeatable; after any --command)",
    )
    p.add_argument("--robots", type=int, default=32, help="robots per command (default 32)")
    p.add_argument("--seconds", type=float, default=6.0, help="hold per command; the last half is scored (default 6)")
    p.add_argument("--friction", type=float, default=1.0, help="ground friction (default 1.0)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--braked-wheels",
        action="store_true",
        help="hold every wheel at zero speed (can the policy walk without rolling?); default: free wheels",
    )
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if not args.source.exists():
        p.error(f"{args.source}: no such checkpoint or run directory")
    if args.robots < 1 or args.seconds <= 0 or args.friction <= 0:
        p.error("--robots, --seconds and --friction must be positive")
    tests: list[Test] = list(args.command or ([] if args.reversals or args.sequence else DEFAULT_COMMANDS))
    tests += args.sequence or []
    if args.reversals:
        tests += DEFAULT_REVERSALS
    results, info = evaluate(
        args.source,
        tests,
        args.robots,
        args.seconds,
        args.friction,
        args.seed,
        braked_wheels=args.braked_wheels,
    )
    print(format_table(results, info))
    if args.json:
        args.json.write_text(json.dumps({"info": info, "results": [asdict(r) for r in results]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
