"""Issue 23: the left-right mirror of observations and actions (training/mdp/symmetry.py) maps
joints by name with the signs their axes give, is its own inverse, agrees with the simulator (a
mirrored robot state gives the mirrored observation, mirrored actions keep it mirrored), and the
mirror loss trains through every algorithm's update."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from aow_policy.robot import load_robot
from training.algorithms import losses
from training.config import TrainConfig, apply_override
from training.envs import make_env
from training.mdp import symmetry
from training.runner import Runner

WHEELED = [
    "LF_HAA", "LF_HFE", "LF_KFE", "RF_HAA", "RF_HFE", "RF_KFE",
    "LH_HAA", "LH_HFE", "LH_KFE", "RH_HAA", "RH_HFE", "RH_KFE",
    "LF_WHEEL", "RF_WHEEL", "LH_WHEEL", "RH_WHEEL",
]  # fmt: skip


def test_joints_are_mapped_by_name_with_the_signs_of_their_axes():
    names = WHEELED[:]
    random.Random(4).shuffle(names)  # the map must not depend on the order
    mirror = symmetry.joint_mirror(names)
    values = torch.arange(1.0, len(names) + 1)
    out = dict(zip(names, mirror(values).tolist(), strict=True))
    given = dict(zip(names, values.tolist(), strict=True))
    for leg, other in (("LF", "RF"), ("RF", "LF"), ("LH", "RH"), ("RH", "LH")):
        assert out[f"{leg}_HAA"] == -given[f"{other}_HAA"]  # abduction to the left is to the right
        assert out[f"{leg}_HFE"] == given[f"{other}_HFE"]
        assert out[f"{leg}_KFE"] == given[f"{other}_KFE"]
        assert out[f"{leg}_WHEEL"] == given[f"{other}_WHEEL"]  # rolling forward stays forward
    assert torch.equal(mirror(mirror(values)), values)


def test_axis_signs_and_refusals():
    assert symmetry.joint_mirror_sign("LF_HAA") == -1.0
    assert symmetry.joint_mirror_sign("RH_KFE") == 1.0
    assert symmetry.joint_mirror_sign("X_YAW", {"YAW": (0.0, 0.0, 1.0)}) == -1.0
    with pytest.raises(ValueError, match="cannot tell its side"):
        symmetry.mirrored_joint_name("base_joint")
    with pytest.raises(ValueError, match="no mirrored counterpart 'RF_HAA'"):
        symmetry.joint_mirror(["LF_HAA", "LH_HAA", "RH_HAA"])
    with pytest.raises(ValueError, match="neither along nor across"):
        symmetry.joint_mirror_sign("LF_ODD", {"ODD": (1.0, 1.0, 0.0)})


def test_the_contract_is_mirror_symmetric():
    """The default pose and the limits of each joint mirror onto its counterpart's, so joint
    positions relative to the default pose (the observation) mirror like the angles."""
    robot = load_robot()
    names = list(robot.joint_names)
    mirror = symmetry.joint_mirror(names)
    defaults = torch.tensor(robot.default_positions, dtype=torch.float32)
    assert torch.equal(mirror(defaults), defaults)
    for j in robot.joints:
        other = robot.joint(symmetry.mirrored_joint_name(j.name))
        sign = symmetry.joint_mirror_sign(j.name)
        if j.position_limits is not None:
            low, high = sorted(sign * v for v in other.position_limits)
            assert (low, high) == pytest.approx(j.position_limits)
        assert (j.velocity_limit, j.torque_limit, j.kp, j.kd) == (
            other.velocity_limit,
            other.torque_limit,
            other.kp,
            other.kd,
        )


@pytest.mark.parametrize("task", ["aow_flat", "aow_rough"])
def test_observation_mirror_is_its_own_inverse_and_maps_each_term(task):
    env = make_env(task, 1, seed=0)
    try:
        mirrors = symmetry.robot_mirror(env)
        layout = env.obs_spec["policy"]
        obs = torch.randn(5, layout.dim)
        assert torch.equal(mirrors.observations(mirrors.observations(obs)), obs)
        out = mirrors.observations(obs)
        cmd = layout.term("velocity_commands").slice
        assert torch.equal(out[:, cmd], obs[:, cmd] * torch.tensor([1.0, -1.0, -1.0]))
        ang = layout.term("base_ang_vel").slice
        assert torch.equal(out[:, ang], obs[:, ang] * torch.tensor([-1.0, 1.0, -1.0]))
        if layout.has("height_scan"):
            scan = layout.term("height_scan")
            points = env.scan_points.numpy()
            k = int(np.flatnonzero(np.isclose(points[:, 0], 0.3) & np.isclose(points[:, 1], 0.2))[0])
            m = int(np.flatnonzero(np.isclose(points[:, 0], 0.3) & np.isclose(points[:, 1], -0.2))[0])
            assert out[0, scan.offset + k] == obs[0, scan.offset + m]
        actions = torch.randn(5, env.num_actions)
        assert torch.equal(mirrors.actions(mirrors.actions(actions)), actions)
    finally:
        env.close()


def test_an_unknown_observation_term_is_refused():
    from aow_policy.layout import ObservationLayout

    layout = ObservationLayout.build([{"name": "base_lin_vel", "size": 3}, {"name": "foot_phase", "size": 4}])
    with pytest.raises(ValueError, match="'foot_phase': no mirror known"):
        symmetry.observation_mirror(layout, WHEELED)


def _mirror_state(s, i: int, joint_mirror):
    """Robot i's base pose and velocities (base frame) and joints, mirrored in the x-z plane."""
    w, x, y, z = s.base_quat[i]
    quat = torch.stack([w, -x, y, -z])  # M R M for M = diag(1, -1, 1)
    pos = s.base_pos[i] * torch.tensor([1.0, -1.0, 1.0])
    lin = s.base_lin_vel[i] * torch.tensor([1.0, -1.0, 1.0])
    ang = s.base_ang_vel[i] * torch.tensor([-1.0, 1.0, -1.0])
    return pos, quat, lin, ang, joint_mirror(s.joint_pos[i]), joint_mirror(s.joint_vel[i])


def test_the_simulated_robot_agrees_with_the_mirror():
    """Robot 1 is put in the mirror image of robot 0's (asymmetric, moving) state and given the
    mirrored command: its observation is robot 0's mirrored; then, driven with the mirrored
    actions, it stays the mirror image (wheels, HAA signs and all) over 0.4 s of physics."""
    quiet = {
        "push_robots": False,
        "observation_noise": False,
        "friction": None,
        "added_base_mass": None,
        "motor_strength": None,
    }
    env = make_env("aow_flat", 2, seed=5, domain_rand=quiet)
    try:
        env.reset()
        mirrors = symmetry.robot_mirror(env)
        env.resample_steps = 10**9
        gen = torch.Generator().manual_seed(0)
        for _ in range(10):  # robot 0 into an asymmetric, moving state
            env.step(torch.rand(2, env.num_actions, generator=gen) * 2 - 1)
        s = env.sim.state()
        joint_mirror = mirrors.actions  # one entry per joint, in the env's joint order
        pos, quat, lin, ang, qpos, qvel = _mirror_state(s, 0, joint_mirror)
        one = torch.tensor([1])
        env.sim.reset(one, pos[None], quat[None], lin[None], ang[None], qpos[None], qvel[None])
        env.actions[1] = joint_mirror(env.actions[0])
        env.commands[0, :3] = torch.tensor([0.6, 0.3, 0.4])
        env.commands[1, :3] = torch.tensor([0.6, -0.3, -0.4])
        obs = env._observe(env.sim.state())["policy"]
        assert abs(float(s.base_lin_vel[0, 1])) > 0.01 and abs(float(s.base_ang_vel[0, 2])) > 0.01
        assert torch.allclose(obs[1], mirrors.observations(obs[0]), atol=1e-4)
        for _ in range(20):
            a0 = torch.rand(env.num_actions, generator=gen) * 2 - 1
            obs = env.step(torch.stack([a0, joint_mirror(a0)]))[0]["policy"]
        s = env.sim.state()
        assert float(s.joint_vel[0, env.wheel_ids].abs().max()) > 1.0  # the wheels did turn
        assert torch.allclose(obs[1], mirrors.observations(obs[0]), atol=2e-2)
        # A wrong wheel sign would be caught: the same check with the wheels' entries not mirrored.
        wrong = symmetry.Mirror(mirrors.actions.index, mirrors.actions.sign.clone())
        wrong.sign[env.wheel_ids] *= -1
        assert not torch.allclose(s.joint_vel[1], wrong(s.joint_vel[0]), atol=1e-1)
    finally:
        env.close()


def test_mirror_loss_value_and_gradient():
    a = torch.tensor([[1.0, 2.0], [0.0, -1.0]], requires_grad=True)
    b = torch.tensor([[0.0, 2.0], [2.0, -1.0]], requires_grad=True)
    loss = losses.mirror_loss(a, b)
    assert float(loss.detach()) == pytest.approx((1.0 + 4.0) / 4)
    loss.backward()
    assert b.grad is None or torch.count_nonzero(b.grad) == 0  # the target is held fixed
    assert torch.allclose(a.grad, torch.tensor([[0.5, 0.0], [-1.0, 0.0]]))


def _tiny_runner(run_dir, algo: str, iterations: int, override: str) -> Runner:
    """A few-second aow_flat run with small networks and one config override."""
    data = TrainConfig(task="aow_flat", algo=algo, num_envs=4, num_steps_per_env=8, iterations=iterations).to_dict()
    for a in ("network.actor_hidden=[16,16]", "network.critic_hidden=[16,16]", "network.cost_critic_hidden=[16]"):
        apply_override(data, a)
    apply_override(data, override)
    data["env_overrides"] = {"sim.num_threads": 1}
    return Runner(TrainConfig.from_dict(data), run_dir, progress=False, tensorboard=False)


@pytest.mark.parametrize("algo", ["ppo", "np3o"])
def test_the_mirror_loss_trains_and_is_logged(tmp_path, algo):
    runner = _tiny_runner(tmp_path / "run", algo, 2, "ppo.mirror_loss_coef=0.5")
    try:
        assert runner.algo.mirror is not None
        runner.learn()
        record = runner.history[-1]
        assert record["loss/mirror"] > 0  # a freshly initialised actor is not symmetric
        # The total includes the term: with the term taken out again it is another number.
        assert "loss/total" in record
    finally:
        runner.env.close()
    runner.algo.mirror = None
    with pytest.raises(ValueError, match="mirror_loss_coef > 0 needs the robot's mirrors"):
        runner.algo.update(runner.storage, 0)


def test_a_symmetric_actor_mirrors_its_answer():
    """network.symmetric_actor: pi(mirror(o)) = mirror(pi(o)) for any weights and normalizer
    statistics (a plain actor with the same weights is not: the control)."""
    from training.networks import Actor, NetworkConfig

    env = make_env("aow_rough", 1, seed=0)  # with the height scan
    try:
        mirrors = symmetry.robot_mirror(env)
        layout, n = env.obs_spec["policy"], env.num_actions
    finally:
        env.close()
    small = {"actor_hidden": (32, 16), "scan_encoder": (16, 8)}
    torch.manual_seed(0)
    actor = Actor(layout, n, NetworkConfig(**small, symmetric_actor=True))
    m = mirrors
    actor.set_mirror(m.observations.index, m.observations.sign, m.actions.index, m.actions.sign)
    actor.normalizer.update(torch.randn(64, layout.dim) * 3 + 1)  # statistics not symmetric
    plain = Actor(layout, n, NetworkConfig(**small))
    plain.load_state_dict({k: v for k, v in actor.state_dict().items() if not k.startswith("mirror_")})
    obs = torch.randn(8, layout.dim)
    with torch.no_grad():
        assert torch.allclose(actor(m.observations(obs)), m.actions(actor(obs)), atol=1e-5)
        assert not torch.allclose(plain(m.observations(obs)), m.actions(plain(obs)), atol=1e-2)
    with pytest.raises(ValueError, match="mirror_obs_index has shape"):
        actor.set_mirror(torch.arange(3), m.observations.sign, m.actions.index, m.actions.sign)
    with pytest.raises(ValueError, match="not symmetric"):
        plain.set_mirror(m.observations.index, m.observations.sign, m.actions.index, m.actions.sign)


def test_a_symmetric_run_saves_exports_and_reloads_its_mirror(tmp_path):
    """The runner sets the mirror, the checkpoint carries it: the command-tracking loader and the
    exported ONNX policy (verified against PyTorch by the export) answer mirrored observations
    with mirrored actions."""
    import onnxruntime as ort

    from export.pipeline import export_policy
    from training.command_tracking import load_actor

    runner = _tiny_runner(tmp_path / "run", "np3o", 1, "network.symmetric_actor=true")
    try:
        mirrors = symmetry.robot_mirror(runner.env)
        assert torch.equal(runner.model.actor.mirror_obs_index, mirrors.observations.index)
        runner.learn()
    finally:
        runner.env.close()
    ckpt = tmp_path / "run" / "model_1.pt"
    actor, _, _ = load_actor(ckpt)
    obs = torch.randn(5, runner.env.obs_spec["policy"].dim)
    with torch.no_grad():
        assert torch.allclose(actor(obs), runner.model.actor(obs), atol=1e-6)
        assert torch.allclose(actor(mirrors.observations(obs)), mirrors.actions(actor(obs)), atol=1e-5)
    result = export_policy(ckpt, tmp_path / "p.onnx", rollout_steps=10, num_random=50, log=lambda _: None)
    session = ort.InferenceSession(str(result.onnx_path))
    name = session.get_inputs()[0].name
    a = session.run(None, {name: obs.numpy()})[0]
    b = session.run(None, {name: mirrors.observations(obs).numpy()})[0]
    assert np.allclose(b, mirrors.actions(torch.from_numpy(a)).numpy(), atol=1e-5)
