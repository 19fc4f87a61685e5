"""The reference recipes in policies/configs load as typed configs and say what the reference
policies were trained with (issue 23): the style task, the moving air-time gate, a symmetric actor,
command reversals, and the controller's joint-speed trip as stage 2; PPO with the constraint rewards, N-P3O
with its kappa."""

from __future__ import annotations

from pathlib import Path

import pytest

from aow_policy.controller_config import ControllerConfig
from training.config import load_config_yaml
from training.envs import task_config

CONFIGS = Path(__file__).resolve().parents[1] / "policies" / "configs"


@pytest.mark.parametrize("algo", ["np3o", "ppo"])
def test_flat_recipe(algo):
    cfg = load_config_yaml(CONFIGS / f"aow_flat_{algo}.yaml")
    cfg.validate()
    assert cfg.task == "aow_flat_style" and cfg.algo == algo
    assert cfg.network.symmetric_actor is True
    task = task_config(cfg.task, **cfg.env_overrides)
    assert task.rewards.air_time_gate == "moving"
    assert task.rewards.constraint_rewards is (algo == "ppo")
    assert set(task.costs.terms) >= {"joint_speed", "joint_torque"}  # the paper's constraints stay costs
    # Sudden reversals in training; the joint-speed trip is stage 2 (a fresh policy's exploration
    # trips at once), and the stage the recipe names is the controller's own bound.
    assert task.commands.reversal_share == 0.2
    assert task.terminations.joint_speed_trip is None
    factor = ControllerConfig().joint_velocity_factor
    stage2 = f"--env-override terminations.joint_speed_trip={factor:g}"
    assert stage2.replace("=2", "=2.0") in (CONFIGS / f"aow_flat_{algo}.yaml").read_text()
    if algo == "np3o":
        assert (cfg.algo_params.kappa_init, cfg.algo_params.kappa_max) == (0.1, 0.2)


SHIPPED = {"np3o": ("aow_flat_np3o", 250), "ppo": ("aow_flat_ppo", 82)}


@pytest.mark.parametrize("algo", ["np3o", "ppo"])
def test_the_shipped_policy_was_trained_with_the_recipe_and_its_stage_2(algo):
    """Each shipped flat policy's saved config is its recipe with the trip on (stage 2), and its
    checkpoint and ONNX contract name the same task, algorithm and iteration."""
    from training.checkpoint import load_checkpoint

    folder, iteration = SHIPPED[algo]
    shipped = Path(__file__).resolve().parents[1] / "policies" / folder
    recipe = load_config_yaml(CONFIGS / f"aow_flat_{algo}.yaml")
    cfg = load_config_yaml(shipped / "config.yaml")
    assert (cfg.task, cfg.algo, cfg.num_envs) == (recipe.task, recipe.algo, recipe.num_envs)
    assert cfg.network == recipe.network and cfg.algo_params == recipe.algo_params
    assert cfg.ppo == recipe.ppo  # PPO's entropy bonus held at 0.001 (the recipe says why)
    task, recipe_task = task_config(cfg.task, **cfg.env_overrides), task_config(recipe.task, **recipe.env_overrides)
    assert task.rewards == recipe_task.rewards and task.commands == recipe_task.commands
    assert task.terminations.joint_speed_trip == ControllerConfig().joint_velocity_factor
    ckpt = load_checkpoint(shipped / f"model_{iteration}.pt")
    assert (ckpt["iteration"], ckpt["config"]["task"], ckpt["config"]["algo"]) == (iteration, "aow_flat_style", algo)
    assert "runner_state" not in ckpt  # stripped: the simulation state only --resume reads
    contract = (shipped / "policy.yaml").read_text()
    assert f"task: aow_flat_style, algorithm: {algo}, iteration: {iteration}" in contract


def test_the_ppo_recipe_adds_the_hip_range_penalty_to_the_full_reward_set():
    """The recipe's dotted key adds one weight: every other Table I / style weight is kept."""
    cfg = load_config_yaml(CONFIGS / "aow_flat_ppo.yaml")
    task, plain = task_config(cfg.task, **cfg.env_overrides), task_config(cfg.task)
    assert task.rewards.weights == {**plain.rewards.weights, "hip_range": -1.0}


def test_rough_recipe():
    """The rough recipe: the flat recipe's terms and trip on the height-scan task, the leg drives'
    torque-speed line, 5 cm height samples, the progress curriculum and the entropy bonus held at 0.001."""
    cfg = load_config_yaml(CONFIGS / "aow_rough_np3o.yaml")
    cfg.validate()
    assert (cfg.task, cfg.algo) == ("aow_rough_style", "np3o") and cfg.network.symmetric_actor is True
    task = task_config(cfg.task, **cfg.env_overrides)
    assert task.observations.height_scan and task.terrain.kind == "rough"
    assert task.sim.leg_actuator == "dc_motor" and task.terrain.curriculum_distance == "along_command"
    assert task.terrain.horizontal_scale == 0.05  # 72 deg risers, not 56 deg ramps
    assert task.rewards.air_time_gate == "moving" and task.commands.reversal_share == 0.2
    assert task.terminations.joint_speed_trip == ControllerConfig().joint_velocity_factor
    assert (cfg.ppo.entropy_coef, cfg.ppo.entropy_coef_final) == (0.001, 0.001)
    assert (cfg.algo_params.kappa_init, cfg.algo_params.kappa_max) == (0.1, 0.2)


def test_the_ppo_rough_recipe_is_the_np3o_one_with_ppo_s_rewards():
    """PPO's rough recipe: every task setting of the N-P3O recipe, plus the flat PPO recipe's
    constraint rewards and hip-range penalty and Table I's joint-speed penalty 10 x stronger."""
    ppo, np3o = load_config_yaml(CONFIGS / "aow_rough_ppo.yaml"), load_config_yaml(CONFIGS / "aow_rough_np3o.yaml")
    ppo.validate()
    assert (ppo.task, ppo.algo) == ("aow_rough_style", "ppo")
    assert ppo.network == np3o.network and ppo.ppo == np3o.ppo and ppo.num_envs == np3o.num_envs
    task, np3o_task = task_config(ppo.task, **ppo.env_overrides), task_config(np3o.task, **np3o.env_overrides)
    for section in ("commands", "terminations", "costs", "observations", "terrain", "sim"):
        assert getattr(task, section) == getattr(np3o_task, section), section
    assert task.rewards.constraint_rewards and not np3o_task.rewards.constraint_rewards
    assert task.rewards.weights == {**np3o_task.rewards.weights, "hip_range": -1.0}
    default_speed = task_config(ppo.task).rewards.constraint_weights["speed_limits"]
    assert task.rewards.constraint_weights == {
        **np3o_task.rewards.constraint_weights,
        "speed_limits": 10 * default_speed,
    }
    assert default_speed == pytest.approx(-0.1)  # Table I's
    # legged_gym's velocity kernel exp(-4 e^2) for both (the style tasks'), not Table I's exp(-2 e^2)
    assert task.rewards.tracking_sharpness == np3o_task.rewards.tracking_sharpness == 4.0


def test_the_ppo_rough_line_trains_with_the_ppo_rough_recipe():
    """The PPO rough lines in progress (policies/runs/rough_track_ppo, reached branch by branch, and
    its second fork from it. 1600, rough_track1600_ppo) saved the recipe's settings: the recipe
    says what those lines are."""
    runs = Path(__file__).resolve().parents[1] / "policies" / "runs"
    recipe = load_config_yaml(CONFIGS / "aow_rough_ppo.yaml")
    recipe_task = task_config(recipe.task, **recipe.env_overrides)
    for line in ("rough_track_ppo", "rough_track1600_ppo", "rough_track1600b_ppo"):
        cfg = load_config_yaml(runs / line / "config.yaml")
        assert (cfg.task, cfg.algo, cfg.num_envs) == (recipe.task, recipe.algo, recipe.num_envs), line
        assert cfg.network == recipe.network and cfg.algo_params == recipe.algo_params and cfg.ppo == recipe.ppo
        task = task_config(cfg.task, **cfg.env_overrides)
        for section in ("rewards", "commands", "terminations", "costs", "observations", "terrain", "sim"):
            assert getattr(task, section) == getattr(recipe_task, section), (line, section)


@pytest.mark.parametrize(
    ("name", "algo", "iteration"), [("aow_rough_np3o", "np3o", 1234), ("aow_rough_ppo", "ppo", 1618)]
)
def test_the_shipped_rough_policies_were_trained_with_their_rough_recipes(name, algo, iteration):
    """Each shipped rough policy's saved config is its recipe's (reached branch by branch), and its
    checkpoint (stripped) and ONNX contract name the task, the algorithm, the iteration and the
    leg drive model it trained with."""
    from training.checkpoint import load_checkpoint

    shipped = Path(__file__).resolve().parents[1] / "policies" / name
    recipe = load_config_yaml(CONFIGS / f"{name}.yaml")
    cfg = load_config_yaml(shipped / "config.yaml")
    assert (cfg.task, cfg.algo, cfg.num_envs) == (recipe.task, recipe.algo, recipe.num_envs)
    assert cfg.network == recipe.network and cfg.algo_params == recipe.algo_params and cfg.ppo == recipe.ppo
    task, recipe_task = task_config(cfg.task, **cfg.env_overrides), task_config(recipe.task, **recipe.env_overrides)
    for section in ("rewards", "commands", "terminations", "costs", "observations", "terrain", "sim"):
        assert getattr(task, section) == getattr(recipe_task, section), section
    ckpt = load_checkpoint(shipped / f"model_{iteration}.pt")
    assert (ckpt["iteration"], ckpt["config"]["task"], ckpt["config"]["algo"]) == (iteration, "aow_rough_style", algo)
    assert "runner_state" not in ckpt
    contract = (shipped / "policy.yaml").read_text()
    assert f"task: aow_rough_style, algorithm: {algo}, iteration: {iteration}" in contract
    assert "leg_actuator: dc_motor" in contract
