"""The simulation side of the ROS 2 sim bridge, without ROS: what ``bridge_node`` ticks.

:class:`SimBridge` advances the :class:`sim2sim.hardware.SimHardware` one control period per
:meth:`SimBridge.tick`, publishing each physics step's sensor messages and a clock, and optionally
plays a command script on ``/cmd_vel`` (an operator for demos; script time 0 is
``commands_delay`` seconds of simulation time, so the controller has time to stand up). Joint
commands from the controller node arrive through :meth:`SimBridge.on_joint_command`.
Every decision lives here, so it is tested without rclpy; the node only moves messages and paces
ticks against the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aow_policy.messages import MessageFactory, twist_msg
from aow_policy.robot import Robot
from sim2sim.commands import CommandSchedule
from sim2sim.hardware import HardwareConfig, SimHardware, Topics, steps_between
from sim2sim.world import RoughTerrainConfig, build_world

Publish = Callable[[str, Any, float], None]
CLOCK_TOPIC = "/clock"


@dataclass(frozen=True)
class BridgeConfig:
    terrain: str = "flat"
    seed: int = 0
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    topics: Topics = field(default_factory=Topics)
    rough: RoughTerrainConfig = field(default_factory=RoughTerrainConfig)
    cmd_vel_hz: float = 50.0  # only with a command script
    commands_delay: float = 3.0  # s of simulation time before the script starts
    publish_clock: bool = True  # rosgraph_msgs/Clock every physics step, for use_sim_time


class SimBridge:
    def __init__(
        self,
        robot: Robot,
        factory: MessageFactory,
        publish: Publish,
        config: BridgeConfig | None = None,
        schedule: CommandSchedule | None = None,
    ):
        self.config = config if config is not None else BridgeConfig()
        cfg = self.config
        cfg.hardware.validate()
        self.factory, self.publish, self.schedule = factory, publish, schedule
        world = build_world(
            robot, cfg.terrain, physics_dt=1.0 / cfg.hardware.physics_hz, seed=cfg.seed, rough=cfg.rough
        )
        self.hardware = SimHardware(world, robot, factory, publish, cfg.hardware, cfg.topics)
        self.steps_per_tick = steps_between(cfg.hardware.physics_hz, 1.0 / robot.rates.policy_dt, "the policy rate")
        self.tick_period = robot.rates.policy_dt
        self._cmd_every = steps_between(cfg.hardware.physics_hz, cfg.cmd_vel_hz, "cmd_vel_hz") if schedule else 0

    @property
    def time(self) -> float:
        return self.hardware.time

    def on_joint_command(self, msg: Any) -> bool:
        """A /joint_commands JointState from the controller, applied from the next physics step."""
        return self.hardware.on_joint_command(msg, self.hardware.time)

    def tick(self) -> None:
        """One control period of simulation: per physics step, clock, sensors, script, then the step."""
        hw = self.hardware
        for _ in range(self.steps_per_tick):
            t = hw.time
            if self.config.publish_clock:
                self.publish(CLOCK_TOPIC, self.factory.new("rosgraph_msgs/msg/Clock", clock=self.factory.time(t)), t)
            hw.publish_sensors()
            if self.schedule is not None and hw.step_count % self._cmd_every == 0:
                command = self.schedule.command_at(t - self.config.commands_delay)
                self.publish(self.config.topics.cmd_vel, twist_msg(self.factory, *command), t)
            hw.step()
