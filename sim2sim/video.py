"""``aow-sim2sim --video``: frames of the running simulation, rendered as it happens.

A frame is due every 1/fps s of simulated time (the first after the first physics step, the last
at the end: :meth:`viz.video.VideoOptions.frame_count` frames). Between two frames every physics
step's joint velocities and efforts are checked against the contract's constraint limits with
:mod:`aow_policy.violations` (the monitor's and the training costs' predicate), so a joint over
its limit for a few milliseconds between frames is still coloured in the next frame, with the
largest overrun it reached. The event counts in the strip are the violation monitor's (events
started so far, speed and torque).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aow_policy import violations
from aow_policy.monitor import ViolationMonitor
from aow_policy.robot import Robot
from viz.render import FrameInfo, Overrun, RobotRenderer
from viz.video import VideoOptions, VideoWriter


class SimVideo:
    """Renders a sim-to-sim run into a video file; call :meth:`step` after every physics step."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: VideoOptions,
        hardware: object,  # sim2sim.hardware.SimHardware (not imported: no cycle)
        robot: Robot,
    ) -> None:
        options.validate()
        self.options = options
        self.hardware = hardware
        self.names = robot.joint_names
        self._limits = {
            "speed": robot.constraint_velocity_limits,
            "torque": robot.constraint_torque_limits,
        }
        # Largest overrun (fraction of the limit) since the last frame; -1: not over.
        self._worst = {q: np.full(len(self.names), -1.0) for q in self._limits}
        self._renderer = RobotRenderer(
            hardware.world.model, self.names, options.width, options.height, azimuth=options.azimuth
        )
        try:
            self._writer = VideoWriter(path, options.fps, options.width, options.height)
        except BaseException:
            self._renderer.close()
            raise
        self._next_frame = 0

    @property
    def frames(self) -> int:
        return self._writer.frames

    def _track(self) -> None:
        hw = self.hardware
        for quantity, values in (("speed", hw.joint_velocity), ("torque", hw.joint_effort)):
            limits = self._limits[quantity]
            over = violations.over_limit(values, limits)
            if over.any():
                ratio = np.where(over, violations.overrun(values, limits) / limits, -1.0)
                np.maximum(self._worst[quantity], ratio, out=self._worst[quantity])

    def step(
        self,
        t: float,
        state: str,
        command: Sequence[float] | None,
        monitor: ViolationMonitor,
    ) -> None:
        """After a physics step at simulated time ``t``: track overruns, render a frame when one is due."""
        self._track()
        if t + 1e-9 < self._next_frame / self.options.fps:
            return
        hw = self.hardware
        over = {}
        for quantity, worst in self._worst.items():
            for j in np.flatnonzero(worst >= 0.0).tolist():
                name = self.names[j]
                if name not in over or worst[j] > over[name].ratio:
                    over[name] = Overrun(quantity, float(worst[j]))
            worst.fill(-1.0)
        measured = (*hw.base_linear_velocity[:2], hw.base_angular_velocity[2])
        # events so far: those closed plus those still running
        events = {
            label: int(tr.events.sum() + tr.active.sum())
            for label, tr in (("speed", monitor.trackers["velocity"]), ("torque", monitor.trackers["effort"]))
        }
        info = FrameInfo(t, state, command, measured, over, events)
        self._writer.write(self._renderer.render(hw.data, info))
        self._next_frame += 1

    def close(self) -> Path:
        try:
            return self._writer.close()
        finally:
            self._renderer.close()

    def abort(self) -> None:
        try:
            self._writer.abort()
        finally:
            self._renderer.close()
