"""The terrain curriculum's "along_command" distance: metres made good along each step's command
(capped at its speed) against the metres commanded, summed over the episode (issue 23)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from training.envs import make_env
from training.sim.terrain import TerrainConfig

SMALL_ROUGH = {
    "terrain.num_rows": 4,
    "terrain.num_cols": 2,
    "terrain.tile_size": 4.0,
    "terrain.border": 2.0,
    "terrain.curriculum_distance": "along_command",
    "domain_rand.push_robots": False,
    "domain_rand.observation_noise": False,
    "commands.resampling_time": 1.0e6,
}


@pytest.fixture(scope="module")
def env():
    env = make_env("aow_rough_style", 4, seed=0, **SMALL_ROUGH)
    env.reset()
    yield env
    env.close()


def test_progress_is_the_velocity_along_the_command_capped_at_its_speed(env):
    env.progress_along_command[:] = 0.0
    env.commanded_path[:] = 0.0
    env.commands[:, :2] = torch.tensor([[1.0, 0.0], [0.0, 0.5], [1.0, 0.0], [0.0, 0.0]])
    s = env.sim.state()
    velocity = torch.tensor([[0.5, 0.3], [0.0, 1.0], [-1.0, 0.0], [0.7, 0.0]])
    s = dataclasses.replace(s, base_lin_vel=torch.cat([velocity, torch.zeros(4, 1)], -1))
    env._accumulate_progress(s)
    env._accumulate_progress(s)
    dt = env.dt
    # 0.5 along +x; 1.0 along +y capped at the 0.5 asked; backward counts nothing; no command, none.
    assert env.progress_along_command.tolist() == pytest.approx([1.0 * dt, 1.0 * dt, 0.0, 0.0])
    assert env.commanded_path.tolist() == pytest.approx([2.0 * dt, 1.0 * dt, 2.0 * dt, 0.0])


def test_levels_move_by_progress_along_the_command_at_the_episode_end(env):
    env.reset()
    env.curriculum.levels[:] = 2
    # Tile 4 m: up past 2 m made good; down below half of the metres asked.
    env.progress_along_command[:] = torch.tensor([2.5, 1.0, 1.5, 0.0])
    env.commanded_path[:] = torch.tensor([3.0, 10.0, 2.0, 0.0])
    env.commands[:, :3] = 0.0  # nothing more is asked or made good on the last step
    env.episode_length[:] = env.max_episode_length - 1  # every episode times out on this step
    _, _, _, dones, infos = env.step(torch.zeros(4, env.num_actions))
    assert dones.all() and infos["time_outs"].all()
    assert env.curriculum.levels.tolist() == [3, 1, 2, 2]
    # The new episodes start from zero.
    assert env.progress_along_command.tolist() == [0.0] * 4
    assert env.commanded_path.tolist() == [0.0] * 4


def test_unknown_curriculum_distance_is_refused_by_name():
    with pytest.raises(ValueError, match=r"terrain\.curriculum_distance.*'odometer'"):
        TerrainConfig(curriculum_distance="odometer").validate()
