"""Sim-to-sim parts: command scripts, the height lookup and robot-centred map, odometry frames, the drive
law, tracking, fall and violation metrics (hand-computed expectations)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from aow_policy.heightmap import height_scan
from aow_policy.messages import BaseState as OdomState
from aow_policy.messages import (
    MessageFactory,
    grid_map_layer,
    joint_state_msg,
    read_odometry,
)
from aow_policy.robot import load_robot
from sim2sim.commands import (
    CommandSchedule,
    CommandScriptError,
    Segment,
    default_schedule,
    load_script,
    parse_script,
    segments_from_records,
)
from sim2sim.hardware import HardwareConfig, SimHardware, steps_between
from sim2sim.metrics import FallCriteria, FallDetector, SegmentTracker, ViolationOnsets
from sim2sim.recorder import BagRecorder, RecorderError
from sim2sim.world import HeightField, World, build_world
from training.sim.model import build_spec, model_info

ROBOT = load_robot()
F = MessageFactory.from_typestore(get_typestore(Stores.ROS2_HUMBLE))
PHYSICS_DT = 1.0 / 400.0


# ---- command scripts ------------------------------------------------------------------------


def test_yaml_json_and_csv_scripts_give_the_same_segments(tmp_path):
    yaml_text = "- {name: go, duration: 2, vx: 1.0}\n- {duration: 1.5, vy: -0.5, yaw_rate: 0.25}\n"
    json_text = (
        '{"segments": [{"name": "go", "duration": 2, "vx": 1.0}, {"duration": 1.5, "vy": -0.5, "yaw_rate": 0.25}]}'
    )
    csv_text = "# a comment\nduration, vx, vy, yaw_rate, name\n2, 1.0, , , go\n1.5, 0, -0.5, 0.25,\n"
    expected = (
        Segment("go", 0.0, 2.0, 1.0, 0.0, 0.0),
        Segment("segment 2", 2.0, 1.5, 0.0, -0.5, 0.25),
    )
    for name, text in (("a.yaml", yaml_text), ("a.json", json_text), ("a.csv", csv_text)):
        path = tmp_path / name
        path.write_text(text)
        assert load_script(path, ROBOT).segments == expected, name


def test_schedule_lookup_at_boundaries():
    s = CommandSchedule([Segment("a", 0.0, 1.0, 1.0, 0, 0), Segment("b", 1.0, 2.0, 0, 0.5, 0)])
    assert s.duration == 3.0
    assert s.index_at(-0.01) is None and s.command_at(-0.01) == (0.0, 0.0, 0.0)
    assert s.index_at(0.0) == 0 and s.index_at(0.999) == 0
    assert s.index_at(1.0) == 1 and s.index_at(2.999) == 1
    assert s.index_at(3.0) is None and s.command_at(3.5) == (0.0, 0.0, 0.0)
    cut = s.truncated(1.5)
    assert [(g.name, g.duration) for g in cut.segments] == [("a", 1.0), ("b", 0.5)]


def test_default_schedule_fills_the_time_in_four_equal_segments():
    s = default_schedule(8.0)
    assert [g.name for g in s.segments] == ["forward", "sideways", "turning", "stop"]
    assert [g.duration for g in s.segments] == [2.0] * 4 and s.duration == 8.0
    assert s.segments[0].command == (1.0, 0.0, 0.0) and s.segments[3].command == (0.0, 0.0, 0.0)
    with pytest.raises(CommandScriptError, match="no time left"):
        default_schedule(0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- {vx: 1.0}", "segment 1: duration is missing"),
        ("- {duration: -1}", "duration must be positive"),
        ("- {duration: 1, speed: 2}", r"unknown field\(s\) \['speed'\]"),
        (
            "- {duration: 1}\n- {duration: 1, vy: 1.5}",
            r"segment 2: vy = 1.5 is outside the robot's command range \[-1.0, 1.0\]",
        ),
        ("- {duration: 1, yaw_rate: fast}", "yaw_rate must be a number"),
        ("- {duration: .nan}", "duration must be finite"),
        ("[]", "no segments"),
        ("{a: 1}", "needs a 'segments' list"),
        ("- [1, 2]", "expected a mapping"),
        ("- {duration: 1", "not valid YAML"),
    ],
)
def test_bad_scripts_are_refused_naming_the_problem(text, message):
    with pytest.raises(CommandScriptError, match=message):
        parse_script(text, "yaml", ROBOT, source="s.yaml")


def test_csv_without_duration_column_is_refused():
    with pytest.raises(CommandScriptError, match="no 'duration' column"):
        parse_script("vx,vy\n1,0\n", "csv", ROBOT)


# ---- height field and the robot-centred map ------------------------------------------------


def world_with_heights(heights_yx: np.ndarray, half: tuple[float, float], dt: float = PHYSICS_DT) -> World:
    spec = build_spec(robot=ROBOT, heightfield=(heights_yx, half))
    spec.option.timestep = dt
    model = spec.compile()
    return World(model, model_info(model, ROBOT), HeightField(model), (0.0, 0.0), "custom")


def ray_height(model, data, x, y):
    geom = np.zeros(1, np.int32)
    return 10.0 - mujoco.mj_ray(model, data, np.array([x, y, 10.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)


def test_height_lookup_equals_mujoco_collision_surface():
    rng = np.random.default_rng(1)
    world = world_with_heights(rng.uniform(-0.2, 0.3, size=(31, 41)), (2.0, 1.5))  # rows along y
    data = mujoco.MjData(world.model)
    data.qpos[world.info.base_qpos_adr] = 100.0  # the robot out of the rays' way
    mujoco.mj_forward(world.model, data)
    xs, ys = rng.uniform(-1.99, 1.99, 200), rng.uniform(-1.49, 1.49, 200)
    expected = [ray_height(world.model, data, x, y) for x, y in zip(xs, ys, strict=True)]
    np.testing.assert_allclose(world.heights(xs, ys), expected, atol=1e-9)


def test_plane_height_lookup_is_zero():
    world = build_world(ROBOT, "flat", physics_dt=PHYSICS_DT)
    assert world.heights.is_plane
    np.testing.assert_array_equal(world.heights(np.array([0.0, 5.0]), np.array([-3.0, 2.0])), [0.0, 0.0])


SLOPE = (0.08, -0.05, 0.3)  # h = a x + b y + c


def slope_world() -> World:
    half = (4.0, 3.0)
    x = np.linspace(-half[0], half[0], 81)
    y = np.linspace(-half[1], half[1], 61)
    a, b, c = SLOPE
    return world_with_heights(a * x[None, :] + b * y[:, None] + c, half)


@pytest.mark.parametrize(("x", "y", "yaw"), [(0.0, 0.0, 0.0), (0.77, -0.31, 0.6), (-1.13, 0.52, -2.4)])
def test_moving_map_gives_the_analytic_height_scan(x, y, yaw):
    """The map the hardware publishes, read by the runtime's height scan, equals the terrain at the grid."""
    world = slope_world()
    hardware = SimHardware(world, ROBOT, F, lambda *a: None, HardwareConfig())
    msg = hardware.map.message(F, x, y, stamp=1.0, frame_id="odom")
    layer = grid_map_layer(msg)
    assert (layer.rows, layer.cols) == (60, 60) and layer.row_stride == 1  # column-major
    res = 0.05
    assert abs(layer.center_x - x) <= res / 2 + 1e-12 and abs(layer.center_y - y) <= res / 2 + 1e-12
    assert (msg.outer_start_index, msg.inner_start_index) == ((-round(x / res)) % 60, (-round(y / res)) % 60)
    scan = height_scan(msg, (x, y, 0.6), yaw, ROBOT)
    c, s = math.cos(yaw), math.sin(yaw)
    pts = ROBOT.height_scan.points
    wx, wy = x + c * pts[:, 0] - s * pts[:, 1], y + s * pts[:, 0] + c * pts[:, 1]
    a, b, c0 = SLOPE
    np.testing.assert_allclose(scan, a * wx + b * wy + c0, atol=1e-5)  # float32 cells


def test_a_world_cell_keeps_its_buffer_index_when_the_map_moves():
    world = slope_world()
    hardware = SimHardware(world, ROBOT, F, lambda *a: None, HardwareConfig())
    buffers = []
    for x in (0.0, 0.13, 0.41):
        layer = grid_map_layer(hardware.map.message(F, x, 0.0, 0.0, "odom"))
        xs, ys = layer.cell_centers()
        unwrapped = layer.to_unwrapped()
        # the cell centred nearest (0.525, 0.025) is in every one of these maps
        kx, ky = int(np.argmin(np.abs(xs - 0.525))), int(np.argmin(np.abs(ys - 0.025)))
        buffers.append(((kx + layer.outer_start) % layer.rows, (ky + layer.inner_start) % layer.cols))
        assert unwrapped[kx, ky] == pytest.approx(SLOPE[0] * 0.525 + SLOPE[1] * 0.025 + SLOPE[2], abs=1e-6)
    assert len(set(buffers)) == 1


# ---- hardware: odometry frame and drive law -------------------------------------------------


def flat_hardware(**config) -> tuple[SimHardware, list]:
    sent = []
    world = build_world(ROBOT, "flat", physics_dt=PHYSICS_DT)
    hw = SimHardware(world, ROBOT, F, lambda topic, msg, t: sent.append((topic, msg, t)), HardwareConfig(**config))
    return hw, sent


def test_odometry_twist_is_in_the_base_frame():
    hw, _ = flat_hardware()
    adr, vadr = hw._base_qpos, hw._base_qvel
    yaw = math.pi / 2
    hw.data.qpos[adr + 3 : adr + 7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))  # w x y z
    hw.data.qvel[vadr : vadr + 6] = (0.0, 1.0, 0.0, 0.0, 0.0, 0.3)  # world +y; body yaw rate
    mujoco.mj_forward(hw.model, hw.data)
    state = read_odometry(hw.odometry_message(), OdomState())
    np.testing.assert_allclose(state.linear_velocity, (1.0, 0.0, 0.0), atol=1e-12)  # facing +y: forward
    np.testing.assert_allclose(state.angular_velocity, (0.0, 0.0, 0.3), atol=1e-12)
    assert state.yaw == pytest.approx(yaw)
    np.testing.assert_allclose(state.projected_gravity, (0.0, 0.0, -1.0), atol=1e-12)


def test_sensor_rates_follow_the_configuration():
    hw, sent = flat_hardware(odometry_hz=100.0, map_hz=10.0)
    for _ in range(80):  # 0.2 s
        hw.publish_sensors()
        hw.step()
    topics = [topic for topic, _, _ in sent]
    assert (
        topics.count("/joint_states") == 80 and topics.count("/odometry") == 20 and topics.count("/elevation_map") == 2
    )
    stamps = [t for topic, _, t in sent if topic == "/joint_states"]
    np.testing.assert_allclose(np.diff(stamps), PHYSICS_DT)
    with pytest.raises(ValueError, match="must divide the physics rate"):
        steps_between(400.0, 150.0, "odometry_hz")


def test_drives_apply_kp_kd_law_to_named_targets_and_damp_without_commands():
    hw, _ = flat_hardware()
    rng = np.random.default_rng(0)
    hw.data.qvel[hw._qvel_adr] = rng.uniform(-1, 1, 16)
    mujoco.mj_forward(hw.model, hw.data)
    q, qd = hw.joint_position.copy(), hw.joint_velocity.copy()
    kp, kd = ROBOT.kp, ROBOT.kd
    legs = np.array([j.kind == "leg" for j in ROBOT.joints])

    # no command yet: damping, -kd qd
    hw._apply_command()
    mujoco.mj_fwdActuation(hw.model, hw.data)
    np.testing.assert_allclose(hw.joint_effort, -kd * qd, atol=1e-9)

    # a command in shuffled order with an extra joint
    target_p = q + rng.uniform(-0.1, 0.1, 16)
    target_v = rng.uniform(-2, 2, 16)
    order = rng.permutation(16)
    names = [ROBOT.joint_names[i] for i in order] + ["EXTRA"]
    msg = joint_state_msg(F, names, [*target_p[order], 9.0], [*target_v[order], 9.0], [], stamp=0.0)
    assert hw.on_joint_command(msg, 0.0)
    hw._apply_command()
    mujoco.mj_fwdActuation(hw.model, hw.data)
    expected = np.where(legs, kp * (target_p - q) + kd * (target_v - qd), kd * (target_v - qd))
    expected = np.clip(expected, -ROBOT.torque_limits, ROBOT.torque_limits)
    np.testing.assert_allclose(hw.joint_effort, expected, atol=1e-9)

    # a command missing a joint is refused; the previous one stays until it times out
    bad = joint_state_msg(F, ROBOT.joint_names[1:], target_p[1:], target_v[1:], stamp=0.0)
    assert not hw.on_joint_command(bad, 0.0)
    assert hw.commands_refused == 1 and "missing joint" in hw.last_command_error
    hw.step_count = round(0.2 / PHYSICS_DT)  # 0.2 s later: past the 0.1 s command timeout
    assert not hw.command_active
    hw._apply_command()
    mujoco.mj_fwdActuation(hw.model, hw.data)
    np.testing.assert_allclose(hw.joint_effort, -kd * qd, atol=1e-9)


# ---- metrics ---------------------------------------------------------------------------------


def test_tracking_error_per_segment_and_after_settling():
    schedule = CommandSchedule([Segment("a", 0.0, 1.0, 1.0, 0.0, 0.0), Segment("b", 1.0, 1.0, 0.0, 0.5, 0.0)])
    tracker = SegmentTracker(schedule, control_dt=0.25, settle=0.5)
    # segment a at t = 0, 0.25 (settling), 0.5, 0.75; segment b only at t = 1.5
    for t, v in [
        (0.0, (0, 0, 0)),
        (0.25, (0.5, 0, 0)),
        (0.5, (0.9, 0.1, 0)),
        (0.75, (1.1, 0, -0.2)),
        (1.5, (0, 0.5, 0)),
    ]:
        tracker.add(t, np.array(v, dtype=float))
    tracker.add(2.5, np.array([9.0, 9.0, 9.0]))  # after the script: ignored
    a, b = tracker.results()
    assert a.samples == 4 and a.policy_fraction == 1.0
    np.testing.assert_allclose(a.mean_abs_error, ((1 + 0.5 + 0.1 + 0.1) / 4, 0.1 / 4, 0.2 / 4))
    np.testing.assert_allclose(a.mean_abs_error_settled, ((0.1 + 0.1) / 2, 0.1 / 2, 0.2 / 2))
    np.testing.assert_allclose(a.mean_velocity, (2.5 / 4, 0.1 / 4, -0.2 / 4))
    assert b.samples == 1 and b.policy_fraction == 0.25
    np.testing.assert_allclose(b.mean_abs_error, (0, 0, 0))
    # a run an operator ended at script time 1.25: segment b ran one period, and spent it in POLICY
    a, b = tracker.results(script_end=1.25)
    assert a.policy_fraction == 1.0 and b.policy_fraction == 1.0
    _, b = tracker.results(script_end=1.5)
    assert b.policy_fraction == 0.5


def test_fall_events_start_once_per_fall():
    det = FallDetector(FallCriteria(min_height=0.25, max_tilt=1.0))
    states = [(0.5, 0.1, False), (0.2, 0.1, False), (0.1, 1.2, True), (0.5, 0.1, False), (0.5, 1.5, False)]
    for i, (h, tilt, contact) in enumerate(states):
        det.update(0.1 * i, h, tilt, contact)
    assert [e.time for e in det.events] == [0.1, 0.4]
    assert "0.20 m above ground" in det.events[0].reason and "tilted 86 deg" in det.events[1].reason
    assert det.fallen


# ---- recorder ------------------------------------------------------------------------------


def test_recorder_refuses_existing_target_and_bad_options(tmp_path):
    ts = get_typestore(Stores.ROS2_HUMBLE)
    (tmp_path / "taken").mkdir()
    with pytest.raises(RecorderError, match="exists already"):
        BagRecorder(tmp_path / "taken", ts)
    with pytest.raises(RecorderError, match="storage must be one of"):
        BagRecorder(tmp_path / "b", ts, storage="rosbag1")
    with pytest.raises(RecorderError, match="only offered for mcap"):
        BagRecorder(tmp_path / "b", ts, storage="sqlite3", compress=True)
    with pytest.raises(RecorderError, match="version must be one of"):
        BagRecorder(tmp_path / "b", ts, version=5)


def test_compressed_mcap_round_trip(tmp_path):
    from rosbags.highlevel import AnyReader

    ts = get_typestore(Stores.ROS2_HUMBLE)
    msg = joint_state_msg(F, ROBOT.joint_names, np.arange(16.0), np.zeros(16), np.ones(16), stamp=1.5)
    with BagRecorder(tmp_path / "z", ts, compress=True) as bag:
        for i in range(10):
            bag.write("/joint_states", msg, 1.5 + i * 0.01)
    with AnyReader([tmp_path / "z"], default_typestore=ts) as reader:
        got = [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
    assert len(got) == 10 and got[0][0] == 1_500_000_000
    np.testing.assert_array_equal(got[3][1].position, np.arange(16.0))


def test_last_command_change_skips_repeated_commands_and_sees_the_script_end():
    schedule = segments_from_records(
        [
            {"duration": 2.0},  # zero: no change at 0
            {"duration": 1.0, "vx": 1.0},  # change at 2
            {"duration": 1.0, "vx": 1.0},  # the same command: no change at 3
            {"duration": 1.0, "yaw_rate": 0.5},  # change at 4
        ]
    )
    assert schedule.last_change_before(1.0) is None
    assert schedule.last_change_before(2.0) == 2.0
    assert schedule.last_change_before(3.5) == 2.0
    assert schedule.last_change_before(4.2) == 4.0
    assert schedule.last_change_before(6.0) == 5.0  # the script ended: zero command from 5 s


def test_violation_onsets_sorts_events_by_time_since_the_last_command_step():
    schedule = segments_from_records([{"duration": 2.0, "vx": 1.0}, {"duration": 2.0, "vx": -1.0}])
    onsets = ViolationOnsets(schedule, window=0.5)
    policy_start = 10.0
    onsets.add("velocity", 9.0, policy_start)  # standing up
    onsets.add("velocity", 10.2, policy_start)  # 0.2 s after the first command
    onsets.add("velocity", 11.0, policy_start)  # settled
    onsets.add("velocity", 12.49, policy_start)  # 0.49 s after the reversal
    onsets.add("effort", 12.6, policy_start)
    onsets.add("effort", 13.0, None)  # POLICY never reached
    assert onsets.counts["velocity"] == {"after_command_step": 2, "elsewhere": 1, "before_policy": 1}
    assert onsets.counts["effort"] == {"after_command_step": 0, "elsewhere": 1, "before_policy": 1}
