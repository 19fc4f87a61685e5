"""Videos of runs and bags (issue #17): offscreen MuJoCo rendering (EGL/OSMesa), MP4 through PyAV.

* ``aow-sim2sim --video``: a short run decodes with the expected number of frames, size and rate,
  and shows something (not a blank or frozen picture).
* A planted violation (a joint over its speed limit from 2.0 to 2.5 s of a synthetic bag) colours
  that joint's geoms in the replay's frame at 2.2 s and not in the one at 1.0 s, at the pixels
  where the joint's geoms project.
* ``aow-replay --video`` on the shipped sample bag; a bag without joint states is refused clearly.

Kept small for CI (320x240 or less, a few fps): a frame takes about 0.2 s on the CPU (llvmpipe).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import mujoco
import numpy as np
import pytest

from aow_policy.robot import load_robot
from hardware_logs.cli import run as replay
from sim2sim.cli import main as sim2sim_main
from tests.bagutil import JointSample, Scenario, write_bag
from viz.gl import RenderBackendError, make_renderer
from viz.render import SCALE_MAX, FrameInfo, RobotRenderer, violation_rgb
from viz.video import read_video

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "policies" / "aow_flat_np3o" / "policy.onnx"
SAMPLE = ROOT / "hardware_logs" / "samples" / "sim2sim_flat_np3o"
ROBOT = load_robot()
W, H = 320, 240


def test_sim2sim_video_frames_size_and_content(tmp_path: Path) -> None:
    video = tmp_path / "run.mp4"
    code = sim2sim_main(
        [
            "--policy",
            str(POLICY),
            "--duration",
            "2.0",
            "--stand-up",
            "1.0",
            "--video",
            str(video),
            "--video-fps",
            "10",
            "--video-size",
            f"{W}x{H}",
            "--no-progress",
        ]
    )
    assert code == 0
    frames, fps = read_video(video)
    assert frames.shape == (21, H, W, 3)  # one frame every 0.1 s from 0 to 2.0 s, both included
    assert fps == pytest.approx(10.0)
    view = frames[:, :150]  # the 3D view (the strip is below)
    assert view.std() > 20, "the frames are blank"
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 1.0, "the video does not change"


def _planted_bag(path: Path, joint: str, factor: float) -> Path:
    """4 s at 100 Hz, every joint at its default angle; ``joint`` at ``factor`` x its speed limit in [2.0, 2.5) s."""
    names = list(ROBOT.joint_names)
    k = names.index(joint)
    limit = float(ROBOT.constraint_velocity_limits[k])
    t0 = 1_000_000_000
    samples = []
    for i in range(400):
        velocity = np.zeros(len(names))
        if 200 <= i < 250:
            velocity[k] = factor * limit
        samples.append(
            JointSample(t0 + i * 10_000_000, names, velocity.tolist(), [0.0] * len(names), ROBOT.default_positions)
        )
    return write_bag(path, Scenario(samples), storage="mcap")


def _joint_pixels(joint: str) -> np.ndarray:
    """Mask of the pixels where the joint's geoms project in the replay's picture of the standing robot
    (fixed base, default angles), shrunk by 2 pixels so that H.264's half-resolution colour planes
    do not mix in the neighbours."""
    from hardware_logs.video import _build_model

    model = _build_model(ROBOT, None)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "default"))
    mujoco.mj_kinematics(model, data)
    with RobotRenderer(model, ROBOT.joint_names, W, H) as renderer:
        renderer.update_scene(data, FrameInfo(0.0))
        renderer.renderer.enable_segmentation_rendering()
        segmentation = renderer.renderer.render()  # per pixel: (object id, object type)
    mask = np.isin(segmentation[..., 0], renderer.joint_geoms[joint]) & (
        segmentation[..., 1] == mujoco.mjtObj.mjOBJ_GEOM
    )
    for _ in range(2):
        mask = mask & np.roll(mask, 1, 0) & np.roll(mask, -1, 0) & np.roll(mask, 1, 1) & np.roll(mask, -1, 1)
    assert mask.sum() >= 10, f"{joint} is hardly in view"
    view = np.zeros((H, W), bool)
    view[: mask.shape[0]] = mask
    return view


def test_planted_violation_colours_the_joint_only_while_over(tmp_path: Path) -> None:
    joint = "RF_KFE"  # the knee nearest the camera
    bag = _planted_bag(tmp_path / "planted", joint, factor=1.3)
    video = tmp_path / "planted.mp4"
    argv = [str(bag), "--out", str(tmp_path / "report"), "--no-plots", "--quiet", "--no-progress"]
    assert replay([*argv, "--video", str(video), "--video-fps", "5", "--video-size", f"{W}x{H}"]) == 0
    frames, fps = read_video(video)
    assert fps == pytest.approx(5.0)
    assert len(frames) == 20  # 0 .. 3.99 s at 0.2 s
    before, during = frames[5].astype(float), frames[11].astype(float)  # t = 1.0 s and t = 2.2 s
    mask = _joint_pixels(joint)
    grey, coloured = before[mask].mean(axis=0), during[mask].mean(axis=0)
    assert abs(grey[0] - grey[2]) < 25, f"{joint} is coloured at 1.0 s: mean RGB {grey}"
    # +30 % is between orange and magenta on the scale: red far above green, whatever the shading
    r, g, _ = violation_rgb(0.3)
    assert r - g > 0.5
    assert coloured[0] - coloured[1] > 60 and coloured[0] > grey[0] + 30, f"{joint} at 2.2 s: mean RGB {coloured}"
    # nothing else changed in the view (the strip below does: time, counts)
    rest = ~mask
    rest[150:] = False
    assert np.abs(before[rest] - during[rest]).mean() < 2.0


def test_replay_video_of_the_sample_bag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    video = tmp_path / "sample.mp4"
    argv = [str(SAMPLE), "--out", str(tmp_path / "report"), "--no-plots", "--quiet", "--no-progress"]
    assert replay([*argv, "--video", str(video), "--video-fps", "1", "--video-size", "192x144"]) == 0
    out = capsys.readouterr().out
    assert "base from /odometry" in out and "elevation map" in out
    frames, _ = read_video(video)
    assert frames.shape == (20, 144, 192, 3)  # 0 .. 19.9975 s at 1 s
    assert frames[:, :60].std() > 20


def test_replay_video_without_joint_states_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = list(ROBOT.joint_names)
    samples = [JointSample(1_000_000_000 + i * 10_000_000, names, [0.0] * 16, [0.0] * 16) for i in range(10)]
    bag = write_bag(tmp_path / "other", Scenario(samples), topic="/other_states")
    video = tmp_path / "none.mp4"
    argv = [str(bag), "--out", str(tmp_path / "report"), "--no-plots", "--quiet", "--no-progress"]
    assert replay([*argv, "--video", str(video)]) == 1
    err = capsys.readouterr().err
    assert "no video" in err and "'/joint_states' is not in the bag" in err and "/other_states" in err
    assert not video.exists()


def test_bad_video_options_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(SAMPLE), "--out", str(tmp_path / "r"), "--video"]
    for extra, message in (
        ([str(tmp_path / "a.mp4"), "--video-size", "321x240"], "even number"),
        ([str(tmp_path / "a.mp4"), "--video-size", "big"], "WIDTHxHEIGHT"),
        ([str(tmp_path / "a.mp4"), "--video-fps", "0"], "frame rate"),
        ([str(tmp_path / "a.gif")], "must end in"),
        ([str(tmp_path / "missing" / "a.mp4")], "does not exist"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            replay(argv + extra)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    (tmp_path / "there.mp4").write_bytes(b"")
    code = sim2sim_main(["--policy", str(POLICY), "--duration", "1", "--video", str(tmp_path / "there.mp4")])
    assert code == 2
    assert "exists already" in capsys.readouterr().err


def test_no_backend_error_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no display")

    monkeypatch.setattr(mujoco, "Renderer", broken)
    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    for env in ("egl", ""):
        monkeypatch.setenv("MUJOCO_GL", env)
        with pytest.raises(RenderBackendError) as e:
            make_renderer(model, 64, 64)
        text = str(e.value)
        assert "MUJOCO_GL=egl" in text and "MUJOCO_GL=osmesa" in text and "libegl1" in text


def test_colour_scale() -> None:
    assert violation_rgb(0.0) == pytest.approx((1.0, 0.9, 0.0))
    assert violation_rgb(SCALE_MAX) == violation_rgb(10.0)  # clipped at the end of the scale
    greens = [violation_rgb(r)[1] for r in np.linspace(0, SCALE_MAX, 11)]
    assert all(a >= b for a, b in itertools.pairwise(greens))  # yellow -> orange -> magenta
