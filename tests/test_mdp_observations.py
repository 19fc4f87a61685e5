"""Rotation helpers, observation terms and the layout-driven assembly, hand-checked."""

from __future__ import annotations

import math

import pytest
import torch

from aow_policy.layout import ObservationLayout
from training.mdp import commands, terminations
from training.mdp.math import (
    quat_from_yaw,
    quat_rotate,
    quat_rotate_inverse,
    roll_pitch_from_quat,
    wrap_to_pi,
    yaw_from_quat,
)
from training.mdp.observations import ObservationAssembler, height_scan, projected_gravity, scan_points_world


def test_quaternion_rotation_about_z():
    q = quat_from_yaw(torch.tensor([math.pi / 2]))
    v = torch.tensor([[1.0, 0.0, 0.0]])
    assert quat_rotate(q, v).tolist()[0] == pytest.approx([0.0, 1.0, 0.0], abs=1e-6)
    assert quat_rotate_inverse(q, v).tolist()[0] == pytest.approx([0.0, -1.0, 0.0], abs=1e-6)
    assert yaw_from_quat(q).item() == pytest.approx(math.pi / 2)


def test_projected_gravity_and_roll_pitch():
    upright = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    assert projected_gravity(upright).tolist()[0] == pytest.approx([0.0, 0.0, -1.0])
    # roll by +90 deg about x: gravity (0, 0, -1) seen in the body is (0, -1, 0)
    half = math.pi / 4
    rolled = torch.tensor([[math.cos(half), math.sin(half), 0.0, 0.0]])
    assert projected_gravity(rolled).tolist()[0] == pytest.approx([0.0, -1.0, 0.0], abs=1e-6)
    roll, pitch = roll_pitch_from_quat(rolled)
    assert roll.item() == pytest.approx(math.pi / 2) and pitch.item() == pytest.approx(0.0, abs=1e-6)
    pitched = torch.tensor([[math.cos(0.15), 0.0, math.sin(0.15), 0.0]])
    assert roll_pitch_from_quat(pitched)[1].item() == pytest.approx(0.3)


def test_wrap_to_pi():
    assert wrap_to_pi(torch.tensor([3 * math.pi / 2, -3 * math.pi / 2])).tolist() == pytest.approx(
        [-math.pi / 2, math.pi / 2]
    )


def test_scan_points_rotate_with_yaw_only_and_scan_value():
    pts = torch.tensor([[1.0, 0.0], [0.0, 0.5]])
    base = torch.tensor([[2.0, 3.0, 0.6]])
    world = scan_points_world(base, torch.tensor([math.pi / 2]), pts)
    assert world[0].tolist() == [pytest.approx([2.0, 4.0]), pytest.approx([1.5, 3.0])]
    # base_z - 0.5 - h
    assert height_scan(base[:, 2], torch.tensor([[0.0, 0.2]]), 0.5).tolist()[0] == pytest.approx([0.1, -0.1])


def test_assembler_order_clip_scale_and_noise():
    layout = ObservationLayout.build(
        [
            {"name": "base_ang_vel", "size": 3, "scale": 0.25},
            {"name": "height_scan", "size": 2, "scale": 5.0, "clip": 1.0, "params": {"height_offset": 0.5}},
        ]
    )
    asm = ObservationAssembler(layout, noise={"base_ang_vel": 0.1})
    raw = {"height_scan": torch.tensor([[2.0, -0.1]]), "base_ang_vel": torch.tensor([[4.0, 0.0, -8.0]])}
    out = asm(raw)
    assert out.tolist()[0] == pytest.approx([1.0, 0.0, -2.0, 5.0, -0.5])
    gen = torch.Generator().manual_seed(0)
    noisy = asm(raw, add_noise=True, generator=gen)
    delta = (noisy - out)[0]
    assert (delta[:3].abs() <= 0.1 * 0.25 + 1e-7).all() and (delta[:3] != 0).all()
    assert (delta[3:] == 0).all()  # no noise configured for the scan
    with pytest.raises(ValueError, match="not in the layout"):
        ObservationAssembler(layout, noise={"joint_vel": 1.0})


def test_commands():
    low, high = torch.tensor([-2.0, -1.0, -1.5]), torch.tensor([2.0, 1.0, 1.5])
    c = commands.sample_uniform(5000, low, high, torch.Generator().manual_seed(1))
    assert (c >= low).all() and (c <= high).all()
    assert c.mean(0).abs().max() < 0.1 and (c.max(0).values > 0.95 * high).all()
    standing = torch.zeros(5000, dtype=torch.bool)
    standing[:10] = True
    z = commands.zero_standing(c, standing)
    assert (z[:10] == 0).all() and torch.equal(z[10:], c[10:])
    small = commands.zero_small_linear(torch.tensor([[0.1, 0.1, 1.0], [0.3, 0.0, 1.0]]), 0.2)
    assert torch.equal(small, torch.tensor([[0.0, 0.0, 1.0], [0.3, 0.0, 1.0]]))
    rate = commands.heading_to_yaw_rate(torch.tensor([1.0, 3.0]), torch.tensor([0.0, -3.0]), 0.5, -1.5, 1.5)
    # 0.5 * 1 = 0.5; wrap(6) = 6 - 2pi = -0.283 -> -0.1416
    assert rate.tolist() == pytest.approx([0.5, 0.5 * (6.0 - 2 * math.pi)])


def test_terminations():
    contacts = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    assert terminations.contact(contacts).tolist() == [False, True]
    roll, pitch = torch.tensor([0.1, 1.2, 0.0]), torch.tensor([0.0, 0.0, -1.1])
    assert terminations.bad_orientation(roll, pitch, 1.0, 1.0).tolist() == [False, True, True]
    a = torch.tensor([[0.0, float("nan")], [0.0, 1.0], [0.0, 0.0]])
    b = torch.tensor([[0.0], [0.0], [float("inf")]])
    assert terminations.nonfinite(a, b).tolist() == [True, False, True]
    assert terminations.time_out(torch.tensor([999, 1000]), 1000).tolist() == [False, True]
    # Bounds 15 (a knee at 2 x 7.5) and 60 rad/s (a wheel): only a joint past its own bound trips.
    speeds = torch.tensor([[14.9, 59.0], [-15.1, 0.0], [0.0, 61.0], [15.0, -60.0]])
    assert terminations.joint_speed_trip(speeds, torch.tensor([15.0, 60.0])).tolist() == [False, True, True, False]


def test_orientation_bound_from_gravity_equals_euler_bound():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2000, 4, generator=gen)
    q = q / q.norm(dim=-1, keepdim=True)
    roll, pitch = roll_pitch_from_quat(q)
    by_euler = terminations.bad_orientation(roll, pitch, 1.0, 0.8)
    by_gravity = terminations.bad_orientation_from_gravity(projected_gravity(q), 1.0, 0.8)
    assert by_euler.any() and (~by_euler).any()
    assert (by_euler == by_gravity).float().mean() > 0.999  # equal up to float rounding at the bounds
