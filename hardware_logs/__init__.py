"""Offline replay of robot recordings: violation statistics, reports and plots (``aow-replay``).

Reads rosbag2 recordings with rosbags (no ROS install), decodes JointState messages in bulk
(:mod:`hardware_logs.fastcdr`), matches joints by name to the robot contract, and counts
violations with the definitions shared with training and the online monitor
(:mod:`aow_policy.violations`).
"""

from hardware_logs.analyse import BagResult, analyse_bag
from hardware_logs.stats import Settings

__all__ = ["BagResult", "Settings", "analyse_bag"]
