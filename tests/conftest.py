"""Markers that need something this machine may lack are skipped with the reason printed (-ra)."""

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
