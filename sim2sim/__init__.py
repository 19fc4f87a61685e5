"""Sim-to-sim: exported policies on the simulated robot through the deployment runtime, with or without ROS 2.

``run(policy, duration, commands, record)`` (see :mod:`sim2sim.runner`) is the Python API behind
``aow-sim2sim``; :mod:`sim2sim.bridge_node` is the same simulation as a ROS 2 node.
"""

from sim2sim.commands import CommandSchedule, CommandScriptError, Segment, default_schedule, load_script
from sim2sim.runner import Sim2SimConfig, Sim2SimResult, run

__all__ = [
    "CommandSchedule",
    "CommandScriptError",
    "Segment",
    "Sim2SimConfig",
    "Sim2SimResult",
    "default_schedule",
    "load_script",
    "run",
]
