"""MP4 files from frames (PyAV, FFmpeg's libraries), and the options both CLIs share.

The file is written under a hidden temporary name beside the target and renamed when closed, so
an interrupted run leaves no half-written video under the name asked for.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SUFFIXES = (".mp4", ".mkv", ".mov")


@dataclass(frozen=True)
class VideoOptions:
    """Frame rate (frames per second of simulated or recorded time), frame size in pixels, and the
    tracking camera's azimuth (degrees, MuJoCo's convention: 135 looks at the robot's front right)."""

    fps: float = 15.0
    width: int = 640
    height: int = 480
    azimuth: float = 135.0

    def validate(self) -> None:
        if not (math.isfinite(self.fps) and 0 < self.fps <= 120):
            raise ValueError(f"video frame rate must be in (0, 120] frames per second, got {self.fps!r}")
        for name in ("width", "height"):
            value = getattr(self, name)
            # H.264 in 4:2:0 needs even sizes; below 64 px nothing is legible
            if not (isinstance(value, int) and 64 <= value <= 4096 and value % 2 == 0):
                raise ValueError(f"video {name} must be an even number of pixels in [64, 4096], got {value!r}")
        if not math.isfinite(self.azimuth):
            raise ValueError(f"video camera azimuth must be a number of degrees, got {self.azimuth!r}")

    def frame_count(self, duration: float) -> int:
        """Frames of a run of ``duration`` s: one every 1/fps s from the start to the end, both included."""
        return math.floor(duration * self.fps + 1e-9) + 1


def parse_size(text: str) -> tuple[int, int]:
    """'640x480' -> (640, 480)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels, e.g. 640x480, got {text!r}") from None
    return w, h


def add_video_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--video, --video-fps and --video-size, with help text saying what is recorded (``what``)."""
    d = VideoOptions()
    g = parser.add_argument_group("video")
    g.add_argument(
        "--video",
        type=Path,
        metavar="FILE.mp4",
        help=f"render {what} to this new MP4 file (offscreen MuJoCo rendering; MUJOCO_GL=egl or osmesa "
        "chooses the OpenGL backend where the default fails)",
    )
    g.add_argument(
        "--video-fps",
        type=float,
        default=d.fps,
        help="frames per second of simulated/recorded time, also the playback rate (default %(default)s)",
    )
    g.add_argument(
        "--video-size",
        type=parse_size,
        default=(d.width, d.height),
        metavar="WxH",
        help=f"frame size in pixels, even numbers (default {d.width}x{d.height})",
    )
    g.add_argument(
        "--video-azimuth",
        type=float,
        default=d.azimuth,
        metavar="DEG",
        help="where the tracking camera stands around the robot: 135 front right (default), -135 front left, "
        "-45 rear left, 45 rear right",
    )


def options_from_args(args: argparse.Namespace) -> VideoOptions:
    options = VideoOptions(
        fps=args.video_fps, width=args.video_size[0], height=args.video_size[1], azimuth=args.video_azimuth
    )
    options.validate()
    return options


def check_target(path: str | os.PathLike[str]) -> Path:
    """The video path, checked before anything runs: a known suffix, an existing folder, no file there yet."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"video file {path} must end in one of {', '.join(SUFFIXES)}")
    if path.exists():
        raise ValueError(f"video file {path} exists already (nothing is overwritten)")
    if not path.parent.is_dir():
        raise ValueError(f"folder {path.parent} of the video file does not exist")
    return path


class VideoWriter:
    """H.264 (yuv420p, constant frame rate) into an MP4/MKV/MOV file; use as a context manager."""

    def __init__(self, path: str | os.PathLike[str], fps: float, width: int, height: int, crf: int = 23) -> None:
        import av  # PyAV: imported here so that running without --video does not need it

        self.path = Path(path)
        self.width, self.height = width, height
        self.frames = 0
        self._partial = self.path.with_name(f".{self.path.name}.part")
        fmt = {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov"}[self.path.suffix.lower()]
        self._container = av.open(str(self._partial), mode="w", format=fmt)
        # A rational rate: fractional rates such as 12.5 fps stay exact.
        from fractions import Fraction

        self._stream = self._container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"crf": str(crf), "preset": "veryfast"}
        self._av = av

    def write(self, frame: np.ndarray) -> None:
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise ValueError(f"frame must be ({self.height}, {self.width}, 3) uint8, got {frame.shape} {frame.dtype}")
        video_frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        for packet in self._stream.encode(video_frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> Path:
        """Flush, close and move the file to its name; returns the path."""
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        os.replace(self._partial, self.path)
        return self.path

    def abort(self) -> None:
        """Close without keeping the file."""
        try:
            self._container.close()
        finally:
            self._partial.unlink(missing_ok=True)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def read_video(path: str | os.PathLike[str]) -> tuple[np.ndarray, float]:
    """(frames as (n, height, width, 3) uint8 RGB, frames per second) of a video file."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
    return np.stack(frames) if frames else np.zeros((0, 0, 0, 3), np.uint8), fps
