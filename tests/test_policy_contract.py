"""The policy contract: parsing, refusals naming the field, the command formula, robot comparison."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict

import numpy as np
import pytest
import yaml

from aow_policy.layout import ObservationLayout
from aow_policy.policy_contract import (
    PolicyContractError,
    check_fits_robot,
    contract_differences,
    contract_to_json,
    contract_to_yaml,
    parse_contract,
    robot_action_term,
    robot_constraint_limits,
    robot_height_scan,
)
from aow_policy.robot import load_robot, robot_from_dict


@pytest.fixture(scope="module")
def robot():
    return load_robot()


def _layout(robot) -> ObservationLayout:
    return ObservationLayout.build(
        [
            {"name": "projected_gravity", "size": 3},
            {"name": "joint_pos", "size": 12, "joints": list(robot.leg_joint_names)},
            {"name": "last_action", "size": 16},
            {"name": "height_scan", "size": 187, "scale": 5.0, "clip": 1.0, "params": {"height_offset": 0.5}},
        ]
    )


@pytest.fixture
def contract(robot) -> dict:
    layout = _layout(robot)
    return {
        "schema_version": 1,
        "robot": {"name": robot.name, "contract_hash": robot.contract_hash},
        "control": {"policy_dt": 0.02, "physics_dt": 0.005},
        "actions": [asdict(robot_action_term(robot, n)) for n in robot.joint_names],
        "action_clip": None,
        "observation": {"dim": layout.dim, "terms": layout.to_list()},
        "height_scan": robot_height_scan(robot),
        "constraint_limits": robot_constraint_limits(robot),
        "training": {"task": "aow_rough", "algorithm": "np3o", "iteration": 3, "config_hash": "ab" * 32},
        "export": {"time_utc": "2024-01-01T00:00:00Z", "opset": 17, "verified_max_abs_diff": 1e-7},
    }


def _robot_variant(robot, edit):
    raw = robot.to_dict()
    edit(raw)
    return robot_from_dict(raw, source="variant.yaml")


def test_valid_contract_parses_with_robot_values(contract, robot):
    c = parse_contract(contract)
    assert c.obs_dim == 3 + 12 + 16 + 187
    assert c.num_actions == 16
    assert c.joint_names == robot.joint_names
    assert c.height_scan["num_points"] == 187 and c.height_scan["nx"] == 17 and c.height_scan["ny"] == 11
    assert c.constraint_limits == {"joint_speed": 6.0, "joint_torque": 75.0}
    lf_hfe = c.actions[robot.joint_names.index("LF_HFE")]
    assert (lf_hfe.mode, lf_hfe.offset, lf_hfe.scale) == ("position", 0.4, 0.5)
    wheel = c.actions[robot.joint_names.index("LF_WHEEL")]
    assert (wheel.mode, wheel.offset, wheel.low, wheel.high) == ("velocity", 0.0, -30.0, 30.0)


def test_commands_offset_scale_and_clip_by_hand(contract, robot):
    c = parse_contract(contract)
    a = np.zeros(16)
    i_haa, i_hfe, i_wheel = (robot.joint_names.index(n) for n in ("LF_HAA", "LF_HFE", "LF_WHEEL"))
    a[i_hfe], a[i_haa], a[i_wheel] = 1.0, 2.0, 10.0
    cmd = c.commands(a)
    assert cmd[i_hfe] == pytest.approx(0.4 + 0.5 * 1.0)
    assert cmd[i_haa] == pytest.approx(0.49)  # 0 + 0.5 * 2 = 1.0, above LF_HAA's upper limit 0.49
    assert cmd[i_wheel] == pytest.approx(30.0)  # 5 * 10 = 50 rad/s, above the wheel limit 30
    assert cmd[robot.joint_names.index("LH_KFE")] == pytest.approx(0.8)  # zero action: default pose
    contract["action_clip"] = 1.0
    assert parse_contract(contract).commands(a)[i_wheel] == pytest.approx(5.0)  # raw action clipped to 1 first


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("actions"), "missing key(s) ['actions']"),
        (lambda d: d.update(extra=1), "unknown key(s) ['extra']"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d["control"].update(policy_dt=-0.02), "control.policy_dt"),
        (lambda d: d["actions"][0].update(mode="velocity"), "actions[0] (LF_HAA).mode"),
        (lambda d: d["actions"][3].update(scale=float("nan")), "actions[3] (RF_HAA).scale"),
        (lambda d: d["actions"][1].update(joint="LF_HAA"), "driven by more than one action"),
        (lambda d: d["observation"].update(dim=10), "observation.dim"),
        (lambda d: d["observation"]["terms"][1].update(offset=4), "offset 4"),
        (lambda d: d["observation"]["terms"][0].update(name="foot_forces"), "unknown"),
        (lambda d: d["height_scan"].update(num_points=100), "height_scan"),
        (lambda d: d.update(height_scan=None), "height_scan: null"),
        (lambda d: d["actions"].pop(), "last_action has 16 values for 15 actions"),
        (lambda d: d["constraint_limits"].pop("joint_torque"), "constraint_limits"),
        (lambda d: d["training"].pop("config_hash"), "training: missing key(s) ['config_hash']"),
    ],
)
def test_malformed_contracts_refused_naming_the_field(contract, edit, message):
    edit(contract)
    with pytest.raises(PolicyContractError) as e:
        parse_contract(contract)
    assert message in str(e.value)


def test_training_and_export_sections_accept_extra_keys(contract):
    contract["training"]["source_commit"] = None
    contract["export"]["exporter"] = "torch"
    parse_contract(contract)


def test_matching_robot_has_no_differences(contract, robot):
    assert contract_differences(parse_contract(contract), robot) == []
    check_fits_robot(parse_contract(contract), robot)


def test_swapped_joints_named(contract, robot):
    def swap(raw):
        raw["joints"][0], raw["joints"][1] = raw["joints"][1], raw["joints"][0]

    diffs = contract_differences(parse_contract(contract), _robot_variant(robot, swap))
    text = "\n".join(diffs)
    assert "joint order differs at action index 0: policy LF_HAA, robot LF_HFE; 1: policy LF_HFE, robot LF_HAA" in text
    assert "contract hash" in text


def test_each_difference_named(contract, robot):
    def edit(raw):
        raw["rates"]["policy_hz"] = 100.0
        raw["height_scan"]["spacing"] = 0.2  # 9 x 6 points
        raw["constraints"]["joint_speed"]["limit"] = 7.0
        raw["joints"][0]["position_limits"] = [-0.6, 0.49]

    with pytest.raises(PolicyContractError) as e:
        check_fits_robot(parse_contract(contract), _robot_variant(robot, edit), source="p.onnx")
    text = str(e.value)
    assert "p.onnx does not fit robot contract variant.yaml" in text
    assert "control period policy_dt: policy 0.02 s, robot 0.01 s" in text
    assert "height-scan grid spacing: policy 0.1, robot 0.2" in text
    assert "height-scan grid num_points: policy 187, robot 54" in text
    assert "constraint limit joint_speed: policy trained with 6.0, robot 7.0" in text
    assert "action LF_HAA.low: policy -0.72, robot -0.6" in text
    assert "contract hash" in text
    assert "joint order" not in text


def test_missing_joint_and_observation_joint_named(contract, robot):
    contract["actions"][-1]["joint"] = "XX_WHEEL"
    contract["observation"]["terms"][1]["joints"][0] = "XX_HAA"
    diffs = contract_differences(parse_contract(contract), robot)
    assert "joint names: the robot's joint(s) ['RH_WHEEL'] are not driven by the policy" in diffs
    assert "joint names: the policy drives joint(s) ['XX_WHEEL'] that the robot does not have" in diffs
    assert "observation term joint_pos: joint(s) ['XX_HAA'] are not in the robot contract" in diffs


def test_float32_rounding_is_not_a_difference(contract, robot):
    for a in contract["actions"]:
        a["offset"] = float(np.float32(a["offset"]))
    assert contract_differences(parse_contract(contract), robot) == []


def test_json_and_yaml_hold_the_same_dict(contract):
    original = copy.deepcopy(contract)
    assert json.loads(contract_to_json(contract)) == original
    assert yaml.safe_load(contract_to_yaml(contract)) == original
    contract["constraint_limits"]["joint_speed"] = float("inf")
    with pytest.raises(ValueError):
        contract_to_json(contract)
