"""Simulator fidelity: the backends' health counters (contact overflows, solver limits; logged in
training as sim/<key>).

MuJoCo Warp runs on warp's CPU device here. Its kernels are compiled on first use and cached in
~/.cache/warp; the warp tests share one scene type (the wheeled robot on a height field), so one
compilation serves them all.
"""

from __future__ import annotations

import math
import warnings

import mujoco
import numpy as np
import pytest
import torch

from aow_policy.robot import load_robot
from training.envs import make_env
from training.mdp.math import quat_from_yaw
from training.sim.backends.base import SIM_STATS, PhysicsRandomization
from training.sim.backends.factory import create_backend
from training.sim.backends.scene import SolverConfig
from training.sim.terrain import Terrain

# MuJoCo Warp's once-per-run notices of what it counts; the tests that plant them check them.
pytestmark = pytest.mark.filterwarnings("ignore:MuJoCo Warp:RuntimeWarning")

SHARES = {k for k in SIM_STATS if k.startswith("overflow_") or k.endswith("_limit")}
C_KEYS = {
    "contacts_per_world",
    "contacts_max",
    "constraint_rows_max",
    "solver_iterations",
    "solver_iteration_limit",
    "overflow_contacts",
    "overflow_constraints",
    "overflow_hfield",
}


@pytest.fixture(scope="module")
def robot():
    return load_robot()


def backend(name: str, robot, terrain: Terrain | None, num_envs: int, **kwargs):
    return create_backend(
        name,
        robot=robot,
        wheeled=True,
        terrain=terrain,
        num_envs=num_envs,
        solver=kwargs.pop("solver", SolverConfig()),
        randomization=PhysicsRandomization(),
        num_threads=1,
        **kwargs,
    )


def check_stats(stats: dict[str, float], expected_keys: set[str], iterations: int = 20) -> None:
    assert set(stats) == expected_keys
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    for key in expected_keys & SHARES:
        assert 0.0 <= stats[key] <= 1.0, (key, stats[key])
    assert 0.0 <= stats["solver_iterations"] <= iterations
    assert 0.0 <= stats["contacts_per_world"] <= stats["contacts_max"] <= stats["constraint_rows_max"]


# ---- counters -----------------------------------------------------------------------------


def flat_field() -> Terrain:
    """4 m x 4 m of flat height field at 0.1 m (the rough terrain's resolution)."""
    return Terrain.from_heights(np.zeros((41, 41)), -2.0, -2.0, 0.1)


def standing_and_pressed(robot, standing_height: float):
    """World 0 stands on its wheels; world 1 lies on its back, turned 45 degrees, its base 5 cm
    into the ground: its 1.05 m base geoms then meet the 0.1 m grid in more than 50 prisms."""
    back = np.zeros(4)
    mujoco.mju_axisAngle2Quat(back, np.array([1.0, 0.0, 0.0]), math.pi)
    turned = np.zeros(4)
    mujoco.mju_mulQuat(turned, quat_from_yaw(torch.tensor(math.pi / 4)).numpy().astype(np.float64), back)
    pos = torch.tensor([[0.0, 0.0, standing_height + 0.01], [0.0, 0.0, 0.03]])
    quat = torch.tensor(np.stack([[1.0, 0.0, 0.0, 0.0], turned]), dtype=torch.float32)
    joint_pos = torch.tensor(robot.default_positions, dtype=torch.float32).expand(2, -1).clone()
    return pos, quat, torch.zeros(2, 3), torch.zeros(2, 3), joint_pos, torch.zeros(2, 16)


def test_c_mujoco_sim_stats_reach_the_env_infos():
    env = make_env("aow_flat", 3, domain_rand={"push_robots": False}, init={"random_episode_start": False})
    try:
        env.reset()
        for _ in range(25):  # 0.5 s: the robots have landed from their spawn clearance
            _, _, _, _, infos = env.step(torch.zeros(3, env.num_actions))
        stats = infos["sim_stats"]
        check_stats(stats, C_KEYS)
        # On their wheels: one contact per wheel on a plane, and a four-wheel stance need not
        # load all four (a robot here stood on three).
        assert 3.0 <= stats["contacts_per_world"] <= 4.0 and stats["contacts_max"] <= 8.0
        assert stats["solver_iterations"] >= 1.0
        assert stats["overflow_hfield"] == 0.0 and stats["solver_iteration_limit"] == 0.0
    finally:
        env.close()


def test_c_mujoco_counts_the_height_field_cap_and_the_solver_limit(robot):
    be = backend("mujoco", robot, flat_field(), 2)
    try:
        be.reset(torch.arange(2), *standing_and_pressed(robot, be.standing_height))
        targets = torch.tensor(robot.default_positions, dtype=torch.float32).expand(2, -1).clone()
        targets[:, 12:] = 0.0  # wheels: velocity targets
        be.step(targets)
        stats = be.sim_stats()
        check_stats(stats, C_KEYS)
        assert stats["overflow_hfield"] == 0.5  # the pressed world only
        assert stats["contacts_max"] >= 2 * mujoco.mjMAXCONPAIR
        for _ in range(10):  # pushed out of the ground, it no longer meets the cap
            be.step(targets)
        assert be.sim_stats()["overflow_hfield"] == 0.0
    finally:
        be.close()
    # A robot landing from 5 cm next to a standing one: with the default 20 iterations Newton
    # converges at every step; capped at 4 it stops unconverged (fewer blew up here: 3 did).
    limits = {}
    for iterations in (20, 4):
        be = backend("mujoco", robot, flat_field(), 2, solver=SolverConfig(iterations=iterations))
        try:
            pos, quat, *rest = standing_and_pressed(robot, be.standing_height)
            quat[1] = torch.tensor([1.0, 0.0, 0.0, 0.0])
            pos[1, 2] = be.standing_height + 0.05
            be.reset(torch.arange(2), pos, quat, *rest)
            targets = torch.tensor(robot.default_positions, dtype=torch.float32).expand(2, -1).clone()
            targets[:, 12:] = 0.0
            limits[iterations] = []
            for _ in range(10):
                be.step(targets)
                stats = be.sim_stats()
                check_stats(stats, C_KEYS, iterations)
                limits[iterations].append(stats["solver_iteration_limit"])
            assert bool(be.state().healthy.all())
        finally:
            be.close()
    assert max(limits[20]) == 0.0 and max(limits[4]) >= 0.5, limits


def test_mujoco_warp_counts_planted_overflows(robot):
    """The pressed world meets the height field's cap; a contact budget below the broadphase's
    candidate pairs (every robot geom is one with the height field, whose bounds cover the
    terrain) overflows the buffer all worlds share; 4 solver iterations do not settle a landing
    robot. Each is counted, and only in the steps where it happens."""
    pytest.importorskip("mujoco_warp")
    keys = set(SIM_STATS)
    be = backend("mujoco_warp", robot, flat_field(), 2)
    try:
        start = standing_and_pressed(robot, be.standing_height)
        be.reset(torch.arange(2), *start)
        targets = torch.tensor(robot.default_positions, dtype=torch.float32).expand(2, -1).clone()
        targets[:, 12:] = 0.0
        be.step(targets)
        with pytest.warns(RuntimeWarning, match="overflow_hfield in 50.000% of the worlds"):
            stats = be.sim_stats()  # said once per run, on the console
        check_stats(stats, keys)
        assert stats["overflow_hfield"] == 0.5  # the pressed world only
        assert stats["overflow_contacts"] == 0.0 and stats["solver_iteration_limit"] == 0.0
        for _ in range(10):  # pushed out of the ground: MuJoCo Warp's sticky bit is cleared per step
            be.step(targets)
        assert be.sim_stats()["overflow_hfield"] == 0.0
        be.reset(torch.arange(2), *start)
        be.step(targets)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # counted again, not said again
            assert be.sim_stats()["overflow_hfield"] == 0.5
    finally:
        be.close()

    be = backend("mujoco_warp", robot, flat_field(), 2, warp_nconmax=8)  # the standing robot's 8 contacts
    try:
        be.reset(torch.arange(2), *standing_and_pressed(robot, be.standing_height))
        be.step(targets)
        assert be.sim_stats()["overflow_contacts"] == 1.0
    finally:
        be.close()

    limits = {}
    for iterations in (20, 4):
        be = backend("mujoco_warp", robot, flat_field(), 2, solver=SolverConfig(iterations=iterations))
        try:
            pos, quat, *rest = standing_and_pressed(robot, be.standing_height)
            quat[1] = torch.tensor([1.0, 0.0, 0.0, 0.0])
            pos[1, 2] = be.standing_height + 0.05
            be.reset(torch.arange(2), pos, quat, *rest)
            limits[iterations] = []
            for _ in range(10):
                be.step(targets)
                stats = be.sim_stats()
                check_stats(stats, keys, iterations)
                limits[iterations].append(stats["solver_iteration_limit"])
            assert bool(be.state().healthy.all())
        finally:
            be.close()
    assert max(limits[20]) == 0.0 and max(limits[4]) >= 0.5, limits
