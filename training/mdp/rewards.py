"""Reward terms of the paper's Table I, one function per row, over batched tensors.

Each function returns the row's kernel, shape [N]; the task config holds each term's
coefficient (Table I's numbers, see ``training.envs.config.RewardsConfig``), so that the
reward of a term is ``coefficient * kernel`` (times the policy period when the config scales by
dt, as legged_gym does). Table I prints the torque and joint-motion rows without a sign; they are
minimised, so their coefficients are negative.
"""

from __future__ import annotations

import torch

from aow_policy.violations import overrun

# ---- task rewards --------------------------------------------------------------------------


def lin_vel_tracking(command_xy: torch.Tensor, lin_vel_xy: torch.Tensor, sharpness: float = 2.0) -> torch.Tensor:
    """exp(-2 ||v_xy^targ - v_xy||^2), base-frame horizontal velocity against the command."""
    return torch.exp(-sharpness * (command_xy - lin_vel_xy).square().sum(-1))


def yaw_rate_tracking(command_yaw_rate: torch.Tensor, yaw_rate: torch.Tensor, sharpness: float = 2.0) -> torch.Tensor:
    """exp(-2 (w_z^targ - w_z)^2)."""
    return torch.exp(-sharpness * (command_yaw_rate - yaw_rate).square())


# ---- style rewards -------------------------------------------------------------------------


def base_stability(lin_vel_z: torch.Tensor, ang_vel_xy: torch.Tensor) -> torch.Tensor:
    """exp(-v_z^2) + exp(-||w_xy||^2), base-frame velocities."""
    return torch.exp(-lin_vel_z.square()) + torch.exp(-ang_vel_xy.square().sum(-1))


def base_height_error(base_height: torch.Tensor, target: float = 0.5) -> torch.Tensor:
    """|h^targ - h_robot|: base height above the terrain under it (coefficient -0.5)."""
    return (target - base_height).abs()


def torque_squared(torque: torch.Tensor) -> torch.Tensor:
    """||tau||^2 over the given joints (coefficient -1e-6)."""
    return torque.square().sum(-1)


def joint_vel_squared(joint_vel: torch.Tensor) -> torch.Tensor:
    """||qdot||^2 (joint motion, coefficient -1e-5)."""
    return joint_vel.square().sum(-1)


def joint_acc_squared(joint_vel: torch.Tensor, last_joint_vel: torch.Tensor, dt: float) -> torch.Tensor:
    """||qddot||^2 with qddot = (qdot_t - qdot_{t-1}) / dt (joint motion, coefficient -1e-6)."""
    return ((joint_vel - last_joint_vel) / dt).square().sum(-1)


# ---- constraint rewards (the PPO baseline's penalties; removed for the CMDP) ---------------


def command_rate_squared(target: torch.Tensor, last_target: torch.Tensor) -> torch.Tensor:
    """||q^des_t - q^des_{t-1}||^2 (command smoothness 1, coefficient -0.01)."""
    return (target - last_target).square().sum(-1)


def command_second_diff_squared(
    target: torch.Tensor, last_target: torch.Tensor, second_last_target: torch.Tensor
) -> torch.Tensor:
    """||q^des_t - 2 q^des_{t-1} + q^des_{t-2}||^2 (command smoothness 2, coefficient -0.01)."""
    return (target - 2.0 * last_target + second_last_target).square().sum(-1)


def limit_overrun_squared(values: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    """sum_i max(|x_i| - x_i^lim, 0)^2 (torque limits -0.01, speed limits -0.1)."""
    return overrun(values, limits).square().sum(-1)


def upper_limit_overrun_squared(joint_pos: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """sum_i max(q_i - q_i^ub, 0)^2 (coefficient -10); +inf bounds contribute nothing."""
    return (joint_pos - upper).clamp(min=0.0).square().sum(-1)


def lower_limit_overrun_squared(joint_pos: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
    """sum_i max(q_i^lb - q_i, 0)^2 (coefficient -10); -inf bounds contribute nothing."""
    return (lower - joint_pos).clamp(min=0.0).square().sum(-1)


def body_contact_count(undesired_contacts: torch.Tensor) -> torch.Tensor:
    """Number of non-wheel bodies in contact (coefficient -1); input [N, bodies] counts or flags."""
    return (undesired_contacts > 0).sum(-1).to(torch.get_default_dtype())


# ---- style rewards beyond Table I (legged_gym's; off in the paper's tasks) ----------------


def lin_vel_z_squared(lin_vel_z: torch.Tensor) -> torch.Tensor:
    """v_z^2, base-frame vertical velocity (legged_gym's lin_vel_z, coefficient -2)."""
    return lin_vel_z.square()


def ang_vel_xy_squared(ang_vel_xy: torch.Tensor) -> torch.Tensor:
    """||w_xy||^2, roll and pitch rates (legged_gym's ang_vel_xy, coefficient -0.05)."""
    return ang_vel_xy.square().sum(-1)


def orientation_squared(projected_gravity: torch.Tensor) -> torch.Tensor:
    """||g_xy||^2 of the gravity direction in the base frame: 0 when level (coefficient -5 flat)."""
    return projected_gravity[:, :2].square().sum(-1)


def action_rate_squared(action: torch.Tensor, last_action: torch.Tensor) -> torch.Tensor:
    """||a_t - a_{t-1}||^2 of the raw actions (legged_gym's action_rate, coefficient -0.01)."""
    return (action - last_action).square().sum(-1)
