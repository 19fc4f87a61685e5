"""Cost terms against hand-computed values (paper Section III-A and the appendix cost table)."""

from __future__ import annotations

import math

import pytest
import torch

from aow_policy.robot import load_robot
from training.mdp import costs
from training.mdp.costs import CostType


@pytest.fixture(scope="module")
def robot():
    return load_robot()


def leg_speed_limits(robot) -> torch.Tensor:
    return torch.tensor(robot.constraint_velocity_limits, dtype=torch.float32)


def test_joint_speed_indicator_6p5_is_1_and_5p9_is_0(robot):
    limits = leg_speed_limits(robot)
    qd = torch.zeros(2, 16)
    qd[0, robot.index_of(["RF_KFE"])[0]] = 6.5
    qd[1, robot.index_of(["RF_KFE"])[0]] = -5.9
    assert costs.limit_cost(qd, limits, CostType.INDICATOR).tolist() == [1.0, 0.0]


def test_joint_speed_exactly_at_limit_is_no_violation(robot):
    qd = torch.zeros(1, 16)
    qd[0, 0] = 6.0
    assert costs.limit_cost(qd, leg_speed_limits(robot), CostType.INDICATOR).item() == 0.0


def test_wheels_are_not_speed_constrained(robot):
    qd = torch.zeros(1, 16)
    qd[0, robot.index_of(["LF_WHEEL"])[0]] = 25.0
    for t in CostType:
        assert costs.limit_cost(qd, leg_speed_limits(robot), t).item() == 0.0


def test_cost_types_on_two_overrunning_joints(robot):
    limits = leg_speed_limits(robot)
    qd = torch.zeros(1, 16)
    i, j = robot.index_of(["LF_HAA", "RH_KFE"])
    qd[0, i] = 6.5  # overrun 0.5
    qd[0, j] = -7.0  # overrun 1.0
    assert costs.limit_cost(qd, limits, CostType.INDICATOR).item() == 1.0
    assert costs.limit_cost(qd, limits, CostType.COUNT).item() == 2.0
    assert costs.limit_cost(qd, limits, CostType.RELU).item() == pytest.approx(1.5)
    assert costs.limit_cost(qd, limits, CostType.RELU2).item() == pytest.approx(0.25 + 1.0)


def test_relu2_of_half_radian_per_second_overrun_is_quarter(robot):
    qd = torch.zeros(1, 16)
    qd[0, 4] = 6.5
    assert costs.limit_cost(qd, leg_speed_limits(robot), CostType.RELU2).item() == pytest.approx(0.25)


def test_joint_torque_75_limit_on_legs_only(robot):
    limits = torch.tensor(robot.constraint_torque_limits, dtype=torch.float32)
    tau = torch.zeros(3, 16)
    tau[0, 2] = 75.0  # at the limit: fine
    tau[1, 2] = -80.0  # over by 5
    tau[2, robot.index_of(["RH_WHEEL"])[0]] = 200.0  # wheels unconstrained
    assert costs.limit_cost(tau, limits, CostType.INDICATOR).tolist() == [0.0, 1.0, 0.0]
    assert costs.limit_cost(tau, limits, CostType.RELU).tolist() == [0.0, 5.0, 0.0]


def test_hip_position_cost(robot):
    hips = robot.hip_joint_indices
    lower = torch.tensor(robot.position_lower[hips], dtype=torch.float32)
    upper = torch.tensor(robot.position_upper[hips], dtype=torch.float32)
    q = torch.zeros(4, 4)
    q[1, 0] = 0.59  # LF_HAA upper 0.49: over by 0.1
    q[2, 1] = -0.69  # RF_HAA lower -0.49: under by 0.2
    q[3, 0] = 0.49  # exactly at the bound
    assert costs.position_range_cost(q, lower, upper, CostType.INDICATOR).tolist() == [0.0, 1.0, 1.0, 0.0]
    relu = costs.position_range_cost(q, lower, upper, CostType.RELU)
    assert relu.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.0])
    relu2 = costs.position_range_cost(q, lower, upper, CostType.RELU2)
    assert relu2.tolist() == pytest.approx([0.0, 0.01, 0.04, 0.0])
    q[1, 1] = -0.69
    assert costs.position_range_cost(q, lower, upper, CostType.COUNT)[1].item() == 2.0


def test_body_contact_thigh_counts_wheel_does_not():
    # Columns: the bodies watched for undesired contact (never wheels or feet); a wheel touching
    # the ground therefore never appears here, which is what the env's contact sensors encode.
    thigh_touch = torch.tensor([[0.0, 0.0, 3.0, 0.0]])
    nothing = torch.zeros(1, 4)
    assert costs.body_contact_cost(thigh_touch, CostType.INDICATOR).item() == 1.0
    assert costs.body_contact_cost(nothing, CostType.INDICATOR).item() == 0.0
    two = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
    assert costs.body_contact_cost(two, CostType.COUNT).item() == 2.0
    with pytest.raises(ValueError, match="body_contact"):
        costs.body_contact_cost(two, CostType.RELU)


def test_smoothness_thresholds_from_speed_limit(robot):
    dt = 0.02
    rate, second = costs.smoothness_thresholds(leg_speed_limits(robot), dt)
    leg = robot.leg_indices[0]
    wheel = robot.wheel_indices[0]
    assert rate[leg].item() == pytest.approx(3.0)
    assert second[leg].item() == pytest.approx(150.0)
    assert math.isinf(rate[wheel].item()) and math.isinf(second[wheel].item())


def test_command_smoothness_c1_c2_hand_computed():
    dt = 0.02
    q2 = torch.tensor([[0.0, 0.0]])  # q^des_{t-2}
    q1 = torch.tensor([[0.1, 0.0]])  # q^des_{t-1}
    q0 = torch.tensor([[0.3, 0.01]])  # q^des_t
    rate = costs.command_rate(q0, q1, dt)
    assert rate[0].tolist() == pytest.approx([10.0, 0.5])
    second = costs.command_second_rate(q0, q1, q2, dt)
    # (0.3 - 0.2 + 0) / 4e-4 = 250; (0.01 - 0 + 0) / 4e-4 = 25
    assert second[0].tolist() == pytest.approx([250.0, 25.0])
    thr1, thr2 = torch.tensor([3.0, 3.0]), torch.tensor([150.0, 150.0])
    assert costs.limit_cost(rate, thr1, CostType.RELU).item() == pytest.approx(7.0)
    assert costs.limit_cost(second, thr2, CostType.RELU).item() == pytest.approx(100.0)
    assert costs.limit_cost(second, thr2, CostType.COUNT).item() == 1.0


def test_parse_cost_type_names_the_term():
    assert costs.parse_cost_type("relu2") is CostType.RELU2
    with pytest.raises(ValueError, match=r"joint_speed.*'square'"):
        costs.parse_cost_type("square", "joint_speed")
