"""Offscreen rendering shared by sim-to-sim and the bag replay: the robot with its velocity arrows,
joints over their limits coloured, a text strip, encoded to MP4.

:mod:`viz.gl` picks the OpenGL backend, :mod:`viz.render` draws frames, :mod:`viz.video` writes and
reads video files. The deployment runtime (``aow_policy``) never imports this package.
"""

from viz.gl import RenderBackendError
from viz.render import FrameInfo, Overrun, RobotRenderer, violation_rgb
from viz.video import VideoOptions, VideoWriter, read_video

__all__ = [
    "FrameInfo",
    "Overrun",
    "RenderBackendError",
    "RobotRenderer",
    "VideoOptions",
    "VideoWriter",
    "read_video",
    "violation_rgb",
]
