"""Simulator backends: C MuJoCo thread pool determinism, physics randomisation, pushes,
blow-up detection, and MuJoCo Warp against C MuJoCo."""

from __future__ import annotations

import copy
import math

import mujoco
import numpy as np
import pytest
import torch

from aow_policy.robot import load_robot
from training.envs import make_env
from training.mdp.math import quat_from_yaw
from training.sim.backends.base import PhysicsRandomization
from training.sim.backends.factory import create_backend
from training.sim.backends.scene import SolverConfig, apply_params, build_scene, nominal_params
from training.sim.model import LegActuator


@pytest.fixture(scope="module")
def robot():
    return load_robot()


def backend(name: str, robot, num_envs: int = 3, randomization=None, num_threads=None, leg_actuator=None):
    return create_backend(
        name,
        robot=robot,
        wheeled=True,
        terrain=None,
        num_envs=num_envs,
        solver=SolverConfig(),
        randomization=randomization or PhysicsRandomization(),
        num_threads=num_threads,
        leg_actuator=leg_actuator,
    )


def start_states(robot, n: int):
    """Standing robots with different headings, velocities and one bent leg."""
    pos = torch.tensor([[0.0, 0.0, 0.625], [1.0, 0.5, 0.63], [0.0, 0.0, 0.62]])[:n]
    quat = quat_from_yaw(torch.tensor([0.0, 0.7, -1.0])[:n])
    lin = torch.tensor([[0.2, 0.0, 0.0], [0.0, -0.3, 0.1], [0.0, 0.0, 0.0]])[:n]
    ang = torch.tensor([[0.0, 0.0, 0.1], [0.1, 0.0, 0.0], [0.0, 0.0, 0.0]])[:n]
    joint_pos = torch.tensor(robot.default_positions, dtype=torch.float32).expand(n, -1).clone()
    joint_pos[1, 1] += 0.2
    return pos, quat, lin, ang, joint_pos, torch.zeros(n, 16)


def targets_sequence(robot, steps: int, n: int, amplitude: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    offsets = torch.tensor([j.default_position if j.kind == "leg" else 0.0 for j in robot.joints])
    scales = torch.tensor(robot.action_scales, dtype=torch.float32)
    return [offsets + scales * 0.3 * amplitude * torch.randn(n, 16, generator=gen) for _ in range(steps)]


def test_thread_pool_is_deterministic(robot):
    one, two = backend("mujoco", robot, 5, num_threads=1), backend("mujoco", robot, 5, num_threads=2)
    try:
        assert (one.num_threads, two.num_threads) == (1, 2)
        for t in targets_sequence(robot, 10, 5):
            one.step(t)
            two.step(t)
        assert torch.equal(one.state().joint_pos, two.state().joint_pos)
        assert torch.equal(one.state().base_lin_vel, two.state().base_lin_vel)
    finally:
        one.close(), two.close()


def test_state_matches_mjdata(robot):
    be = backend("mujoco", robot, 2)
    try:
        be.reset(torch.arange(2), *start_states(robot, 2))
        be.step(targets_sequence(robot, 1, 2)[0])
        s, d, info = be.state(), be.datas[1], be.scene.info
        np.testing.assert_allclose(s.joint_pos[1].numpy(), d.qpos[info.qpos_adr], atol=1e-6)
        np.testing.assert_allclose(s.joint_torque[1].numpy(), d.actuator_force[info.actuator_ids], atol=1e-4)
        inverse, lin_b = np.zeros(4), np.zeros(3)
        mujoco.mju_negQuat(inverse, d.qpos[3:7])
        mujoco.mju_rotVecQuat(lin_b, d.qvel[0:3], inverse)
        np.testing.assert_allclose(s.base_lin_vel[1].numpy(), lin_b, atol=1e-5)
        assert abs(float(s.joint_torque.abs().max())) <= 80.0 + 1e-3  # the contract's actuator limit
    finally:
        be.close()


def test_physics_variants_scale_gains_mass_and_friction(robot):
    scene = build_scene(True)
    model = copy.copy(scene.model)
    params = nominal_params(scene)
    params[:] = [0.4, 2.0, 1.5, 0.5, 0.9]  # friction, added mass, kp, kd, strength
    apply_params(model, scene, params)
    info, base = scene.info, scene.model
    leg, wheel = info.actuator_ids[0], info.actuator_ids[12]
    assert model.geom_friction[scene.floor_geom_id, 0] == pytest.approx(0.4)
    assert model.body_mass[info.base_body_id] == pytest.approx(base.body_mass[info.base_body_id] + 2.0)
    assert model.actuator_gainprm[leg, 0] == pytest.approx(80.0 * 1.5 * 0.9)  # kp
    assert model.actuator_biasprm[leg, 1] == pytest.approx(-80.0 * 1.5 * 0.9)
    assert model.actuator_biasprm[leg, 2] == pytest.approx(-2.0 * 0.5 * 0.9)  # kd
    assert model.actuator_gainprm[wheel, 0] == pytest.approx(4.0 * 0.5 * 0.9)  # wheel loop gain
    assert model.actuator_biasprm[wheel, 2] == pytest.approx(-4.0 * 0.5 * 0.9)
    assert scene.model.actuator_gainprm[leg, 0] == 80.0  # the scene's model is untouched

    rand = PhysicsRandomization(friction=(0.5, 1.25), added_base_mass=(-1.0, 3.0), num_variants=4)
    be = backend("mujoco", robot, 8, randomization=rand)
    try:
        assert len(be.models) == 4
        p = be.physics_params()
        assert p.shape == (8, 5) and ((p[:, 0] >= 0.5) & (p[:, 0] <= 1.25)).all()
        for i in range(8):
            m = be.env_models[i]
            assert m.geom_friction[scene.floor_geom_id, 0] == pytest.approx(float(p[i, 0]))
        before = be.env_variant.copy()
        for _ in range(5):
            be.reset(torch.arange(3), *start_states(robot, 3))
        assert not np.array_equal(before[:3], be.env_variant[:3]) or len(set(be.env_variant[:3])) > 1
        assert np.array_equal(before[3:], be.env_variant[3:])  # envs not reset keep their variant
    finally:
        be.close()


def test_push_adds_world_velocity(robot):
    be = backend("mujoco", robot, 2)
    try:
        be.reset(torch.arange(2), *start_states(robot, 2))
        v0 = be.datas[1].qvel[0:3].copy()
        be.push(torch.tensor([1]), torch.tensor([[0.5, -0.25]]))
        np.testing.assert_allclose(be.datas[1].qvel[0:3], v0 + np.array([0.5, -0.25, 0.0]))
        assert be.state().base_lin_vel.shape == (2, 3)
    finally:
        be.close()


def test_blow_up_is_detected_counted_and_reset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warning to MUJOCO_LOG.TXT in the working directory
    env = make_env("aow_flat", 3, domain_rand={"push_robots": False}, init={"random_episode_start": False})
    try:
        env.reset()
        env.sim.datas[2].qvel[0] = math.nan  # MuJoCo resets such data itself, with a warning
        obs, rewards, costs, dones, infos = env.step(torch.zeros(3, env.num_actions))
        assert dones.tolist() == [False, False, True] and not infos["time_outs"].any()
        assert infos["sim_failures"] == 1 and infos["episode"]["sim_failures"] == 1.0
        assert rewards[2] == 0 and (costs[2] == 0).all()
        assert all(bool(torch.isfinite(v).all()) for v in obs.values())
        _, _, _, dones, _ = env.step(torch.zeros(3, env.num_actions))
        assert not dones.any()  # the reset robot runs normally again
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("leg_model", ["pd", "dc_motor"])
def test_mujoco_warp_matches_c_mujoco_over_20_steps(robot, leg_model):
    """Same initial states and targets on both backends: joint positions agree within 1e-3 rad,
    with either leg drive model (the DC motor's targets are larger, so that its line binds).

    Runs MuJoCo Warp on CPU. The first run compiles warp's kernels (about 2 minutes here);
    with warp's kernel cache warm the test takes about 15 s.
    """
    legs = LegActuator(leg_model)
    c, w = backend("mujoco", robot, 3, leg_actuator=legs), backend("mujoco_warp", robot, 3, leg_actuator=legs)
    amplitude = 1.0 if leg_model == "pd" else 4.0
    try:
        ids = torch.arange(3)
        c.reset(ids, *start_states(robot, 3))
        w.reset(ids, *start_states(robot, 3))
        assert torch.allclose(c.state().joint_pos, w.state().joint_pos, atol=1e-6)
        worst = fastest = 0.0
        for targets in targets_sequence(robot, 20, 3, amplitude):
            c.step(targets)
            w.step(targets)
            worst = max(worst, float((c.state().joint_pos - w.state().joint_pos).abs().max()))
            fastest = max(fastest, float(c.state().joint_vel[:, :12].abs().max()))
        assert worst < 1e-3, f"joint positions differ by up to {worst} rad"
        assert torch.allclose(c.state().base_pos, w.state().base_pos, atol=1e-3)
        assert bool(w.state().healthy.all())
        assert [d.ncon for d in c.datas] != [0, 0, 0]  # the wheels were in contact throughout
        if leg_model == "dc_motor":
            assert fastest > 4.0  # legs well into the line's region (it binds above 2.5 rad/s at full torque)
    finally:
        c.close(), w.close()


@pytest.mark.slow
def test_mujoco_warp_randomizes_the_dc_motor_servo_and_keeps_the_line(robot):
    rand = PhysicsRandomization(kp_scale=(1.5, 1.5), kd_scale=(0.5, 0.5), motor_strength=(0.9, 0.9))
    w = backend("mujoco_warp", robot, 2, randomization=rand, leg_actuator=LegActuator("dc_motor"))
    try:
        gain = w._wp.to_torch(w.m.actuator_gainprm).cpu().numpy()  # [worlds, nu, 10]
        legs, wheel = w.scene.info.actuator_ids[:12], w.scene.info.actuator_ids[12]
        nominal = w.scene.model.actuator_gainprm
        np.testing.assert_allclose(gain[:, legs, 4], 80.0 * 1.5 * 0.9, rtol=1e-6)
        np.testing.assert_allclose(gain[:, legs, 6], 2.0 * 0.5 * 0.9, rtol=1e-6)
        np.testing.assert_allclose(
            gain[:, legs][:, :, [0, 1, 7]], np.broadcast_to(nominal[legs][:, [0, 1, 7]], (2, 12, 3)), rtol=1e-6
        )
        np.testing.assert_allclose(gain[:, wheel, 0], 4.0 * 0.5 * 0.9, rtol=1e-6)
    finally:
        w.close()
