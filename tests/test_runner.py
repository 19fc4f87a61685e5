"""Runner and aow-train: config checks, checkpoints, exact resume, NaN stop, logs, and the toy
CMDP on which the constrained algorithms must keep a limit that PPO breaks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from training import runner as runner_mod
from training.checkpoint import REQUIRED_KEYS, CheckpointError, load_checkpoint
from training.config import ConfigError, TrainConfig, apply_override, load_config_yaml
from training.runner import Runner, TrainingError
from training.toy_cmdp import ToySpeedLimitEnv
from training.train import main


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny networks train several times faster on one thread than on two contended ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = [
    "network.actor_hidden=[16,16]",
    "network.critic_hidden=[16,16]",
    "network.cost_critic_hidden=[16]",
    "ppo.num_epochs=2",
    "ppo.num_minibatches=2",
]
TINY_FLAGS = [a for s in TINY for a in ("--set", s)]


def tiny_config(algo: str = "np3o", iterations: int = 4, **fields) -> TrainConfig:
    data = TrainConfig(
        task="toy_speed_limit", algo=algo, num_envs=8, num_steps_per_env=8, iterations=iterations, save_interval=100
    ).to_dict()
    for a in TINY:
        apply_override(data, a)
    data.update(fields)
    return TrainConfig.from_dict(data)


# ---- configuration ------------------------------------------------------------------------------


def test_bad_config_is_refused_before_any_environment_is_built(monkeypatch):
    def no_env(*args, **kwargs):
        raise AssertionError("an environment was built")

    monkeypatch.setattr(runner_mod, "make_task_env", no_env)
    cfg = tiny_config()
    cfg.ppo.clip_param = 1.5
    with pytest.raises(ConfigError, match=r"ppo\.clip_param: must be in \(0, 1\), got 1\.5"):
        Runner(cfg)
    cfg = tiny_config()
    cfg.algo_params.kappa_max = -1.0
    with pytest.raises(ConfigError, match=r"algo_params\.kappa_max"):
        Runner(cfg)
    cfg = tiny_config(num_envs=0)
    with pytest.raises(ConfigError, match=r"num_envs: must be a positive integer"):
        Runner(cfg)
    cfg = tiny_config(cost_limits={"nonexistent": 0.0})
    with pytest.raises(ConfigError, match=r"cost_limits\.nonexistent"):
        Runner(cfg, env=ToySpeedLimitEnv(8))


def test_cli_refuses_bad_values_naming_the_field(capsys, tmp_path):
    assert main(["--task", "toy_speed_limit", "--set", "ppo.gamma=1.5", "--run-dir", str(tmp_path / "r")]) == 2
    assert "ppo.gamma: must be in (0, 1)" in capsys.readouterr().err
    assert main(["--task", "toy_speed_limit", "--set", "algo_params.kapa=2", "--run-dir", str(tmp_path / "r")]) == 2
    assert "algo_params.kapa: unknown field" in capsys.readouterr().err
    assert (
        main(["--task", "toy_speed_limit", "--env-override", "speed_cost=cubic", "--run-dir", str(tmp_path / "r")]) == 2
    )
    assert "env.speed_cost" in capsys.readouterr().err
    assert main(["--task", "no_such_task", "--run-dir", str(tmp_path / "r")]) == 2
    assert "unknown task 'no_such_task'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--task", "--algo", "--num-envs", "--iterations", "--seed", "--run-dir", "--resume"):
        assert flag in out


def test_config_yaml_round_trip_and_algorithm_defaults(tmp_path):
    cfg = tiny_config(algo="ppo_lag")
    assert cfg.algo_params.lambda_init == -1.3 and cfg.algo_params.lambda_lr == 0.001
    from training.config import save_config_yaml

    path = save_config_yaml(cfg, tmp_path / "c.yaml")
    assert load_config_yaml(path) == cfg
    defaults = {a: TrainConfig(algo=a).algo_params for a in ("p3o", "np3o", "nipo", "crpo", "focops")}
    assert defaults["p3o"].kappa_max == 120 and defaults["np3o"].kappa_max == 1
    assert (defaults["nipo"].cost_limit, defaults["nipo"].barrier_k, defaults["nipo"].recovery_coef) == (0.1, 20, 1)
    assert defaults["crpo"].cost_limit == 0.01
    assert (defaults["focops"].nu_init, defaults["focops"].nu_lr, defaults["focops"].temperature) == (0.1, 0, 0.5)
    assert defaults["p3o"].cost_limit == defaults["np3o"].cost_limit == defaults["focops"].cost_limit == 0.0


def test_env_override_reaches_the_task(tmp_path):
    r = Runner(tiny_config(algo="ppo", env_overrides={"constraint_rewards": True}), progress=False)
    assert r.env.cfg.constraint_rewards is True
    assert len(r.model.cost_critics) == 0  # PPO trains no cost critics


def test_cli_env_override_of_one_dict_entry_keeps_the_others():
    """``--env-override rewards.weights.hip_range=-2`` on top of a config file sets that weight
    and keeps every other (a nested {'weights': {...}} would replace the task's whole dict)."""
    from training.envs import task_config
    from training.train import build_parser, config_from_args

    args = build_parser().parse_args(
        [
            "--config",
            "policies/configs/aow_flat_ppo.yaml",
            "--env-override",
            "rewards.weights.hip_range=-2.0",
            "--env-override",
            "commands.reversal_share=0.3",
        ]
    )
    cfg = config_from_args(args)
    task = task_config(cfg.task, **cfg.env_overrides)
    plain = task_config(cfg.task)
    assert task.rewards.weights == {**plain.rewards.weights, "hip_range": -2.0}
    assert task.rewards.constraint_rewards is True  # the config file's own overrides stay
    assert task.commands.reversal_share == 0.3


# ---- checkpoints and resume ---------------------------------------------------------------------


def _state(path: Path) -> dict:
    return load_checkpoint(path)


@pytest.mark.parametrize("algo", ["np3o", "ppo_lag"])
def test_resume_continues_exactly(tmp_path, algo):
    straight = Runner(tiny_config(algo, 4), tmp_path / "a", progress=False, tensorboard=False)
    straight.learn()
    first = Runner(tiny_config(algo, 2), tmp_path / "b", progress=False, tensorboard=False)
    first.learn()
    assert (tmp_path / "b" / "model_2.pt").is_file()
    resumed = Runner(tiny_config(algo, 4), tmp_path / "b", resume=True, progress=False, tensorboard=False)
    assert resumed.iteration == 2
    resumed.learn()
    a, b = _state(tmp_path / "a" / "model_4.pt"), _state(tmp_path / "b" / "model_4.pt")
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg"], pb["exp_avg"])
    assert a["algo_state"]["learning_rate"] == b["algo_state"]["learning_rate"]
    if algo == "ppo_lag":
        assert torch.equal(a["algo_state"]["lambda_raw"], b["algo_state"]["lambda_raw"])
    lines_a = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    lines_b = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert len(lines_a) == len(lines_b) == 4


def test_checkpoint_contents_load_weights_only(tmp_path):
    Runner(tiny_config("np3o", 2), tmp_path, progress=False, tensorboard=False).learn()
    raw = torch.load(tmp_path / "model_2.pt", weights_only=True)
    for key in REQUIRED_KEYS:
        assert key in raw, key
    assert raw["iteration"] == 2 and raw["num_actions"] == 1
    assert raw["cost_groups"] == {"limits": ["speed_limit"]}
    assert raw["config"]["algo"] == "np3o" and raw["config"]["network"]["actor_hidden"] == [16, 16]
    assert raw["obs_layout"]["policy"][0]["name"] == "base_lin_vel"
    assert raw["action_layout"]["joint_names"] == ["point_mass"]
    assert isinstance(raw["rng"]["torch"], torch.Tensor) and isinstance(raw["rng"]["generators"][0], torch.Tensor)
    assert raw["algo_state"]["name"] == "np3o"
    assert "actor.normalizer.mean" in raw["model"] and raw["model"]["actor.normalizer.count"].item() == 2 * 64
    assert load_config_yaml(tmp_path / "config.yaml") == tiny_config("np3o", 2)


def test_cli_trains_resumes_and_refuses_conflicting_flags(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["--task", "toy_speed_limit", "--algo", "crpo", "--num-envs", "8", "--steps-per-env", "8", "--no-progress"]
    assert main([*base, "--iterations", "1", "--run-dir", str(run), "--no-tensorboard", *TINY_FLAGS]) == 0
    assert main([*base, "--iterations", "1", "--run-dir", str(run), *TINY_FLAGS]) == 1  # would overwrite
    assert "already holds checkpoints" in capsys.readouterr().err
    assert main(["--resume", str(run), "--seed", "3"]) == 2
    assert "--seed: cannot change a resumed run" in capsys.readouterr().err
    assert main(["--resume", str(run), "--iterations", "2", "--no-progress", "--no-tensorboard"]) == 0
    assert load_checkpoint(run / "model_2.pt")["iteration"] == 2


def test_corrupted_or_foreign_checkpoints_are_refused(tmp_path, capsys):
    Runner(tiny_config("np3o", 1), tmp_path / "good", progress=False, tensorboard=False).learn()
    good = tmp_path / "good" / "model_1.pt"
    cases = {
        "truncated": lambda p: p.write_bytes(good.read_bytes()[:200]),
        "text": lambda p: p.write_text("not a checkpoint"),
        "foreign": lambda p: torch.save({"state_dict": {"w": torch.zeros(1)}}, p),
        "pickled_object": lambda p: torch.save({"format": "aow-checkpoint", "obj": Path("x")}, p),
        "incomplete": lambda p: torch.save({"format": "aow-checkpoint", "version": 1, "iteration": 1}, p),
    }
    messages = {
        "truncated": "not a readable checkpoint",
        "text": "not a readable checkpoint",
        "foreign": "not an AoW checkpoint",
        "pickled_object": "not a readable checkpoint",
        "incomplete": "lacks key",
    }
    for name, write in cases.items():
        run = tmp_path / name
        run.mkdir()
        shutil.copy(tmp_path / "good" / "config.yaml", run / "config.yaml")
        write(run / "model_1.pt")
        with pytest.raises(CheckpointError, match=messages[name]):
            load_checkpoint(run / "model_1.pt")
        assert main(["--resume", str(run), "--no-progress"]) == 2
        assert messages[name] in capsys.readouterr().err
    # A checkpoint of another algorithm in the run directory is refused too.
    other = tmp_path / "other"
    Runner(tiny_config("crpo", 1), other, progress=False, tensorboard=False).learn()
    with pytest.raises(CheckpointError, match="differs from this one"):
        Runner(tiny_config("np3o", 2), other, resume=True, progress=False)


class NaNAfter(ToySpeedLimitEnv):
    """The toy task, but rewards turn NaN after a given number of steps."""

    def __init__(self, *args, nan_after: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps, self.nan_after = 0, nan_after

    def step(self, actions):
        obs, rewards, costs, dones, infos = super().step(actions)
        self.steps += 1
        if self.steps > self.nan_after:
            rewards = torch.full_like(rewards, float("nan"))
        return obs, rewards, costs, dones, infos


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    cfg = tiny_config("np3o", 5, save_interval=1)
    env = NaNAfter(8, nan_after=2 * 8)  # two good iterations of 8 steps
    r = Runner(cfg, tmp_path, env=env, progress=False, tensorboard=False)
    with pytest.raises(TrainingError, match=r"training diverged: non-finite loss at iteration 2.*model_2\.pt"):
        r.learn()
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_1.pt", "model_2.pt"]
    ckpt = load_checkpoint(tmp_path / "model_2.pt")
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())


def test_tensorboard_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    Runner(tiny_config("np3o", 2), tmp_path, progress=False).learn()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = {
        "Train/mean_reward",
        "Train/violations_per_episode",
        "Episode/rew/speed",
        "Episode/cost/speed_limit",
        "Episode/violations/speed_limit",
        "Cost_per_step/speed_limit",
        "Penalty/kappa",
        "Loss/policy",
        "Loss/value",
        "Loss/cost_value/limits",  # one per cost critic
        "Policy/kl",
        "Policy/learning_rate",
        "Constraint/J_C/limits",
        "Perf/collection_s",
        "Perf/update_s",
    }
    assert expected <= tags, expected - tags
    assert [e.step for e in acc.Scalars("Penalty/kappa")] == [0, 1]


# ---- the toy CMDP: constrained algorithms keep the limit, PPO breaks it ---------------------

# The limit is eps = 0 on the speed overrun max(0, |v| - 1). Tolerance: the final policy (its mean
# action, 64 steps from fresh resets) may overrun by at most 0.05 m/s per step on average, and
# the stochastic training policy by at most 0.1; PPO, which tracks 1.5 m/s, overruns by >= 0.3.
TOLERANCE_FINAL, TOLERANCE_TRAINING, PPO_AT_LEAST = 0.05, 0.1, 0.3


def toy_run(algo: str, seed: int = 0) -> tuple[float, float]:
    iterations = 30 if algo == "ppo" else 50  # PPO is past the limit long before
    data = TrainConfig(
        task="toy_speed_limit", algo=algo, num_envs=64, num_steps_per_env=32, iterations=iterations, seed=seed
    ).to_dict()
    for a in ("network.actor_hidden=[32,32]", "network.critic_hidden=[32,32]", "network.cost_critic_hidden=[32]"):
        apply_override(data, a)
    if algo == "ppo_lag":
        # alpha_lambda = 0.001 (Table III) is tuned for thousands of iterations; 50 need a faster multiplier.
        apply_override(data, "algo_params.lambda_lr=0.05")
    r = Runner(TrainConfig.from_dict(data), progress=False, tensorboard=False)
    history = r.learn()
    training_cost = sum(h["cost_rate/speed_limit"] for h in history[-5:]) / 5
    return r.evaluate(64)["cost_rate/speed_limit"], training_cost


def test_np3o_keeps_the_speed_limit_that_ppo_breaks():
    final, training = toy_run("np3o")
    assert final <= TOLERANCE_FINAL and training <= TOLERANCE_TRAINING, (final, training)
    final, training = toy_run("ppo")
    assert final >= PPO_AT_LEAST and training >= PPO_AT_LEAST, (final, training)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["np3o", "p3o", "ppo_lag", "crpo"])
@pytest.mark.parametrize("seed", [1, 2])
def test_constrained_algorithms_keep_the_speed_limit(algo, seed):
    final, training = toy_run(algo, seed)
    assert final <= TOLERANCE_FINAL and training <= TOLERANCE_TRAINING, (final, training)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_breaks_the_speed_limit(seed):
    final, training = toy_run("ppo", seed)
    assert final >= PPO_AT_LEAST and training >= PPO_AT_LEAST, (final, training)


def test_trains_on_the_locomotion_task(tmp_path):
    """The real task of training.envs, through the same runner (tiny: 4 robots, 8 steps)."""
    from aow_policy.robot import load_robot

    cfg = tiny_config("np3o", 1, task="aow_flat", num_envs=4)
    r = Runner(cfg, tmp_path, progress=False, tensorboard=False)
    history = r.learn()
    ckpt = load_checkpoint(tmp_path / "model_1.pt")
    assert ckpt["robot_contract_hash"] == load_robot().contract_hash
    assert set(ckpt["cost_groups"]) == set(r.env.cost_groups) and len(r.model.cost_critics) == len(ckpt["cost_groups"])
    assert ckpt["action_layout"]["joint_names"] == list(r.env.action_layout["joint_names"])
    assert any(k.startswith("episode/violations/") for k in history[0]) or "cost_rate/joint_speed" in history[0]


def test_time_budget_stops_after_an_iteration_and_checkpoints_it(tmp_path):
    r = Runner(tiny_config("np3o", 50), tmp_path, progress=False, tensorboard=False)
    r.learn(time_budget_s=0.0)
    assert r.stopped_by_budget and r.iteration == 1
    assert load_checkpoint(tmp_path / "model_1.pt")["iteration"] == 1
    resumed = Runner(tiny_config("np3o", 2), tmp_path, resume=True, progress=False, tensorboard=False)
    resumed.learn()
    assert resumed.iteration == 2 and not resumed.stopped_by_budget


# ---- fine-tuning from another run's checkpoint --------------------------------------------------


def test_init_from_starts_a_new_run_from_a_checkpoints_networks(tmp_path):
    source = Runner(tiny_config("np3o", 2), tmp_path / "src", progress=False, tensorboard=False)
    source.learn()
    trained = load_checkpoint(tmp_path / "src" / "model_2.pt")["model"]
    cfg = tiny_config("np3o", 2, init_from=str(tmp_path / "src" / "model_2.pt"))
    cfg.algo_params.kappa_init = cfg.algo_params.kappa_max = 1.0  # e.g. stronger constraints
    tuned = Runner(cfg, tmp_path / "tuned", progress=False, tensorboard=False)
    assert tuned.iteration == 0 and not tuned.algo.optimizer.state  # a new run, a fresh optimizer
    for key, value in tuned.model.state_dict().items():
        assert torch.equal(value, trained[key]), key  # networks, cost critics and normalizers
    tuned.learn()
    assert load_config_yaml(tmp_path / "tuned" / "config.yaml").init_from == str(tmp_path / "src" / "model_2.pt")


def test_init_from_a_ppo_checkpoint_keeps_fresh_cost_critics(tmp_path):
    Runner(tiny_config("ppo", 1), tmp_path / "ppo", progress=False, tensorboard=False).learn()
    ppo = load_checkpoint(tmp_path / "ppo" / "model_1.pt")["model"]
    assert not any(k.startswith("cost_critics.") for k in ppo)
    torch.manual_seed(0)
    tuned = Runner(
        tiny_config("np3o", 1, init_from=str(tmp_path / "ppo" / "model_1.pt")), None, progress=False, tensorboard=False
    )
    state = tuned.model.state_dict()
    for key, value in ppo.items():
        assert torch.equal(state[key], value), key
    assert tuned.model.cost_critics.params.abs().sum() > 0  # initialized, not zeros


def test_init_from_a_checkpoint_of_another_task_is_refused(tmp_path):
    Runner(tiny_config("np3o", 1), tmp_path / "src", progress=False, tensorboard=False).learn()
    ckpt = load_checkpoint(tmp_path / "src" / "model_1.pt")
    ckpt["model"]["actor.mean_head.weight"] = torch.zeros(3, 7)  # another action count
    torch.save(ckpt, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match=r"init_from .*foreign\.pt: its networks do not fit this task"):
        Runner(tiny_config("np3o", 1, init_from=str(tmp_path / "foreign.pt")), None, progress=False, tensorboard=False)
    with pytest.raises(ConfigError, match="init_from"):
        tiny_config("np3o", 1, init_from="").validate()
