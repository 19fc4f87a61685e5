"""``aow-sim2sim --viewer`` in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

The simulation runs in its own process, in real time, serving http://127.0.0.1:PORT; the test
loads the page, checks that the canvas shows the robot (a screenshot differs from the same view
with the robot hidden far more than two screenshots with it shown differ from each other), sets a
velocity command from the page and waits for the measured velocity the page shows to follow it,
then stops and restarts the controller from the page.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "policies" / "aow_flat_np3o" / "policy.onnx"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"aow-sim2sim --viewer exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def _field(page, label: str):
    # viser's labels are not tied to their inputs (the ids differ): the input beside the label
    return page.locator(
        f"xpath=//label[normalize-space(.)='{label}']/ancestor::div[contains(@class,'mantine-Flex-root')][1]//input"
    )


def _wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _screenshot(page) -> np.ndarray:
    from io import BytesIO

    from PIL import Image

    return np.asarray(Image.open(BytesIO(page.locator("canvas").first.screenshot())).convert("RGB"), dtype=float)


def _changed_share(a: np.ndarray, b: np.ndarray, radius: int = 2) -> float:
    """Share of the pixels in a solid changed area between two screenshots: the pixel and its whole
    (2 radius + 1)^2 neighbourhood differ clearly (> 40 of 255 in some channel). Hiding the robot
    clears solid areas (2.0-2.2 % of the canvas in runs here); a view that moves a little by itself
    (the policy creeps at up to ~0.03 m/s at a zero command, and the height-scan dots move with
    it) changes mostly thin edges, which the neighbourhood test removes (0.01-0.8 % left in the
    control pair). Left part of the canvas only: the controls panel covers the right."""
    left = slice(0, int(0.55 * a.shape[1]))
    changed = np.abs(a[:, left] - b[:, left]).max(axis=2) > 40
    solid = changed.copy()
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            solid &= np.roll(np.roll(changed, dy, axis=0), dx, axis=1)
    return float(solid.mean())


def test_geom_meshes_fill_their_primitives() -> None:
    import mujoco

    from sim2sim.viewer import geom_mesh

    t = mujoco.mjtGeom
    for kind, size, extent in (
        (t.mjGEOM_BOX, (0.1, 0.2, 0.3), (0.1, 0.2, 0.3)),
        (t.mjGEOM_CYLINDER, (0.1, 0.25, 0.0), (0.1, 0.1, 0.25)),
        (t.mjGEOM_CAPSULE, (0.05, 0.2, 0.0), (0.05, 0.05, 0.25)),  # the caps add the radius along z
        (t.mjGEOM_SPHERE, (0.3, 0.0, 0.0), (0.3, 0.3, 0.3)),
    ):
        vertices, faces = geom_mesh(kind, np.array(size))
        assert np.allclose(np.abs(vertices).max(axis=0), extent, atol=1e-6), kind
        assert faces.max() < len(vertices) and faces.shape[1] == 3
    assert geom_mesh(t.mjGEOM_PLANE, np.zeros(3)) is None


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (Debian: apt-get install chromium; .ci/run installs it)")
def test_viewer_in_headless_chromium(tmp_path: Path) -> None:
    from playwright import sync_api as playwright  # a dev dependency: imported, not skipped

    port = _free_port()
    log = (tmp_path / "sim.log").open("w")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "sim2sim", "--policy", str(POLICY), "--duration", "300", "--stand-up", "1"),
            *("--viewer", "--viewer-port", str(port), "--no-progress"),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_port(port, process)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                # software WebGL (no GPU in CI); no sandbox: CI runs as root
                args=["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox"],
            )
            page = browser.new_page(viewport={"width": 800, "height": 600})
            page.goto(f"http://127.0.0.1:{port}")
            page.locator("canvas").first.wait_for(timeout=60_000)
            state = _field(page, "state")
            state.wait_for(timeout=60_000)
            _wait_until(lambda: state.input_value() == "POLICY", 60, "the controller to reach POLICY")

            # hold still (a manual zero command) so that two screenshots differ only by the robot; the
            # camera held where it is (it follows the base by default: a drifting robot moves the view)
            _field(page, "manual command").check()
            _field(page, "camera follows the robot").uncheck()
            measured = {k: _field(page, f"measured {k}") for k in ("vx (m/s)", "vy (m/s)", "yaw rate (rad/s)")}
            still = lambda: all(abs(float(f.input_value())) <= 0.02 for f in measured.values())  # noqa: E731
            _wait_until(still, 30, "the robot to stand still")
            # The reference policy creeps at up to ~0.03 m/s at a zero command: the three screenshots are
            # taken at the same short spacing, so the control pair sees as much creep as the robot pair.
            shown = _screenshot(page)
            time.sleep(0.3)
            shown_again = _screenshot(page)  # the control pair: the same view, the robot shown both times
            _field(page, "show robot").uncheck()
            time.sleep(0.3)
            hidden = _screenshot(page)
            _field(page, "show robot").check()
            _field(page, "camera follows the robot").check()
            if os.environ.get("AOW_VIEWER_SCREENSHOTS"):  # to look at what the test saw
                np.save(Path(os.environ["AOW_VIEWER_SCREENSHOTS"]), np.stack([shown, shown_again, hidden]))
            # The control pair shows how much the view changes by itself between two screenshots (a
            # drifting robot, a moving camera); hiding the robot must change far more than that.
            control = _changed_share(shown, shown_again)
            robot = _changed_share(shown_again, hidden)
            assert robot > 0.005 and robot > 2 * control, (
                f"hiding the robot changed {robot:.2%} of the pixels, the view by itself {control:.2%}"
            )

            vx = _field(page, "vx (m/s)")
            vx.fill("0.8")
            vx.press("Enter")
            measured = _field(page, "measured vx (m/s)")
            _wait_until(lambda: float(measured.input_value()) > 0.4, 30, "the measured vx to follow 0.8 m/s")

            page.get_by_role("button", name="Stop").click()
            _wait_until(lambda: state.input_value() == "DAMPING", 15, "the controller to stop (DAMPING)")
            page.get_by_role("button", name="Start").click()
            _wait_until(lambda: state.input_value() in ("STAND_UP", "POLICY"), 15, "the controller to start again")
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
