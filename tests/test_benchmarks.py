"""The Safety-Gymnasium velocity benchmarks (training.benchmarks), the per-episode cost-limit
convention shared by all seven algorithms, and the diagnostics every algorithm writes."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from training import benchmarks as B
from training.algorithms import ALGORITHMS
from training.config import (
    ConfigError,
    TrainConfig,
    cost_limit_from_episode_cost,
    episode_cost_from_cost_limit,
)
from training.gym_adapter import make_gym_env
from training.networks import NetworkConfig
from training.runner import Runner, check_task, tensorboard_tag

HOPPER = B.BENCHMARK_IDS["Hopper"]
TINY = NetworkConfig(actor_hidden=(16,), critic_hidden=(16,), cost_critic_hidden=(8,))


# ---- the environments -----------------------------------------------------------------------


def test_every_velocity_task_is_registered_with_1000_step_episodes():
    for robot, name in B.BENCHMARK_IDS.items():
        assert name in gym.registry, name
        assert gym.spec(name).max_episode_steps == B.EPISODE_STEPS == 1000
        check_task(f"gym:{name}")
        assert B.VELOCITY_THRESHOLDS[robot] > 0
    assert {"Ant", "Humanoid"} == B.PLANAR_SPEED


def test_velocity_cost_is_one_strictly_above_the_threshold():
    for robot, thr in B.VELOCITY_THRESHOLDS.items():
        assert B.velocity_cost(thr, 0.0, robot) == 0.0
        assert B.velocity_cost(np.nextafter(thr, np.inf), 0.0, robot) == 1.0
        assert B.velocity_cost(-10.0 * thr, 0.0, robot) == (1.0 if robot in B.PLANAR_SPEED else 0.0)
    # planar speed for Ant: sideways motion counts, forward velocity alone for Hopper
    assert B.velocity_cost(0.0, 3.0, "Ant") == 1.0
    assert B.velocity_cost(0.0, 3.0, "Hopper") == 0.0


def _step_from(env: gym.Env, qvel_updates: dict[int, float]) -> tuple[float, dict]:
    env.reset(seed=0)
    base = env.unwrapped
    qvel = np.zeros_like(base.data.qvel)
    for i, v in qvel_updates.items():
        qvel[i] = v
    base.set_state(base.data.qpos.copy(), qvel)
    _, _, _, _, info = env.step(np.zeros(env.action_space.shape, dtype=env.action_space.dtype))
    return info["cost"], info


@pytest.mark.parametrize(
    ("robot", "fast", "slow"),
    [
        ("Hopper", {0: 5.0}, {}),
        ("Walker2d", {0: 8.0}, {}),
        ("Ant", {1: 6.0}, {}),  # sideways only: planar speed above 2.6222, x velocity ~0
    ],
)
def test_cost_in_a_known_state(robot, fast, slow):
    env = gym.make(B.BENCHMARK_IDS[robot])
    cost, info = _step_from(env, fast)
    assert cost == 1.0 and info["speed"] > B.VELOCITY_THRESHOLDS[robot]
    if robot == "Ant":
        assert abs(info["x_velocity"]) < B.VELOCITY_THRESHOLDS[robot]  # the x velocity alone would not cost
    cost, info = _step_from(env, slow)  # from rest, no action
    assert cost == 0.0 and info["speed"] < B.VELOCITY_THRESHOLDS[robot]
    env.close()


def _position(base: gym.Env, robot: str) -> np.ndarray:
    """Where the robot is, as Safety-Gymnasium measures it: the torso's (x, y) for the planar-speed
    robots, the root's x (``qpos[0]``) for the others."""
    if robot in B.PLANAR_SPEED:
        return base.data.body("torso").xpos[:2].copy()
    return base.data.qpos[:1].copy()


@pytest.mark.parametrize(("robot", "push"), [("Hopper", {0: 3.0}), ("Walker2d", {0: 6.0}), ("Ant", {0: 4.0, 1: 3.0})])
def test_cost_matches_the_speed_measured_from_the_positions(robot, push):
    """Random steps from rest and from a push: each step's cost is 1 exactly when the speed the test
    measures itself (position after the step minus before, over the step's dt) is above the
    threshold; the wrapper's own ``info["speed"]`` is not used."""
    env = gym.make(B.BENCHMARK_IDS[robot])
    base = env.unwrapped
    threshold = B.VELOCITY_THRESHOLDS[robot]
    env.action_space.seed(1)
    costs = []
    for start, qvel_updates in enumerate(({}, push)):
        env.reset(seed=start)
        qvel = base.data.qvel.copy()
        for i, v in qvel_updates.items():
            qvel[i] = v
        base.set_state(base.data.qpos.copy(), qvel)
        for _ in range(40):
            before = _position(base, robot)
            _, _, term, trunc, info = env.step(env.action_space.sample())
            velocity = (_position(base, robot) - before) / base.dt
            speed = float(np.linalg.norm(velocity)) if robot in B.PLANAR_SPEED else float(velocity[0])
            if abs(speed - threshold) > 1e-9:  # not a rounding error's width from the threshold
                assert info["cost"] == float(speed > threshold), (speed, info["cost"])
                costs.append(info["cost"])
            if term or trunc:
                break
    assert 0.0 in costs and 1.0 in costs  # both sides of the threshold were checked
    env.close()


def test_episode_lasts_1000_steps_and_auto_resets_as_the_adapter_requires():
    env = make_gym_env(HOPPER, 2, seed=0, terminate_when_unhealthy=False)
    assert env.max_episode_length == 1000 and env.cost_names == ["cost"]
    env.reset()
    actions = torch.zeros(2, env.num_actions)
    total = torch.zeros(2)
    for step in range(1, 1001):
        obs, _, costs, dones, infos = env.step(actions)
        total += costs[:, 0]
        assert bool(dones.any()) == (step == 1000), step
    assert infos["time_outs"].all()
    assert infos["episode"]["length"] == 1000
    assert infos["episode"]["cost/cost"] == pytest.approx(float(total.mean()))
    assert not torch.equal(infos["terminal_obs"]["critic"], obs["critic"])  # post-reset observations
    obs, _, _, dones, infos = env.step(actions)  # a new episode runs
    assert not dones.any() and infos["episode"] == {}
    env.close()


# ---- the cost-limit convention ----------------------------------------------------------------


def test_per_episode_limit_conversion():
    assert cost_limit_from_episode_cost(25.0, 1000, 0.99) == pytest.approx(2.5)
    assert episode_cost_from_cost_limit(2.5, 1000, 0.99) == pytest.approx(25.0)
    # a constant per-step cost c has discounted return c / (1 - gamma): c * T per episode
    c, T, gamma = 0.03, 500, 0.98
    assert cost_limit_from_episode_cost(c * T, T, gamma) == pytest.approx(sum(c * gamma**k for k in range(20000)))


@pytest.fixture(scope="module")
def hopper_env():
    env = make_gym_env(HOPPER, 2, seed=0)
    yield env
    env.close()


def _cfg(algo: str, **kw) -> TrainConfig:
    return TrainConfig(
        task=f"gym:{HOPPER}", algo=algo, num_envs=2, num_steps_per_env=16, iterations=2, network=TINY, **kw
    )


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_the_same_limit_gives_every_algorithm_the_same_internal_eps(algo, hopper_env):
    runner = Runner(_cfg(algo, episode_cost_limit=25.0), env=hopper_env, progress=False, tensorboard=False)
    assert runner.cost_limits == {"cost": pytest.approx(2.5)}  # 25 / (1000 * (1 - 0.99))
    if ALGORITHMS[algo].uses_cost_critics:  # the algorithm's own default (0, 0.1, 0.01) is overridden
        assert runner.algo.cost_limits.tolist() == pytest.approx([2.5])
    # without --cost-limit each algorithm keeps its own (internal-unit) default
    default = Runner(_cfg(algo), env=hopper_env, progress=False, tensorboard=False)
    assert default.cost_limits == {"cost": getattr(default.cfg.algo_params, "cost_limit", 0.0)}


def test_cost_limit_flag_reaches_every_algorithm_and_refuses_two_conventions():
    from training import compare, train

    args = train.build_parser().parse_args(["--task", f"gym:{HOPPER}", "--algo", "crpo", "--cost-limit", "25"])
    assert train.config_from_args(args).episode_cost_limit == 25.0
    args = compare.build_parser().parse_args(
        ["--task", f"gym:{HOPPER}", "--iterations", "1", "--out", "x", "--cost-limit", "25", "--seeds", "1"]
    )
    configs = compare.run_configs(args, sorted(ALGORITHMS), [0])
    assert {c["episode_cost_limit"] for c in configs.values()} == {25.0}
    with pytest.raises(ConfigError, match="episode_cost_limit"):
        _cfg("np3o", episode_cost_limit=25.0, cost_limits={"cost": 1.0}).validate()
    with pytest.raises(ConfigError, match="episode_cost_limit"):
        _cfg("np3o", episode_cost_limit=-1.0).validate()


# ---- a short run of every algorithm writes its diagnostics -----------------------------------

COMMON = (
    "cost_return/cost",
    "cost_limit/cost",
    "cost_return_over_limit/cost",
    "constraint_gap/cost",
    "cost_adv_std/cost",
    "violation_offset/cost",
    "violation_offset_raw/cost",
    "adv_corr/cost",
    "penalty_share",
    "cost_return_per_episode/cost",
)
OWN = {
    "ppo": (),
    "np3o": ("kappa", "violation/cost", "violation_active/cost", "penalty"),
    "p3o": ("kappa", "violation/cost", "penalty"),
    "ppo_lag": ("lambda/cost", "penalty"),
    "nipo": ("violation/cost", "penalty"),
    "crpo": ("violation/cost", "reward_step"),
    "focops": ("nu/cost",),
}


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_a_short_run_writes_the_diagnostics(algo, hopper_env, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner = Runner(_cfg(algo, episode_cost_limit=25.0), run_dir=tmp_path, env=hopper_env, progress=False)
    runner.learn()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2
    expected = ["cost_limit_per_episode/cost"]
    if ALGORITHMS[algo].uses_cost_critics:
        expected += [*COMMON, *OWN[algo]]
    for key in expected:
        assert key in records[-1] and math.isfinite(records[-1][key]), key
    assert records[-1]["cost_limit_per_episode/cost"] == pytest.approx(25.0)
    if ALGORITHMS[algo].uses_cost_critics:
        assert records[-1]["cost_limit/cost"] == pytest.approx(2.5)
        assert 0.0 <= records[-1]["penalty_share"] <= 1.0
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in expected:
        assert tensorboard_tag(key) in tags, key


def test_adaptive_kappa_rises_while_violated_and_is_never_lowered(hopper_env):
    from training.algorithms.base import RolloutStats
    from training.config import NP3OParams

    cfg = _cfg("np3o", episode_cost_limit=25.0, algo_params=NP3OParams(kappa_adapt=0.5, kappa_adapt_max=1.0))
    algo = Runner(cfg, env=hopper_env, progress=False, tensorboard=False).algo
    stats = RolloutStats(
        adv_mean=torch.tensor(0.0),
        adv_std=torch.tensor(1.0),
        cost_adv_mean=torch.tensor([0.0]),
        cost_adv_std=torch.tensor([2.0]),
        cost_return=torch.tensor([1.0]),  # the (low) critic estimate is not what decides
        num_samples=10,
        cost_rate=torch.tensor([0.05]),  # 50 per 1000-step episode: J_C ~ 5 > eps = 2.5
    )
    assert algo.kappas().tolist() == pytest.approx([0.5])  # the schedule's kappa_init = kappa_max / 2
    algo.begin_update(stats, 0)
    assert algo.kappas().tolist() == pytest.approx([0.75])
    algo.begin_update(stats, 1)
    assert algo.kappas().tolist() == pytest.approx([1.0])  # capped at kappa_adapt_max
    state = algo.state_dict()
    within = RolloutStats(**{**stats.__dict__, "cost_rate": torch.tensor([0.01])})
    algo.begin_update(within, 2)
    assert algo.kappa_scale.tolist() == pytest.approx([2.0], rel=2e-3)  # kept inside the limit
    fresh = Runner(cfg, env=hopper_env, progress=False, tensorboard=False).algo
    fresh.load_state_dict(state)  # the scale is resumed with the run
    assert fresh.kappa_scale.tolist() == pytest.approx([2.0], rel=2e-3)
    fresh.begin_update(within, 3)
    assert fresh.kappa_scale.tolist() == pytest.approx([2.0], rel=2e-3)


def test_rollout_statistics_give_the_advantage_correlation():
    from types import SimpleNamespace

    from training.algorithms.base import rollout_statistics
    from training.distributed import DistContext

    g = torch.Generator().manual_seed(0)
    adv = torch.randn(500, generator=g)
    cadv = torch.stack([0.7 * adv + 0.3 * torch.randn(500, generator=g), -adv + 2.0], dim=-1)
    batch = SimpleNamespace(advantages=adv, cost_advantages=cadv, cost_returns=torch.rand(500, 2, generator=g))
    stats = rollout_statistics(batch, DistContext())
    expected = [torch.corrcoef(torch.stack([adv, cadv[:, k]]))[0, 1].item() for k in range(2)]
    assert stats.adv_corr.tolist() == pytest.approx(expected, abs=1e-5)
    assert stats.cost_return.tolist() == pytest.approx(batch.cost_returns.mean(0).tolist(), abs=1e-6)
