"""The DC-motor leg drive (training.sim.model.LegActuator "dc_motor"): the PD torque within the drive's
torque-speed line, in the model, the physics variants, the training env and sim-to-sim."""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import pytest
import torch

from aow_policy.robot import load_robot
from training.envs import make_env
from training.envs.config import SimConfig
from training.sim.backends.base import PhysicsRandomization
from training.sim.backends.factory import create_backend
from training.sim.backends.scene import SolverConfig, apply_params, build_scene, nominal_params
from training.sim.model import ANYDRIVE_SATURATION_TORQUE, LegActuator, build_model, model_info, servo_gains

ROBOT = load_robot()
DC = LegActuator("dc_motor")


def envelope(pd_torque: float, speed: float, stall: float = 120.0, no_load: float = 7.5, cap: float = 80.0) -> float:
    """Isaac Lab's DCMotor clipping, written out: the torque-speed line, then the drive's cap."""
    upper = min(stall * (1.0 - speed / no_load), cap)
    lower = max(stall * (-1.0 - speed / no_load), -cap)
    return float(np.clip(pd_torque, lower, upper))


def leg_torque(model: mujoco.MjModel, joint: str, position_error: float, speed: float) -> float:
    """Actuator force of ``joint`` for a position target ``position_error`` ahead of the joint, at ``speed``."""
    info = model_info(model, ROBOT)
    k = info.joint_names.index(joint)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, info.default_key_id)
    data.qvel[info.qvel_adr[k]] = speed
    data.ctrl[info.actuator_ids[k]] = data.qpos[info.qpos_adr[k]] + position_error
    mujoco.mj_forward(model, data)
    return float(data.actuator_force[info.actuator_ids[k]])


@pytest.fixture(scope="module")
def dc_model():
    return build_model(True, ROBOT, leg_actuator=DC)


@pytest.fixture(scope="module")
def pd_model():
    return build_model(True, ROBOT)


@pytest.mark.parametrize(
    ("error", "speed", "expected"),
    [
        (0.1, 0.0, 8.0),  # inside the line: the PD torque 80 * 0.1 exactly
        (0.1, 5.0, -2.0),  # 8 - 2 * 5, still inside
        (1.0, 2.5, 75.0),  # the line gives 80 at 2.5 rad/s: PD 80 - 5 passes
        (1.0, 5.0, 40.0),  # the line: 120 * (1 - 5 / 7.5)
        (3.0, 7.5, 0.0),  # no torque left in the direction of motion at the no-load speed
        (-3.0, 5.0, -80.0),  # braking against the motion: the cap, not the line (-200)
        (3.0, -6.0, 80.0),  # the same the other way
        (-3.0, -5.0, -40.0),  # driving backward at 5 rad/s: the line's mirror
    ],
)
def test_dc_motor_torque_follows_the_drive_line(dc_model, error, speed, expected):
    torque = leg_torque(dc_model, "LF_KFE", error, speed)
    assert torque == pytest.approx(expected, abs=1e-6)
    assert torque == pytest.approx(envelope(80.0 * error - 2.0 * speed, speed), abs=1e-6)


def test_pd_legs_keep_their_torque_at_any_speed(pd_model):
    assert leg_torque(pd_model, "LF_KFE", 1.0, 5.0) == pytest.approx(70.0)
    assert leg_torque(pd_model, "LF_KFE", 3.0, 7.5) == pytest.approx(80.0)


def test_wheels_are_the_same_velocity_loops_with_either_leg_model(dc_model, pd_model):
    wheels = model_info(dc_model, ROBOT).actuator_ids[12:]
    for field in (
        "actuator_gaintype",
        "actuator_biastype",
        "actuator_gainprm",
        "actuator_biasprm",
        "actuator_forcerange",
    ):
        np.testing.assert_array_equal(getattr(dc_model, field)[wheels], getattr(pd_model, field)[wheels])
    assert leg_torque(dc_model, "LF_WHEEL", 0.0, -2.0) == pytest.approx(leg_torque(pd_model, "LF_WHEEL", 0.0, -2.0))


def test_a_free_swinging_knee_stays_near_the_no_load_speed(dc_model, pd_model):
    """The robot on the ground, LF_KFE sent 1.5 rad away: the PD leg whips past 15 rad/s (the
    joint-speed trip), the drive's line holds it below its no-load speed."""
    peaks = {}
    for name, model in (("dc", dc_model), ("pd", pd_model)):
        info = model_info(model, ROBOT)
        k = info.joint_names.index("LF_KFE")
        data = mujoco.MjData(model)
        mujoco.mj_resetDataKeyframe(model, data, info.default_key_id)
        mujoco.mj_step(model, data, 200)
        data.ctrl[info.actuator_ids[k]] -= 1.5
        speeds = []
        for _ in range(60):
            mujoco.mj_step(model, data)
            speeds.append(abs(data.qvel[info.qvel_adr[k]]))
        assert np.isfinite(data.qpos).all()
        peaks[name] = max(speeds)
    assert peaks["pd"] > 15.0
    assert 6.0 < peaks["dc"] < 7.5


def test_servo_gains_read_either_layout(dc_model, pd_model):
    for model in (dc_model, pd_model):
        is_position, kp, kd = servo_gains(model, model_info(model, ROBOT).actuator_ids)
        assert is_position.tolist() == [True] * 12 + [False] * 4
        np.testing.assert_allclose(kp, ROBOT.kp * is_position)
        np.testing.assert_allclose(kd, ROBOT.kd)


def test_physics_variants_scale_the_servo_and_keep_the_drive_line():
    scene = build_scene(True, leg_actuator=DC)
    model = copy.copy(scene.model)
    params = nominal_params(scene)
    params[:] = [0.4, 2.0, 1.5, 0.5, 0.9]  # friction, added mass, kp, kd, strength
    apply_params(model, scene, params)
    leg, wheel = scene.info.actuator_ids[0], scene.info.actuator_ids[12]
    base = scene.model.actuator_gainprm[leg]
    assert model.actuator_gainprm[leg, 4] == pytest.approx(80.0 * 1.5 * 0.9)  # kp
    assert model.actuator_gainprm[leg, 6] == pytest.approx(2.0 * 0.5 * 0.9)  # kd
    for k in (0, 1, 7):  # resistance, motor constant, voltage limit: the line
        assert model.actuator_gainprm[leg, k] == base[k]
    assert model.actuator_gainprm[wheel, 0] == pytest.approx(4.0 * 0.5 * 0.9)
    assert scene.model.actuator_gainprm[leg, 4] == 80.0


def test_the_line_comes_from_the_saturation_torque_and_the_contracts_speed():
    model = build_model(True, ROBOT, leg_actuator=LegActuator("dc_motor", saturation_torque=160.0))
    # 160 * (1 - 5 / 7.5) = 53.3
    assert leg_torque(model, "RH_HFE", 3.0, 5.0) == pytest.approx(160.0 / 3.0)
    with pytest.raises(ValueError, match=r"saturation_torque 60\.0 is below its torque_limit 80\.0"):
        build_model(True, ROBOT, leg_actuator=LegActuator("dc_motor", saturation_torque=60.0))


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match=r"sim\.leg_actuator: expected one of \('pd', 'dc_motor'\), got 'servo'"):
        SimConfig(leg_actuator="servo").validate()
    with pytest.raises(ValueError, match=r"sim\.leg_saturation_torque: must be positive"):
        SimConfig(leg_actuator="dc_motor", leg_saturation_torque=0.0).validate()
    assert SimConfig().leg_actuator_model() == LegActuator("pd", ANYDRIVE_SATURATION_TORQUE)
    with pytest.raises(ValueError, match="isaacgym backend simulates 'pd' legs only"):
        create_backend(
            "isaacgym",
            robot=ROBOT,
            wheeled=True,
            terrain=None,
            num_envs=1,
            solver=SolverConfig(),
            randomization=PhysicsRandomization(),
            leg_actuator=DC,
        )


def test_training_env_runs_dc_motor_legs_with_randomized_gains():
    env = make_env(
        "aow_flat",
        4,
        sim={"leg_actuator": "dc_motor"},
        domain_rand={"kp_scale": [0.8, 1.2], "kd_scale": [0.8, 1.2], "motor_strength": [0.9, 1.1]},
    )
    try:
        assert (
            env.sim.model.actuator_gaintype[env.sim.scene.info.actuator_ids[:12]] == mujoco.mjtGain.mjGAIN_DCMOTOR
        ).all()
        env.reset()
        generator = torch.Generator().manual_seed(0)
        for _ in range(25):
            actions = torch.randn(4, env.num_actions, generator=generator)
            _, rewards, _, _, _ = env.step(actions)
            assert torch.isfinite(rewards).all()
        # Every randomized model kept the drive line of the nominal one.
        line = env.sim.model.actuator_gainprm[env.sim.scene.info.actuator_ids[:12]][:, [0, 1, 7]]
        for model in env.sim.models:
            np.testing.assert_array_equal(
                model.actuator_gainprm[env.sim.scene.info.actuator_ids[:12]][:, [0, 1, 7]], line
            )
        assert float(env.sim.state().joint_torque[:, :12].abs().max()) <= 80.0 + 1e-6
    finally:
        env.close()


def test_sim_to_sim_hardware_drives_dc_motor_legs_as_position_servos():
    from rosbags.typesys import Stores, get_typestore

    from aow_policy.messages import MessageFactory
    from sim2sim.hardware import HardwareConfig, SimHardware, Topics
    from sim2sim.world import build_world

    with pytest.raises(ValueError, match="leg_actuator must be one of"):
        HardwareConfig(leg_actuator="servo").validate()
    config = HardwareConfig(leg_actuator="dc_motor")
    world = build_world(ROBOT, "flat", physics_dt=1.0 / config.physics_hz, leg_actuator=DC)
    legs = world.info.actuator_ids[:12]
    assert (world.model.actuator_gaintype[legs] == mujoco.mjtGain.mjGAIN_DCMOTOR).all()
    factory = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
    hardware = SimHardware(world, ROBOT, factory, lambda *_: None, config, Topics())
    # A velocity feed-forward reaches the servo as a shifted position target: kd / kp per leg.
    np.testing.assert_allclose(hardware._kd_over_kp[:12], 2.0 / 80.0)
    assert hardware._is_position.tolist() == [True] * 12 + [False] * 4


def test_a_shipped_policy_runs_on_dc_motor_legs_in_sim_to_sim():
    """A smoke test: the shipped N-P3O policy (trained on PD legs) stands up and drives 3 s on the
    drive-line legs without a controller fault or a fall."""
    from pathlib import Path

    from sim2sim.hardware import HardwareConfig
    from sim2sim.runner import run

    policy = Path(__file__).resolve().parents[1] / "policies" / "aow_flat_np3o" / "policy.onnx"
    commands = [{"name": "forward", "duration": 1.5, "vx": 0.5}, {"name": "turn", "duration": 1.5, "yaw_rate": 0.5}]
    result = run(policy, 5.0, commands, hardware=HardwareConfig(leg_actuator="dc_motor"))
    assert result.final_state == "POLICY" and not result.fell


def test_each_policy_runs_on_the_leg_drives_it_trained_with(tmp_path):
    """The exported contract says which drives the run simulated; sim-to-sim takes them unless told."""
    from test_sim2sim import constant_policy

    from export.contract import trained_leg_actuator
    from sim2sim.hardware import HardwareConfig
    from sim2sim.runner import policy_leg_actuator, run

    assert trained_leg_actuator({"sim": {"leg_actuator": "dc_motor"}}) == "dc_motor"
    assert trained_leg_actuator({"sim": {}}) == trained_leg_actuator(None) == "pd"  # runs before the field
    with pytest.raises(ValueError, match=r"training\.leg_actuator: expected one of"):
        policy_leg_actuator({"training": {"leg_actuator": "servo"}})

    stand = np.zeros(len(ROBOT.joints))
    dc = constant_policy(tmp_path / "dc.onnx", stand, leg_actuator="dc_motor")
    plain = constant_policy(tmp_path / "plain.onnx", stand)
    assert run(dc, 1.0, stand_up=0.5).leg_actuator == "dc_motor"
    assert run(plain, 1.0, stand_up=0.5).leg_actuator == "pd"
    assert run(dc, 1.0, stand_up=0.5, hardware=HardwareConfig(leg_actuator="pd")).leg_actuator == "pd"


def test_the_ros_sim_bridge_takes_the_leg_drive_model_as_a_parameter():
    from rosbags.typesys import Stores, get_typestore

    from aow_policy.messages import MessageFactory
    from sim2sim.bridge import BRIDGE_PARAMS, BridgeConfig, SimBridge, parameter_overrides
    from sim2sim.hardware import HardwareConfig

    assert parameter_overrides(["--leg-actuator", "dc_motor"]) == ({"leg_actuator": "dc_motor"}, [])
    spec = next(p for p in BRIDGE_PARAMS if p.name == "leg_actuator")
    assert spec.default == "pd"
    with pytest.raises(ValueError, match="leg_actuator"):
        spec.check("servo")
    factory = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
    for model, gain_type in (("dc_motor", mujoco.mjtGain.mjGAIN_DCMOTOR), (None, mujoco.mjtGain.mjGAIN_FIXED)):
        config = BridgeConfig(hardware=HardwareConfig(leg_actuator=model), publish_clock=False)
        bridge = SimBridge(ROBOT, factory, lambda *_: None, config)
        world = bridge.hardware.world
        assert (world.model.actuator_gaintype[world.info.actuator_ids[:12]] == gain_type).all()
