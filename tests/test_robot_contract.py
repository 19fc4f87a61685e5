"""The robot contract loads, matches public facts, and rejects malformed files naming the field."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from aow_policy.robot import ContractError, default_config_path, load_robot, robot_from_dict

LEGS = ("LF", "RF", "LH", "RH")


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(default_config_path().read_text())


def test_loads_with_sixteen_joints_in_contract_order():
    r = load_robot()
    expected = [f"{leg}_{j}" for leg in LEGS for j in ("HAA", "HFE", "KFE")] + [f"{leg}_WHEEL" for leg in LEGS]
    assert list(r.joint_names) == expected
    assert len(r.leg_joint_names) == 12 and len(r.wheel_joint_names) == 4
    assert all(r.joint(n).kind == "wheel" for n in r.wheel_joint_names)


def test_matches_public_facts():
    """Numbers from ../shared/reference/facts.md (legged_gym, ANYmal C description, the paper)."""
    r = load_robot()
    for leg in LEGS:
        front = leg[1] == "F"
        assert r.joint(f"{leg}_HAA").default_position == 0.0
        assert r.joint(f"{leg}_HFE").default_position == (0.4 if front else -0.4)
        assert r.joint(f"{leg}_KFE").default_position == (-0.8 if front else 0.8)
        left = leg[0] == "L"
        assert r.joint(f"{leg}_HAA").position_limits == ((-0.72, 0.49) if left else (-0.49, 0.72))
    legs = r.index_of(r.leg_joint_names)
    np.testing.assert_array_equal(r.constraint_velocity_limits[legs], 6.0)
    np.testing.assert_array_equal(r.constraint_torque_limits[legs], 75.0)
    assert np.isinf(r.constraint_velocity_limits[r.wheel_indices]).all()
    assert r.rates.policy_hz == 50.0 and r.rates.physics_dt <= 0.005 and r.rates.decimation == 4
    assert (r.commands.lin_vel_x, r.commands.lin_vel_y, r.commands.ang_vel_yaw) == ((-2, 2), (-1, 1), (-1.5, 1.5))
    # Actuator limits stay above the constraint limits (constraints are the tighter ones).
    assert (r.velocity_limits[legs] > 6.0).all() and (r.torque_limits[legs] > 75.0).all()


def test_height_scan_grid_and_flattening_order():
    pts = load_robot().height_scan.points
    assert pts.shape == (187, 2)
    # index = ix * 11 + iy: y runs fastest, x from -0.8 to 0.8, y from -0.5 to 0.5.
    np.testing.assert_allclose(pts[0], [-0.8, -0.5])
    np.testing.assert_allclose(pts[1], [-0.8, -0.4])
    np.testing.assert_allclose(pts[11], [-0.7, -0.5])
    np.testing.assert_allclose(pts[-1], [0.8, 0.5])
    ix, iy = 13, 4
    np.testing.assert_allclose(pts[ix * 11 + iy], [-0.8 + 0.1 * ix, -0.5 + 0.1 * iy], atol=1e-12)
    assert not pts.flags.writeable


def test_contract_hash_is_stable_and_content_sensitive(raw):
    a = robot_from_dict(copy.deepcopy(raw))
    b = robot_from_dict(copy.deepcopy(raw))
    assert a.contract_hash == b.contract_hash == load_robot().contract_hash
    changed = copy.deepcopy(raw)
    changed["joints"][0]["kp"] = 81.0
    assert robot_from_dict(changed).contract_hash != a.contract_hash


def test_index_of_matches_by_name():
    r = load_robot()
    idx = r.index_of(["RH_WHEEL", "LF_HAA", "RF_KFE"])
    assert [r.joint_names[i] for i in idx] == ["RH_WHEEL", "LF_HAA", "RF_KFE"]
    with pytest.raises(KeyError, match="FOO"):
        r.index_of(["FOO"])


def _mutated(raw: dict, fn) -> dict:
    d = copy.deepcopy(raw)
    fn(d)
    return d


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["joints"].pop(4), r"missing joint\(s\) \['RF_HFE'\]"),
        (lambda d: d["joints"][1].update(name="LF_HAA"), r"duplicate joint name\(s\) \['LF_HAA'\]"),
        (
            lambda d: d["joints"][2].update(velocity_limit=-1.0),
            r"joints\[2\] \(LF_KFE\)\.velocity_limit: must be positive",
        ),
        (lambda d: d["joints"][5].update(torque_limit=0), r"RF_KFE\)\.torque_limit: must be positive"),
        (
            lambda d: d["joints"][0].update(position_limits=[0.5, -0.5]),
            r"LF_HAA\)\.position_limits: lower 0.5 is greater",
        ),
        (lambda d: d["joints"][0].update(stiffness=3), r"joints\[0\]: unknown key\(s\) \['stiffness'\]"),
        (lambda d: d["joints"][3].pop("kd"), r"joints\[3\]: missing key\(s\) \['kd'\]"),
        (lambda d: d["joints"][0].update(default_position=1.0), r"LF_HAA\)\.default_position: 1.0 is outside"),
        (lambda d: d["joints"][0].update(kind="arm"), r"LF_HAA\)\.kind"),
        (lambda d: d["constraints"]["joint_speed"].update(limit=-6.0), r"constraints\.joint_speed\.limit"),
        (lambda d: d["rates"].update(physics_dt=0.006), r"rates\.physics_dt"),
        (lambda d: d["rates"].update(physics_dt=0.003), r"whole number of physics steps"),
        (lambda d: d["height_scan"].update(order="y_major"), r"height_scan\.order"),
        (lambda d: d["commands"].update(lin_vel_x=[2.0, -2.0]), r"commands\.lin_vel_x: lower 2.0"),
        (lambda d: d.update(extra=1), r"contract: unknown key\(s\) \['extra'\]"),
    ],
)
def test_malformed_contract_is_rejected_naming_the_field(raw, mutate, message):
    with pytest.raises(ContractError, match=message):
        robot_from_dict(_mutated(raw, mutate))


def test_unreadable_and_invalid_yaml_files(tmp_path: Path):
    with pytest.raises(ContractError, match="cannot read robot contract"):
        load_robot(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("joints: [unclosed")
    with pytest.raises(ContractError, match="not valid YAML"):
        load_robot(bad)


def test_env_var_selects_contract(tmp_path: Path, raw, monkeypatch):
    alt = _mutated(raw, lambda d: d.update(name="other_robot"))
    p = tmp_path / "alt.yaml"
    p.write_text(yaml.safe_dump(alt))
    monkeypatch.setenv("AOW_ROBOT_CONFIG", str(p))
    assert load_robot().name == "other_robot"
