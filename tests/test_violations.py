"""The shared violation definitions give the same answers on numpy arrays and torch tensors."""

from __future__ import annotations

import numpy as np
import torch

from aow_policy import violations as v

LIMITS = np.array([6.0, 6.0, np.inf])


def test_numpy_definitions_on_hand_values():
    vel = np.array([[6.5, -5.9, 100.0], [6.0, -6.0001, 0.0]])
    np.testing.assert_array_equal(v.over_limit(vel, LIMITS), [[True, False, False], [False, True, False]])
    np.testing.assert_allclose(v.overrun(vel, LIMITS), [[0.5, 0.0, 0.0], [0.0, 0.0001, 0.0]], atol=1e-12)
    np.testing.assert_array_equal(v.any_over(vel, LIMITS), [True, True])
    np.testing.assert_array_equal(v.joints_over(vel, LIMITS), [1, 1])
    np.testing.assert_array_equal(
        v.outside_range(np.array([0.5, -0.8, 0.0]), np.array([-0.72, -0.72, -0.72]), np.array([0.49] * 3)),
        [True, True, False],
    )


def test_torch_and_numpy_agree():
    rng = np.random.default_rng(0)
    vel = rng.normal(0, 6, size=(64, 3))
    t = torch.from_numpy(vel)
    tl = torch.from_numpy(LIMITS)
    np.testing.assert_array_equal(v.over_limit(t, tl).numpy(), v.over_limit(vel, LIMITS))
    np.testing.assert_allclose(v.overrun(t, tl).numpy(), v.overrun(vel, LIMITS))
    np.testing.assert_array_equal(v.any_over(t, tl).numpy(), v.any_over(vel, LIMITS))
    np.testing.assert_array_equal(v.joints_over(t, tl).numpy(), v.joints_over(vel, LIMITS))
    assert (v.overrun(vel, LIMITS) ** 2)[np.abs(vel[:, 0]) > 6.0, 0].min() > 0
