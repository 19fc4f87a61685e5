"""Sim-to-sim end to end: exported policies on the MuJoCo robot through the controller core, bags read back.

* A freshly exported tiny policy with the task's own observation layout runs 10 s with --record;
  the bag is read back with rosbags' AnyReader: topics, types and message counts at the stated
  rates, commands every control period, the controller's states in /diagnostics.
* A policy with a constant action (legs at the default pose, every wheel at +1 action = 5 rad/s)
  rolls the robot forward at wheel speed x radius: the analytic check that commands reach the
  joints by name, odometry is in the base frame and tracking errors are computed against it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from aow_policy.msg_defs import register_grid_map_types
from aow_policy.policy_contract import METADATA_KEY, contract_to_json
from aow_policy.robot import load_robot
from aow_policy.testing import locomotion_layout, policy_contract_for
from export.pipeline import export_policy
from export.synthetic import paper_observation_layout, robot_action_layout, synthetic_payload
from sim2sim import Sim2SimConfig, run
from sim2sim.cli import main
from sim2sim.hardware import SimHardware
from training.checkpoint import save_checkpoint
from training.networks import NetworkConfig
from training.sim.anymal_c import WHEEL

ROBOT = load_robot()
TINY = NetworkConfig(scan_encoder=(16,), actor_hidden=(32, 16), critic_hidden=(32,), cost_critic_hidden=(16,))


def task_layouts():
    """The real task's policy layout and action layout when the environment package is here."""
    try:
        from training.envs import make_env

        env = make_env("aow_flat", 1)
        return env.obs_spec["policy"], env.action_layout, "aow_flat"
    except Exception:  # not written yet, or not buildable here: the same layout built by hand
        return paper_observation_layout(ROBOT), robot_action_layout(ROBOT), "aow_flat"


@pytest.fixture(scope="module")
def exported_policy(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("policy")
    layout, action_layout, task = task_layouts()
    payload = synthetic_payload(ROBOT, layout=layout, network=TINY, task=task)
    payload["action_layout"] = action_layout
    checkpoint = save_checkpoint(out / "model_0.pt", payload)
    result = export_policy(checkpoint, out / "policy.onnx", ROBOT, num_random=64, rollout_steps=0, log=lambda s: None)
    return result.onnx_path


def constant_policy(path: Path, actions: np.ndarray, leg_actuator: str | None = None) -> Path:
    """ONNX policy whose output is ``actions`` whatever the observation (Gemm with zero weights);
    ``leg_actuator``: the leg drive model its contract says it trained with (None: not recorded)."""
    contract = policy_contract_for(ROBOT, locomotion_layout(ROBOT))
    if leg_actuator is not None:
        contract["training"]["leg_actuator"] = leg_actuator
    dim, n = contract["observation"]["dim"], len(actions)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["obs", "w", "b"], ["actions"])],
        "constant",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", n])],
        [
            numpy_helper.from_array(np.zeros((dim, n), np.float32), "w"),
            numpy_helper.from_array(np.asarray(actions, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    helper.set_model_props(model, {METADATA_KEY: contract_to_json(contract)})
    onnx.save(model, path)
    return path


def read_bag(path: Path) -> dict[str, list]:
    typestore = register_grid_map_types(get_typestore(Stores.ROS2_HUMBLE))
    out: dict[str, list] = {}
    with AnyReader([path], default_typestore=typestore) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        for conn, timestamp, raw in reader.messages():
            out.setdefault(conn.topic, []).append((timestamp, reader.deserialize(raw, conn.msgtype)))
    out["__types__"] = types
    return out


def test_ten_seconds_recorded_bag_reads_back_with_expected_topics_and_counts(exported_policy, tmp_path):
    bag = tmp_path / "run"
    result = run(exported_policy, 10.0, record=bag)
    assert result.bag == bag and (bag / "metadata.yaml").is_file() and (bag / "run.mcap").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]

    msgs = read_bag(bag)
    assert msgs["__types__"] == {
        "/joint_states": "sensor_msgs/msg/JointState",
        "/odometry": "nav_msgs/msg/Odometry",
        "/elevation_map": "grid_map_msgs/msg/GridMap",
        "/cmd_vel": "geometry_msgs/msg/Twist",
        "/joint_commands": "sensor_msgs/msg/JointState",
        "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    }
    counts = {topic: len(v) for topic, v in msgs.items() if topic != "__types__"}
    # 10 s at 400 / 100 / 10 / 50 / 50 Hz; diagnostics at 10 Hz, at the first state and at state changes
    assert counts["/joint_states"] == 4000
    assert counts["/odometry"] == 1000
    assert counts["/elevation_map"] == 100
    assert counts["/cmd_vel"] == 500
    assert counts["/joint_commands"] == 500
    assert 101 <= counts["/diagnostics"] <= 104
    assert counts == result.message_counts

    # joint commands every control period (20 ms), names in the contract, stamps = bag times
    times = np.array([t for t, _ in msgs["/joint_commands"]])
    np.testing.assert_array_equal(np.diff(times), 20_000_000)
    first = msgs["/joint_commands"][0][1]
    assert tuple(first.name) == ROBOT.joint_names
    assert all(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec == t for t, m in msgs["/joint_commands"])

    # joint states carry position, velocity and effort for all 16 joints
    js = msgs["/joint_states"][-1][1]
    assert len(js.name) == len(js.position) == len(js.velocity) == len(js.effort) == 16
    assert np.any(np.abs(js.effort) > 1.0)  # legs hold the robot up

    # the map: 3 m x 3 m at 0.05 m, column-major, centred on the robot, in the odometry frame
    grid = msgs["/elevation_map"][-1][1]
    odom = msgs["/odometry"][-1][1]
    assert grid.layers == ["elevation"] and grid.data[0].layout.dim[0].label == "column_index"
    assert (grid.info.length_x, grid.info.resolution) == (3.0, 0.05) and len(grid.data[0].data) == 3600
    assert abs(grid.info.pose.position.x - odom.pose.pose.position.x) <= 0.025 + 1e-9
    assert grid.header.frame_id == odom.header.frame_id == "odom" and odom.child_frame_id == "base"

    # the controller stood up and ran the policy: its states, in order, in /diagnostics
    states = []
    for _, diag in msgs["/diagnostics"]:
        state = {kv.key: kv.value for kv in diag.status[0].values}["state"]
        if not states or states[-1] != state:
            states.append(state)
    assert states == ["ZERO_TORQUE", "STAND_UP", "POLICY"]
    assert result.policy_start == pytest.approx(0.02 + 2.0)  # first control period, then the stand-up
    assert [s.name for s in result.segments] == ["forward", "sideways", "turning", "stop"]
    assert all(s.samples > 0 for s in result.segments)
    assert result.violations["samples"] == 4000 and result.violations["policy_steps"] == 500
    assert result.real_time_factor > 0


def test_constant_wheel_action_rolls_the_robot_at_wheel_speed_times_radius(tmp_path):
    actions = np.array([0.0 if j.kind == "leg" else 1.0 for j in ROBOT.joints])
    policy = constant_policy(tmp_path / "roll.onnx", actions)
    wheel_speed = 5.0 * 1.0  # offset 0 + action scale 5 rad/s x action 1 (robot contract)
    assert all(j.action_scale == 5.0 for j in ROBOT.joints if j.kind == "wheel")
    segments = [{"name": "forward", "duration": 3.0, "vx": 0.5}]
    result = run(policy, 5.2, commands=segments, settle=1.0)
    seg = result.segments[0]
    assert result.final_state == "POLICY" and not result.fell
    expected = wheel_speed * WHEEL.radius
    vx, vy, wz = seg.mean_velocity
    assert seg.mean_abs_error_settled[0] == pytest.approx(abs(0.5 - expected), abs=0.05 * expected)
    assert vx == pytest.approx(expected, rel=0.1)
    assert abs(vy) < 0.02 and abs(wz) < 0.02


def test_a_leg_step_beyond_the_torque_limit_is_reported_by_the_monitor(tmp_path):
    """LF_HFE commanded 1 rad from its default (action 2 x scale 0.5): kp 80 x ~1 rad ~ 80 N m > 75."""
    actions = np.zeros(len(ROBOT.joints))
    actions[ROBOT.joint_names.index("LF_HFE")] = 2.0
    result = run(constant_policy(tmp_path / "step.onnx", actions), 2.0, stand_up=0.5, commands=[{"duration": 1.0}])
    v = result.violations
    assert v["joints"]["effort"]["LF_HFE"]["events"] >= 1 and v["events"]["effort"] >= 1
    assert 75.0 < v["joints"]["effort"]["LF_HFE"]["max_abs"] <= ROBOT.joint("LF_HFE").torque_limit
    assert v["violating_policy_steps"]["any"] >= 1
    worst = result.worst_violations[0]
    assert worst["quantity"] == "effort" and worst["limit"] == 75.0 and worst["peak"] > 75.0
    assert worst["start"] >= 0.5  # not before the policy started
    onsets = result.violation_onsets["effort"]
    assert sum(onsets.values()) == v["events"]["effort"]  # every event sorted once
    assert onsets["after_command_step"] == 0  # the command is zero throughout: no step to react to


def test_no_partial_bag_remains_when_a_run_fails(exported_policy, tmp_path, monkeypatch):
    real_step = SimHardware.step

    def failing_step(self):
        if self.step_count == 500:
            raise RuntimeError("simulated crash")
        real_step(self)

    monkeypatch.setattr(SimHardware, "step", failing_step)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(exported_policy, 3.0, record=tmp_path / "bag")
    assert list(tmp_path.iterdir()) == []


def test_sqlite3_storage_and_jazzy_definitions(exported_policy, tmp_path):
    bag = tmp_path / "sq"
    config = Sim2SimConfig(storage="sqlite3", distro="jazzy", bag_version=8, stand_up=0.5)
    result = run(exported_policy, 1.0, record=bag, config=config)
    assert (bag / "sq.db3").is_file()
    msgs = read_bag(bag)
    assert len(msgs["/joint_states"]) == 400 and len(msgs["/joint_commands"]) == 50
    assert result.storage == "sqlite3"


def test_cli_runs_records_and_writes_a_summary(exported_policy, tmp_path, capsys):
    script = tmp_path / "cmds.csv"
    script.write_text(
        "# name,duration,vx,vy,yaw_rate\nname,duration,vx,vy,yaw_rate\nahead,0.5,0.3,0,0\nturn,0.5,0,0,0.4\n"
    )
    summary = tmp_path / "summary.json"
    code = main(
        [
            "--policy",
            str(exported_policy),
            "--duration",
            "3",
            "--stand-up",
            "1",
            "--commands",
            str(script),
            "--record",
            str(tmp_path / "bag"),
            "--summary",
            str(summary),
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "ahead" in out and "turn" in out and "real-time factor" in out and "violations" in out
    data = json.loads(summary.read_text())
    assert [s["name"] for s in data["segments"]] == ["ahead", "turn"]
    assert data["segments"][0]["command"] == [0.3, 0.0, 0.0]
    assert data["message_counts"]["/joint_states"] == 1200
    assert data["bag"] == str(tmp_path / "bag")


def test_cli_refuses_bad_input_clearly(exported_policy, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {duration: 2, vx: 3.5}\n")
    assert main(["--policy", str(exported_policy), "--commands", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "vx = 3.5 is outside the robot's command range [-2.0, 2.0]" in err

    existing = tmp_path / "exists"
    existing.mkdir()
    assert main(["--policy", str(exported_policy), "--record", str(existing), "--no-progress"]) == 2
    assert "exists already" in capsys.readouterr().err

    assert main(["--policy", str(tmp_path / "missing.onnx"), "--no-progress"]) == 2
    assert "no such policy file" in capsys.readouterr().err


def test_help_documents_the_command_script_format(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for text in ("--policy", "--duration", "--commands", "--terrain", "--record", "--storage", "yaw_rate", "CSV"):
        assert text in out


def test_rough_terrain_map_shows_the_terrain(exported_policy, tmp_path):
    bag = tmp_path / "rough"
    result = run(exported_policy, 3.0, record=bag, terrain="rough", stand_up=1.0)
    assert result.terrain == "rough" and result.message_counts["/elevation_map"] == 30
    grid = read_bag(bag)["/elevation_map"][0][1]
    heights = np.asarray(grid.data[0].data)
    assert np.all(np.isfinite(heights)) and np.ptp(heights) > 0.01  # the start tile has bumps
