"""Markers that need something this machine may lack are skipped with the reason printed (-ra).

With AOW_REQUIRE_ROS=1 (CI, which installs ROS 2) the `ros` tests are required: no rclpy is an error,
and :func:`ros_requirement` turns a missing piece of the ROS set-up into a failure instead of a skip."""

from __future__ import annotations

import importlib.util
import os

import pytest


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AOW_REQUIRE_ROS") == "1" and not _has("rclpy"):
        # CI provisions ROS 2: a ros test must run there, never be skipped
        raise pytest.UsageError("AOW_REQUIRE_ROS=1 but rclpy is not importable: source the ROS 2 setup.bash first")
    reasons = {
        "ros": None if _has("rclpy") else "rclpy (ROS 2) is not installed here",
        "isaacgym": None if _has("isaacgym") else "isaacgym is not installed here",
        "gpu": None if _has_cuda() else "no CUDA GPU on this machine",
        "slow": None if os.environ.get("AOW_RUN_SLOW") == "1" else "slow test: set AOW_RUN_SLOW=1 (make test-slow)",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


def ros_requirement(reason: str) -> None:
    """Skip a ros test for ``reason`` where ROS 2 is optional; fail it where CI requires ROS 2."""
    if os.environ.get("AOW_REQUIRE_ROS") == "1":
        pytest.fail(f"AOW_REQUIRE_ROS=1 but {reason}")
    pytest.skip(reason)
