"""Reward kernels of Table I against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from training.mdp import rewards


def test_velocity_tracking():
    cmd = torch.tensor([[1.0, 0.0], [0.5, -0.5]])
    vel = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    # exp(-2 * 0) = 1; exp(-2 * (0.25 + 0.25)) = exp(-1)
    assert rewards.lin_vel_tracking(cmd, vel).tolist() == pytest.approx([1.0, math.exp(-1.0)])
    assert rewards.yaw_rate_tracking(torch.tensor([1.0]), torch.tensor([0.5])).item() == pytest.approx(math.exp(-0.5))


def test_base_stability():
    vz = torch.tensor([0.0, 1.0])
    wxy = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    assert rewards.base_stability(vz, wxy).tolist() == pytest.approx([2.0, math.exp(-1) + math.exp(-2)])


def test_height_error_target_half_metre():
    assert rewards.base_height_error(torch.tensor([0.5, 0.4, 0.7])).tolist() == pytest.approx([0.0, 0.1, 0.2])


def test_squared_norms_and_acceleration():
    tau = torch.tensor([[3.0, 4.0]])
    assert rewards.torque_squared(tau).item() == 25.0
    assert rewards.joint_vel_squared(torch.tensor([[1.0, -2.0]])).item() == 5.0
    qd, last = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.2]])
    # qddot = (1/0.02, -0.2/0.02) = (50, -10): 2500 + 100
    assert rewards.joint_acc_squared(qd, last, 0.02).item() == pytest.approx(2600.0)


def test_constraint_rewards():
    q0, q1, q2 = torch.tensor([[0.3, 0.0]]), torch.tensor([[0.1, 0.0]]), torch.tensor([[0.0, 0.1]])
    assert rewards.command_rate_squared(q0, q1).item() == pytest.approx(0.04)
    # q0 - 2 q1 + q2 = (0.1, 0.1)
    assert rewards.command_second_diff_squared(q0, q1, q2).item() == pytest.approx(0.02)
    limits = torch.tensor([6.0, float("inf")])
    assert rewards.limit_overrun_squared(torch.tensor([[-7.0, 100.0]]), limits).item() == pytest.approx(1.0)
    upper = torch.tensor([0.5, float("inf")])
    lower = torch.tensor([-0.5, float("-inf")])
    q = torch.tensor([[0.7, 3.0], [-0.8, -3.0]])
    assert rewards.upper_limit_overrun_squared(q, upper).tolist() == pytest.approx([0.04, 0.0])
    assert rewards.lower_limit_overrun_squared(q, lower).tolist() == pytest.approx([0.0, 0.09])
    contacts = torch.tensor([[0.0, 2.0, 1.0], [0.0, 0.0, 0.0]])
    assert rewards.body_contact_count(contacts).tolist() == [2.0, 0.0]
