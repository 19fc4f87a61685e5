"""Simulator fidelity: the backends' health counters (contact overflows, solver limits; logged in
training as sim/<key>) and MuJoCo Warp against C MuJoCo on rough terrain and flat ground.

MuJoCo Warp runs on warp's CPU device here. Its kernels are compiled on first use and cached in
~/.cache/warp; the warp tests share one scene type (the wheeled robot on a height field), so one
compilation serves them all, and the plane scene's kernels are compiled only by the slow test.
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
from training.sim.terrain import Terrain, TerrainConfig

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


def standing_targets(robot, n: int = 2) -> torch.Tensor:
    """Joint targets holding the default pose: leg positions, wheel velocities 0."""
    targets = torch.tensor(robot.default_positions, dtype=torch.float32).expand(n, -1).clone()
    targets[:, 12:] = 0.0  # wheels: velocity targets
    return targets


def iteration_limit_shares(name: str, robot, keys: set[str]) -> dict[int, list[float]]:
    """A robot landing from 5 cm next to a standing one, 10 steps with the solver capped at 20 and
    at 4 iterations: the share of worlds at the iteration limit per step, for each cap."""
    limits: dict[int, list[float]] = {}
    for iterations in (20, 4):
        be = backend(name, robot, flat_field(), 2, solver=SolverConfig(iterations=iterations))
        try:
            pos, quat, *rest = standing_and_pressed(robot, be.standing_height)
            quat[1] = torch.tensor([1.0, 0.0, 0.0, 0.0])
            pos[1, 2] = be.standing_height + 0.05
            be.reset(torch.arange(2), pos, quat, *rest)
            targets = standing_targets(robot)
            limits[iterations] = []
            for _ in range(10):
                be.step(targets)
                stats = be.sim_stats()
                check_stats(stats, keys, iterations)
                limits[iterations].append(stats["solver_iteration_limit"])
            assert bool(be.state().healthy.all())
        finally:
            be.close()
    return limits


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
        targets = standing_targets(robot)
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
    limits = iteration_limit_shares("mujoco", robot, C_KEYS)
    assert max(limits[20]) == 0.0 and max(limits[4]) >= 0.5, limits


def test_mujoco_warp_counts_planted_overflows(robot):
    """The pressed world meets the height field's cap; a contact budget below the broadphase's
    candidate pairs (every robot geom is one with the height field, whose bounds cover the
    terrain) overflows the buffer all worlds share; 4 solver iterations do not settle a landing
    robot. Each is counted, and only in the steps where it happens."""
    keys = set(SIM_STATS)
    be = backend("mujoco_warp", robot, flat_field(), 2)
    try:
        start = standing_and_pressed(robot, be.standing_height)
        be.reset(torch.arange(2), *start)
        targets = standing_targets(robot)
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

    limits = iteration_limit_shares("mujoco_warp", robot, keys)
    assert max(limits[20]) == 0.0 and max(limits[4]) >= 0.5, limits


# ---- MuJoCo Warp against C MuJoCo -----------------------------------------------------------


def small_rough_terrain() -> Terrain:
    """Four 4 m tiles at full difficulty (stairs, blocks, slope, bumps) at the rough terrain's
    0.1 m resolution; 8 cm steps and blocks and a 0.25 slope, so a robot standing on them stays
    up for the second the test runs (at 0.23 m a four-wheel stance across steps topples, and the
    two simulators then part ways by chaos, not by a contact error)."""
    cfg = TerrainConfig(
        kind="rough",
        num_rows=1,
        num_cols=4,
        tile_size=4.0,
        border=1.0,
        proportions={"stairs_up": 1.0, "blocks": 1.0, "slope_up": 1.0, "bumps": 1.0},
        step_height=(0.08, 0.0),
        block_height=(0.08, 0.0),
        max_slope=0.25,
        seed=0,
    )
    return Terrain.generate(cfg)


def run_side_by_side(robot, terrain: Terrain | None, xy: torch.Tensor, yaw: torch.Tensor) -> dict[str, np.ndarray]:
    """Both backends from the same states (dropped from 2 cm above the highest ground under the
    robot) with the same joint targets for 1 s: legs swaying 0.1 rad at 1 Hz, wheels driving at
    2 rad/s after 0.3 s. Returns per world the largest differences and the mean number of wheels
    on the ground over the last 0.5 s."""
    n = xy.shape[0]
    c, w = backend("mujoco", robot, terrain, n), backend("mujoco_warp", robot, terrain, n)
    try:
        around = torch.stack(
            torch.meshgrid(torch.linspace(-0.6, 0.6, 13), torch.linspace(-0.6, 0.6, 13), indexing="ij"), -1
        ).reshape(-1, 2)
        ground = torch.stack([c.height_sampler(xy[i] + around).max() for i in range(n)])
        pos = torch.cat([xy, (ground + c.standing_height + 0.02)[:, None]], 1)
        joint_pos = torch.tensor(robot.default_positions, dtype=torch.float32).expand(n, -1).clone()
        start = (pos, quat_from_yaw(yaw), torch.zeros(n, 3), torch.zeros(n, 3), joint_pos, torch.zeros(n, 16))
        c.reset(torch.arange(n), *start)
        w.reset(torch.arange(n), *start)
        is_leg = torch.tensor([j.kind == "leg" for j in robot.joints])
        wheels = c.scene.info.contact_geom_ids
        floor = c.scene.floor_geom_id
        worst = {"height": np.zeros(n), "velocity": np.zeros(n), "joints": np.zeros(n)}
        on_ground = {"mujoco": [], "mujoco_warp": []}
        steps = round(1.0 / robot.rates.policy_dt)
        for k in range(steps):
            t = k * robot.rates.policy_dt
            targets = joint_pos.clone()
            targets[:, is_leg] += 0.1 * math.sin(2 * math.pi * t)
            targets[:, ~is_leg] = 2.0 if t > 0.3 else 0.0
            c.step(targets)
            w.step(targets)
            sc, sw = c.state(), w.state()
            assert bool(sw.healthy.all())
            for key, a, b in (
                ("height", sc.base_pos[:, 2:], sw.base_pos[:, 2:]),
                ("velocity", sc.base_lin_vel, sw.base_lin_vel),
                ("joints", sc.joint_pos, sw.joint_pos),
            ):
                worst[key] = np.maximum(
                    worst[key], (a - b).norm(dim=1).numpy() if key == "velocity" else (a - b).abs().amax(1).numpy()
                )
            if t >= 0.5:
                on_ground["mujoco"].append([_wheels_on(d.contact.geom[: d.ncon], wheels, floor) for d in c.datas])
                nacon = int(w.d.nacon.numpy()[0])
                geom, world = w.d.contact.geom.numpy()[:nacon], w.d.contact.worldid.numpy()[:nacon]
                on_ground["mujoco_warp"].append([_wheels_on(geom[world == i], wheels, floor) for i in range(n)])
        out = {f"{k}_diff": v for k, v in worst.items()}
        out |= {f"wheels_on_ground_{k}": np.mean(v, axis=0) for k, v in on_ground.items()}
        return out
    finally:
        c.close(), w.close()


def _wheels_on(pairs: np.ndarray, wheels: np.ndarray, floor: int) -> int:
    touching = {int(b) if int(a) == floor else int(a) for a, b in pairs if floor in (int(a), int(b))}
    return len(touching & {int(g) for g in wheels})


def test_mujoco_warp_matches_c_mujoco_on_rough_terrain(robot):
    """Robots on stairs, blocks, a slope and bumps. Tolerances, against the largest differences
    seen (0.8 mm, 0.034 m/s, 0.025 rad): float32 against float64 and MuJoCo Warp's at most 4
    contacts per geom and height field (C MuJoCo: one per prism touched) move the robots by
    millimetres; a dropped wheel contact sinks a base by centimetres, and before the height-field
    fix (training.sim.backends.warp_fixes) the robot on the bumps was 4.8 cm lower, 0.41 m/s and
    0.59 rad apart after one phantom contact."""
    terrain = small_rough_terrain()
    assert terrain.types == ["stairs_up", "blocks", "slope_up", "bumps"]
    # Off the flat spawn platforms: wheels on step edges, blocks, the slope and the bumps.
    xy = torch.tensor(terrain.origins[0, :, :2], dtype=torch.float32) + torch.tensor(
        [[-1.6, 0.0], [-1.3, 0.4], [-1.8, 0.0], [-1.0, -0.5]]
    )
    r = run_side_by_side(robot, terrain, xy, torch.tensor([0.0, 0.3, 0.0, 1.0]))
    assert (r["height_diff"] < 0.005).all(), r
    assert (r["velocity_diff"] < 0.1).all(), r
    assert (r["joints_diff"] < 0.1).all(), r
    # Which wheels touch: the same but for a wheel at zero distance now and then (contact counts
    # differ by design: MuJoCo Warp keeps at most 4 contacts per geom and height field).
    assert (np.abs(r["wheels_on_ground_mujoco"] - r["wheels_on_ground_mujoco_warp"]) <= 0.5).all(), r
    assert (r["wheels_on_ground_mujoco"] >= 3.0).all(), r  # standing on the terrain, not falling


@pytest.mark.slow
def test_mujoco_warp_matches_c_mujoco_on_flat_ground(robot):
    """The same on the plane of aow_flat (its own kernels: slow with a cold warp cache).
    Largest differences seen: 0.2 mm, 0.013 m/s, 0.006 rad."""
    xy = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    r = run_side_by_side(robot, None, xy, torch.tensor([0.0, 0.7, -1.0, 2.0]))
    assert (r["height_diff"] < 0.002).all(), r
    assert (r["velocity_diff"] < 0.05).all(), r
    assert (r["joints_diff"] < 0.02).all(), r
    assert (r["wheels_on_ground_mujoco"] == r["wheels_on_ground_mujoco_warp"]).all(), r
    assert (r["wheels_on_ground_mujoco"] >= 3.0).all(), r


# ---- MuJoCo Warp's height-field contacts ------------------------------------------------------

# Two states where MuJoCo Warp 4.0.0 reported a height-field contact pointing into the terrain
# (qpos: base position, quaternion, then the joints in model order). WHEEL_ON_BUMPS: the robot on
# the bumps of small_rough_terrain() in the rough-terrain comparison above, landing; unfixed, its
# right front wheel got a contact 9.7 cm deep with a downward normal (C MuJoCo: 4.4 mm up and a
# 0.9 mm side contact). SHANK_ON_ROUGH: the flat policy on aow_rough's terrain; the left hind
# shank tube (a capsule) got one 12.4 cm deep, pointing down, where C MuJoCo finds no contact.
WHEEL_ON_BUMPS = [
    -0.9949337840080261, 5.500380516052246, 0.6236339211463928, 0.8761652112007141, -0.010651400312781334,
    -0.00944079551845789, 0.4818008244037628, 0.04202275350689888, 0.41627058386802673, -0.7503232955932617,
    -0.0011125903110951185, 0.04516540467739105, 0.4248121976852417, -0.7569203972816467, -0.0012908442877233028,
    0.04833156242966652, -0.47467952966690063, 0.9947924017906189, -0.047988299280405045, 0.054960478097200394,
    -0.37221699953079224, 0.8415354490280151, -0.001316094072535634,
]  # fmt: skip
SHANK_ON_ROUGH = [
    13.43450927734375, 36.714019775390625, 0.4719817042350769, 0.35187089443206787, -0.05090026929974556,
    -0.15770672261714935, -0.9212625622749329, -0.6549167037010193, 0.6592715382575989, -1.2552145719528198,
    -11.19835090637207, -0.465334951877594, 0.45255786180496216, -0.8981862664222717, -10.765911102294922,
    -0.0075348783284425735, -0.85847008228302, 0.4455404281616211, -18.753646850585938, -0.4924505949020386,
    -1.339133620262146, 1.5103219747543335, -22.089025497436523,
]  # fmt: skip


def contacts_at(be, qpos: list[float]) -> list[tuple[str, float, float, bool]]:
    """Put world 0 of ``be`` in ``qpos`` at rest; its contacts as (robot geom, depth, normal z
    from the ground up, used by the solver)."""
    q = torch.tensor([qpos], dtype=torch.float32)
    info = be.scene.info
    be.reset(
        torch.arange(1),
        q[:, :3],
        q[:, 3:7],
        torch.zeros(1, 3),
        torch.zeros(1, 3),
        q[:, info.qpos_adr],
        torch.zeros(1, 16),
    )
    model = be.scene.model
    name = lambda g: mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, int(g))  # noqa: E731
    if hasattr(be, "datas"):
        d = be.datas[0]
        return [
            (name(g[1]), float(x), float(f[2]), True)
            for g, x, f in zip(
                d.contact.geom[: d.ncon], d.contact.dist[: d.ncon], d.contact.frame[: d.ncon], strict=True
            )
        ]
    c, n = be.d.contact, int(be.d.nacon.numpy()[0])
    rows = zip(c.geom.numpy()[:n], c.dist.numpy()[:n], c.frame.numpy()[:n], c.type.numpy()[:n], strict=True)
    return [(name(g[1]), float(x), float(f[0, 2]), bool(t & 1)) for g, x, f, t in rows]


def test_mujoco_warp_wheel_contacts_on_a_height_field_match_c_mujoco(robot):
    """The height-field witness fix: the right front wheel landing on the bumps gets C MuJoCo's
    two contacts (4.4 mm up, 0.9 mm sideways), nothing pointing into the terrain and nothing
    dropped by the contact filter (which would hide an unfixed witness)."""
    terrain = small_rough_terrain()
    c, w = backend("mujoco", robot, terrain, 1), backend("mujoco_warp", robot, terrain, 1)
    try:
        assert w.height_field_fix
        expected = sorted(round(x, 4) for g, x, _, _ in contacts_at(c, WHEEL_ON_BUMPS) if g == "RF_WHEEL")
        got = [(x, nz, used) for g, x, nz, used in contacts_at(w, WHEEL_ON_BUMPS) if g == "RF_WHEEL"]
        assert all(used and nz > -0.5 for _, nz, used in got), got
        assert min(x for x, _, _ in got) == pytest.approx(expected[0], abs=5e-4)  # the deepest: 4.4 mm
        assert any(abs(nz) < 0.1 and x == pytest.approx(-0.0009, abs=3e-4) for x, nz, _ in got), got  # the side contact
        assert -0.0045 < expected[0] < -0.0043
    finally:
        c.close(), w.close()


def test_mujoco_warp_drops_and_counts_contacts_pointing_into_the_terrain(robot):
    terrain = Terrain.generate(TerrainConfig(kind="rough"))
    c, w = backend("mujoco", robot, terrain, 1), backend("mujoco_warp", robot, terrain, 1)
    try:
        assert not [x for x in contacts_at(c, SHANK_ON_ROUGH) if x[0] == "LH_SHANK_tube"]
        shank = [x for x in contacts_at(w, SHANK_ON_ROUGH) if x[0] == "LH_SHANK_tube"]
        assert len(shank) == 1 and shank[0][1] < -0.1 and shank[0][2] < -0.9 and not shank[0][3], shank
        # Not sensed either: the env's contact costs and terminations see what C MuJoCo sees.
        assert torch.equal(w.state().contacts, c.state().contacts)
        with pytest.warns(RuntimeWarning, match="contacts_into_terrain"):
            w.step(torch.tensor(robot.default_positions, dtype=torch.float32)[None])
            assert w.sim_stats()["contacts_into_terrain"] == 1.0
    finally:
        c.close(), w.close()
