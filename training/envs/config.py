"""Typed configuration of the constrained locomotion task (saved with every run).

Defaults follow the paper (Table I coefficients, the constraint list, two cost groups) and,
where the paper defers to it, legged_gym's ANYmal C rough-terrain setup (observation scales and
noise, command resampling, domain randomisation, pushes). Joint names, limits, gains, rates,
command ranges and the height-scan grid are *not* here: they come from the robot contract.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from training.mdp.costs import parse_cost_type
from training.mdp.gait import AIR_TIME_GATES
from training.sim.backends.scene import SolverConfig
from training.sim.model import ANYDRIVE_SATURATION_TORQUE, LegActuator
from training.sim.terrain import TerrainConfig


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{name}: {message}")


def _range_ok(r: Any) -> bool:
    return r is None or (len(r) == 2 and math.isfinite(r[0]) and math.isfinite(r[1]) and r[0] <= r[1])


OBS_TERMS = (
    "base_lin_vel",
    "base_ang_vel",
    "projected_gravity",
    "velocity_commands",
    "joint_pos",
    "joint_vel",
    "last_action",
    "height_scan",
)


@dataclass
class ObservationsConfig:
    """Proprioception (legged_gym's order and scales) and, optionally, the height scan.

    ``order`` is the order of the terms in the observation vector (``height_scan`` is used only
    when ``height_scan`` is on); the layout built from it travels with the policy.
    """

    order: tuple[str, ...] = OBS_TERMS
    height_scan: bool = False
    height_offset: float = 0.5  # scan value = clip(base_z - height_offset - h, -1, 1) * scale
    height_scan_clip: float = 1.0
    scales: dict[str, float] = field(
        default_factory=lambda: {
            "base_lin_vel": 2.0,
            "base_ang_vel": 0.25,
            "projected_gravity": 1.0,
            "velocity_commands": 1.0,
            "joint_pos": 1.0,
            "joint_vel": 0.05,
            "last_action": 1.0,
            "height_scan": 5.0,
        }
    )
    # Uniform noise amplitude per term, in the term's raw units (legged_gym's noise_scales).
    noise: dict[str, float] = field(
        default_factory=lambda: {
            "base_lin_vel": 0.1,
            "base_ang_vel": 0.2,
            "projected_gravity": 0.05,
            "joint_pos": 0.01,
            "joint_vel": 1.5,
            "height_scan": 0.1,
        }
    )

    def validate(self) -> None:
        unknown = [t for t in self.order if t not in OBS_TERMS]
        _check(not unknown, "observations.order", f"unknown term(s) {unknown} (known: {list(OBS_TERMS)})")
        _check(len(set(self.order)) == len(self.order), "observations.order", "lists a term twice")
        missing = [t for t in self.order if t not in self.scales]
        _check(not missing, "observations.scales", f"no scale for term(s) {missing}")
        _check(
            not self.height_scan or "height_scan" in self.order,
            "observations.order",
            "height_scan is on but not in the order",
        )
        for name, value in self.scales.items():
            _check(math.isfinite(value) and value != 0, f"observations.scales.{name}", f"must be non-zero, got {value}")
        for name, value in self.noise.items():
            _check(value >= 0, f"observations.noise.{name}", f"must not be negative, got {value}")
        _check(self.height_scan_clip > 0, "observations.height_scan_clip", "must be positive")


@dataclass
class ActionsConfig:
    clip: float = 100.0  # raw action clip before scaling (legged_gym's clip_actions)

    def validate(self) -> None:
        _check(self.clip > 0, "actions.clip", f"must be positive, got {self.clip}")


COMMAND_RANGES = ("lin_vel_x", "lin_vel_y", "ang_vel_yaw")
COMMAND_MODES = ("forward", "sideways", "turn")


@dataclass
class CommandsConfig:
    """How velocity commands are drawn. Ranges are the robot contract's unless ``ranges`` narrows
    them for training; every command is one of these modes, drawn with the given shares:

    - ``forward``: vx only, ``sideways``: vy only, ``turn``: yaw rate only (turning in place),
      each uniform in its range;
    - otherwise (the rest of the shares) all three components uniform in the box, the default.

    Then ``standing_fraction`` of all commands become zero, and horizontal commands shorter than
    ``small_command_threshold`` lose their linear part. Last, ``reversal_share`` of the commands
    drawn on the timer (not at a reset) are instead the running command reversed.
    """

    resampling_time: float = 10.0  # s between new commands
    standing_fraction: float = 0.1  # share of commands that are zero (stand still)
    small_command_threshold: float = 0.2  # m/s: shorter horizontal commands become zero
    heading_command: bool = False  # command a heading; yaw rate = clip(gain * heading error)
    heading_gain: float = 0.5
    # Shares of the pure command modes (COMMAND_MODES); the rest are drawn in the full box.
    mode_shares: dict[str, float] = field(default_factory=dict)
    # Training ranges {"lin_vel_x": (low, high), ...} in place of the contract's (None: contract's).
    ranges: dict[str, tuple[float, float]] | None = None
    # Share of timed resamples whose new command is the running one reversed (-vx, -vy, -yaw rate,
    # clipped to the ranges): a joystick flicked from one side to the other. Uniform draws almost
    # never pair a fast command with its opposite, and a policy that never met one can fall there
    # (issue 23: the left 1.0 -> right 1.0 m/s step of sim2sim's full-range sequence).
    reversal_share: float = 0.0

    def validate(self) -> None:
        _check(self.resampling_time > 0, "commands.resampling_time", "must be positive")
        _check(0 <= self.standing_fraction <= 1, "commands.standing_fraction", "must be in [0, 1]")
        share = self.reversal_share
        _check(0 <= share <= 1, "commands.reversal_share", f"must be in [0, 1], got {share}")
        _check(self.small_command_threshold >= 0, "commands.small_command_threshold", "must not be negative")
        unknown = sorted(set(self.mode_shares) - set(COMMAND_MODES))
        _check(not unknown, "commands.mode_shares", f"unknown mode(s) {unknown} (known: {list(COMMAND_MODES)})")
        for mode, share in self.mode_shares.items():
            _check(0 <= share <= 1, f"commands.mode_shares.{mode}", f"must be in [0, 1], got {share}")
        total = sum(self.mode_shares.values())
        _check(total <= 1 + 1e-9, "commands.mode_shares", f"shares add up to {total:g} > 1")
        if self.ranges is not None:
            unknown = sorted(set(self.ranges) - set(COMMAND_RANGES))
            _check(not unknown, "commands.ranges", f"unknown range(s) {unknown} (known: {list(COMMAND_RANGES)})")
            for name, r in self.ranges.items():
                _check(
                    r is not None and _range_ok(r), f"commands.ranges.{name}", "expected (low, high) with low <= high"
                )


TASK_REWARDS = {
    # Table I, task and style rewards (coefficient of each kernel in training.mdp.rewards).
    "lin_vel": 1.0,
    "yaw_rate": 1.0,
    "base_stability": 1.0,
    "base_height": -0.5,
    "torque": -1.0e-6,
    "joint_vel": -1.0e-5,
    "joint_acc": -1.0e-6,
}
STYLE_REWARDS = {
    # Beyond Table I (the paper's "style rewards guide natural-looking motions"): legged_gym's
    # terms, off (absent) in the paper's tasks; the reference policies' tasks name the ones they use.
    "feet_air_time": 2.0,  # sum over landing feet of (air time - air_time_target), gated by the command
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -5.0,
    "action_rate": -0.01,
    # The hip-position constraint c_q as a penalty: 1 on every step any hip is outside its range
    # (the same definition as the hip_position cost). For a PPO reference policy: Table I's
    # squared position-limit overrun barely sees a leg held against its limit, where PPO's
    # sideways stance sat (issue 23).
    "hip_range": -1.0,
}
CONSTRAINT_REWARDS = {
    # Table I, "constraint rewards": the PPO baseline's penalties, removed for the CMDP.
    "smoothness_1": -0.01,
    "smoothness_2": -0.01,
    "torque_limits": -0.01,
    "speed_limits": -0.1,
    "pos_upper_limits": -10.0,
    "pos_lower_limits": -10.0,
    "body_contact": -1.0,
}


@dataclass
class RewardsConfig:
    weights: dict[str, float] = field(default_factory=lambda: dict(TASK_REWARDS))
    constraint_rewards: bool = False  # add Table I's constraint-reward block (PPO baseline)
    constraint_weights: dict[str, float] = field(default_factory=lambda: dict(CONSTRAINT_REWARDS))
    height_target: float = 0.5  # m, h^targ of Table I
    tracking_sharpness: float = 2.0  # the 2.0 in exp(-2 ||err||^2)
    # The yaw-rate kernel's own sharpness (None: tracking_sharpness). A flatter kernel still pays
    # a robot that turns at half the commanded rate, where exp(-4 e^2) pays almost nothing for
    # standing still at 1 rad/s: the gradient toward turning at all (issue 23).
    yaw_tracking_sharpness: float | None = None
    scale_by_dt: bool = True  # multiply every term by the policy period, as legged_gym does
    air_time_target: float = 0.5  # s: feet_air_time pays (air time - this) per landing foot
    air_time_gate: str = "command"  # which commands pay feet_air_time (training.mdp.gait.AIR_TIME_GATES)
    only_positive: bool = False  # clip each step's total reward at 0 (legged_gym's only_positive_rewards)

    @property
    def yaw_sharpness(self) -> float:
        """The yaw-rate kernel's sharpness in use."""
        return self.tracking_sharpness if self.yaw_tracking_sharpness is None else self.yaw_tracking_sharpness

    def validate(self) -> None:
        known = {**TASK_REWARDS, **STYLE_REWARDS}
        unknown = set(self.weights) - set(known)
        _check(not unknown, "rewards.weights", f"unknown term(s) {sorted(unknown)} (known: {sorted(known)})")
        _check(
            self.air_time_gate in AIR_TIME_GATES,
            "rewards.air_time_gate",
            f"expected one of {AIR_TIME_GATES}, got {self.air_time_gate!r}",
        )
        _check(self.air_time_target >= 0, "rewards.air_time_target", "must not be negative")
        _check(self.tracking_sharpness > 0, "rewards.tracking_sharpness", "must be positive")
        _check(
            self.yaw_tracking_sharpness is None or self.yaw_tracking_sharpness > 0,
            "rewards.yaw_tracking_sharpness",
            "must be positive (or null: tracking_sharpness)",
        )
        unknown = set(self.constraint_weights) - set(CONSTRAINT_REWARDS)
        _check(
            not unknown,
            "rewards.constraint_weights",
            f"unknown term(s) {sorted(unknown)} (known: {sorted(CONSTRAINT_REWARDS)})",
        )
        for name, w in {**self.weights, **self.constraint_weights}.items():
            _check(math.isfinite(w), f"rewards.{name}", f"weight must be finite, got {w}")


COST_KINDS = ("smoothness_1", "smoothness_2", "joint_speed", "joint_torque", "hip_position", "body_contact")


@dataclass
class CostTermConfig:
    kind: str  # one of COST_KINDS: which physical quantity
    type: str = "indicator"  # indicator | count | relu | relu2 (the appendix's cost functions)

    def validate(self, name: str) -> None:
        _check(self.kind in COST_KINDS, f"costs.terms.{name}.kind", f"expected one of {COST_KINDS}, got {self.kind!r}")
        parse_cost_type(self.type, f"costs.terms.{name}.type")
        if self.kind == "body_contact":
            _check(
                self.type in ("indicator", "count"),
                f"costs.terms.{name}.type",
                f"body contact supports indicator or count, got {self.type!r}",
            )


def paper_cost_terms() -> dict[str, CostTermConfig]:
    """The robot experiment's constraints: command smoothness (ReLU per joint, as defined in
    Section III-A) and indicator costs on joint speed, joint torque, hip position and contact."""
    return {
        "smoothness_1": CostTermConfig("smoothness_1", "relu"),
        "smoothness_2": CostTermConfig("smoothness_2", "relu"),
        "joint_speed": CostTermConfig("joint_speed", "indicator"),
        "joint_torque": CostTermConfig("joint_torque", "indicator"),
        "hip_position": CostTermConfig("hip_position", "indicator"),
        "body_contact": CostTermConfig("body_contact", "indicator"),
    }


@dataclass
class CostsConfig:
    terms: dict[str, CostTermConfig] = field(default_factory=paper_cost_terms)
    # Cost-critic groups, in order; None: the paper's two, smoothness and everything else.
    groups: dict[str, list[str]] | None = None

    def resolved_groups(self) -> dict[str, list[str]]:
        if self.groups is not None:
            return {g: list(names) for g, names in self.groups.items()}
        smooth = [n for n, t in self.terms.items() if t.kind in ("smoothness_1", "smoothness_2")]
        other = [n for n in self.terms if n not in smooth]
        groups = {"smoothness": smooth, "limits": other}
        return {g: names for g, names in groups.items() if names}

    def validate(self) -> None:
        for name, term in self.terms.items():
            if isinstance(term, dict):  # from YAML / overrides
                term = self.terms[name] = CostTermConfig(**term)
            term.validate(name)
        groups = self.resolved_groups()
        listed = [n for names in groups.values() for n in names]
        unknown = sorted(set(listed) - set(self.terms))
        _check(not unknown, "costs.groups", f"name cost terms that do not exist: {unknown}")
        missing = sorted(set(self.terms) - set(listed))
        _check(not missing, "costs.groups", f"every cost term needs a group; ungrouped: {missing}")
        dupes = sorted({n for n in listed if listed.count(n) > 1})
        _check(not dupes, "costs.groups", f"cost terms in more than one group: {dupes}")
        empty = [g for g, names in groups.items() if not names]
        _check(not empty, "costs.groups", f"empty group(s) {empty}")


@dataclass
class DomainRandConfig:
    """Each randomisation is switched off by setting it to None / False (legged_gym's ranges)."""

    friction: tuple[float, float] | None = (0.5, 1.25)
    added_base_mass: tuple[float, float] | None = (-1.0, 3.0)  # kg
    kp_scale: tuple[float, float] | None = None
    kd_scale: tuple[float, float] | None = None
    motor_strength: tuple[float, float] | None = (0.9, 1.1)
    num_variants: int = 16  # C MuJoCo keeps this many randomised model copies
    push_robots: bool = True
    push_interval_s: float = 15.0
    max_push_vel_xy: float = 1.0  # m/s
    observation_noise: bool = True
    action_latency: bool = False  # one policy step of action delay ...
    latency_probability: float = 0.5  # ... for this share of robots (drawn at each reset)
    # Issue 23: this share of robots (drawn at each reset) has its wheels held at zero speed
    # whatever the policy asks (the drives' velocity loops at 0), so it can only go where its
    # legs step it: rolling cannot stand in for stepping. Wheeled robots only; 0 = off.
    braked_wheels_share: float = 0.0

    def validate(self) -> None:
        for name in ("friction", "added_base_mass", "kp_scale", "kd_scale", "motor_strength"):
            _check(_range_ok(getattr(self, name)), f"domain_rand.{name}", "expected (low, high) with low <= high")
        _check(self.num_variants >= 1, "domain_rand.num_variants", "must be at least 1")
        _check(self.push_interval_s > 0, "domain_rand.push_interval_s", "must be positive")
        _check(self.max_push_vel_xy >= 0, "domain_rand.max_push_vel_xy", "must not be negative")
        _check(0 <= self.latency_probability <= 1, "domain_rand.latency_probability", "must be in [0, 1]")
        _check(0 <= self.braked_wheels_share <= 1, "domain_rand.braked_wheels_share", "must be in [0, 1]")


@dataclass
class TerminationsConfig:
    base_thigh_contact: bool = True  # base or thigh touching anything ends the episode
    max_roll: float = 1.0  # rad
    max_pitch: float = 1.0  # rad
    # End the episode where any joint is faster than this factor x its actuator velocity limit:
    # the deployment controller's plausibility bound (aow_policy's ControllerConfig
    # joint_velocity_factor, 2.0), past which the node on the robot stops the policy and damps, so
    # the robot falls there. Checked on the state at each policy step (the node checks every
    # joint state); None: off (issue 23: a sideways reversal spun a knee to 19 rad/s).
    joint_speed_trip: float | None = None

    def validate(self) -> None:
        trip = self.joint_speed_trip
        _check(trip is None or trip > 0, "terminations.joint_speed_trip", f"must be positive or None, got {trip}")
        _check(0 < self.max_roll <= math.pi, "terminations.max_roll", "must be in (0, pi]")
        _check(0 < self.max_pitch <= math.pi / 2, "terminations.max_pitch", "must be in (0, pi/2]")


@dataclass
class InitConfig:
    joint_pos_scale: tuple[float, float] = (0.5, 1.5)  # legs start at default * U(range) (legged_gym)
    base_vel_range: float = 0.5  # base linear and angular velocity ~ U(-r, r)
    spawn_xy_range: float = 0.5  # m around the tile centre
    spawn_clearance: float = 0.03  # m of air under the wheels (feet) at spawn
    random_yaw: bool = True
    random_episode_start: bool = True  # spread time-outs: first episodes start at a random step

    def validate(self) -> None:
        _check(_range_ok(self.joint_pos_scale), "init.joint_pos_scale", "expected (low, high)")
        _check(self.base_vel_range >= 0 and self.spawn_xy_range >= 0, "init", "ranges must not be negative")


@dataclass
class SimConfig:
    solver: SolverConfig = field(default_factory=SolverConfig)
    num_threads: int | None = None  # C MuJoCo thread pool size (None: the CPUs this process may use)
    # torch intra-op threads while the env runs on CPU (None: leave torch's setting alone). The
    # MDP's tensors are small; with torch's OpenMP workers spinning between ops on cores the
    # MuJoCo pool also needs, the MDP ran 3-8x slower with 2 threads than with 1 on 2 cores.
    torch_threads: int | None = 1
    warp_nconmax: int | None = None  # MuJoCo Warp contact buffer per world (None: its default)
    warp_njmax: int | None = None
    # How the leg drives are simulated (training.sim.model.LegActuator): "pd" (legged_gym's PD with a
    # torque limit, at any speed) or "dc_motor" (the same PD within the drive's torque-speed line, stall
    # torque leg_saturation_torque N·m, no-load speed the contract's velocity_limit).
    leg_actuator: str = "pd"
    leg_saturation_torque: float = ANYDRIVE_SATURATION_TORQUE

    def validate(self) -> None:
        self.solver.validate()
        self.leg_actuator_model()  # raises with the field's name

    def leg_actuator_model(self) -> LegActuator:
        try:
            return LegActuator(self.leg_actuator, self.leg_saturation_torque)
        except ValueError as e:
            raise ValueError(f"sim.{e}") from None


@dataclass
class TaskConfig:
    name: str
    wheeled: bool = True
    episode_length_s: float = 20.0
    robot_config: str | None = None  # robot contract path (None: the package's aow_c.yaml)
    terminal_obs: bool = True  # put pre-reset observations of ended episodes into infos
    terrain: TerrainConfig = field(default_factory=TerrainConfig)
    observations: ObservationsConfig = field(default_factory=ObservationsConfig)
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    commands: CommandsConfig = field(default_factory=CommandsConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    costs: CostsConfig = field(default_factory=CostsConfig)
    domain_rand: DomainRandConfig = field(default_factory=DomainRandConfig)
    terminations: TerminationsConfig = field(default_factory=TerminationsConfig)
    init: InitConfig = field(default_factory=InitConfig)
    sim: SimConfig = field(default_factory=SimConfig)

    def validate(self) -> None:
        _check(self.episode_length_s > 0, "episode_length_s", "must be positive")
        self.terrain.validate()
        self.observations.validate()
        self.actions.validate()
        self.commands.validate()
        self.rewards.validate()
        self.costs.validate()
        self.domain_rand.validate()
        self.terminations.validate()
        self.init.validate()
        self.sim.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_overrides(cfg: Any, overrides: dict[str, Any], prefix: str = "") -> Any:
    """Set fields of a dataclass tree in place.

    Keys are field names, dotted paths (``"rewards.constraint_rewards"``, ``"costs.terms.joint_speed.type"``)
    or double-underscore paths (``rewards__constraint_rewards``, usable as keyword arguments). A dict
    value for a dataclass section sets fields inside it; a dict value for a plain dict field (such as
    ``rewards.weights`` or ``costs.terms``) replaces it, so change one entry by its path. Unknown
    field names are refused with the full path and the known names (validation catches bad values).
    """
    for key, value in overrides.items():
        path = key.replace("__", ".").split(".")
        target = cfg
        for depth, part in enumerate(path):
            where = prefix + ".".join(path[: depth + 1])
            last = depth == len(path) - 1
            if isinstance(target, dict):
                if not last and part not in target:
                    raise ValueError(f"override {where}: no entry {part!r} (entries: {sorted(target)})")
                if last:
                    target[part] = _coerce(target.get(part), value)
                else:
                    target = target[part]
                continue
            if not dataclasses.is_dataclass(target):
                raise ValueError(f"override {where}: {prefix + '.'.join(path[:depth])} is not a section")
            names = {f.name for f in dataclasses.fields(target)}
            if part not in names:
                raise ValueError(f"override {where}: unknown field of {type(target).__name__} (known: {sorted(names)})")
            current = getattr(target, part)
            if not last:
                target = current
            elif dataclasses.is_dataclass(current) and isinstance(value, dict):
                apply_overrides(current, value, prefix=where + ".")
            else:
                setattr(target, part, _coerce(current, value))
    return cfg


def _coerce(current: Any, value: Any) -> Any:
    """YAML and CLI give lists where the config holds (low, high) tuples."""
    if isinstance(value, list) and (current is None or isinstance(current, tuple)):
        return tuple(value)
    if dataclasses.is_dataclass(current) and isinstance(value, dict):
        return type(current)(**value)
    return value
