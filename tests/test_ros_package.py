"""The ROS 2 package builds with colcon (ament_python) and its installed copy works.

Uses the colcon tool venv that `make test` / `make colcon-venv` creates (.venv-colcon); without
it the test is skipped with that reason. The build goes to a temporary workspace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "ros2_ws" / "src"
PACKAGE = SRC / "aow_policy"
COLCON = ROOT / ".venv-colcon" / "bin" / "colcon"


def test_package_xml_is_complete():
    root = ET.parse(PACKAGE / "package.xml").getroot()
    assert root.get("format") == "3"
    assert root.findtext("name") == "aow_policy"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root if e.tag.endswith("depend")}
    needed = {"rclpy", "launch", "launch_ros", "sensor_msgs", "nav_msgs", "geometry_msgs", "std_msgs"}
    needed |= {"std_srvs", "diagnostic_msgs", "grid_map_msgs", "python3-numpy", "python3-yaml"}
    assert needed <= deps
    assert (PACKAGE / "resource" / "aow_policy").is_file()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not COLCON.exists():
        pytest.skip("colcon tool venv missing: run `make colcon-venv` (make test does)")
    ws = tmp_path_factory.mktemp("colcon_ws")
    cmd = [str(COLCON), "--log-base", str(ws / "log"), "build", "--base-paths", str(SRC)]
    cmd += ["--build-base", str(ws / "build"), "--install-base", str(ws / "install")]
    result = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"colcon build failed:\n{result.stdout}\n{result.stderr}"
    return ws / "install" / "aow_policy"


def test_colcon_build_installs_nodes_launch_files_and_config(installed):
    share = installed / "share" / "aow_policy"
    for rel in ("package.xml", "launch/controller.launch.py", "launch/sim.launch.py", "config/aow_c.yaml"):
        assert (share / rel).is_file(), rel
    assert (share / "config" / "controller.yaml").is_file()
    assert (installed / "share" / "ament_index" / "resource_index" / "packages" / "aow_policy").is_file()
    for node in ("controller_node", "violation_monitor_node"):  # `ros2 run aow_policy <node>`
        script = installed / "lib" / "aow_policy" / node
        assert script.is_file() and os.access(script, os.X_OK), node
        assert f"aow_policy.{node}" in script.read_text() or "load_entry_point" in script.read_text()


def test_installed_copy_passes_the_package_tests(installed):
    """What `colcon test` would run, against the installed modules (not the source tree)."""
    site = next(installed.glob("lib/python3*/site-packages"))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    where = subprocess.run(
        [sys.executable, "-c", "import aow_policy.controller as m; print(m.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PACKAGE / "test")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_colcon_build_compiles_the_c_extensions(installed):
    """The C fast paths are built and importable from the installed copy where a compiler exists."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the package installs without its optional C modules")
    site = next(installed.glob("lib/python3*/site-packages"))
    for module in ("_scan", "_control"):
        assert list((site / "aow_policy").glob(f"{module}*.so")), f"colcon build did not compile aow_policy.{module}"
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = (
        "import aow_policy.heightmap as h, aow_policy.observation as o; "
        "print(h.NATIVE_AVAILABLE, h._native_scan.__file__, o.native_control.__file__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    flag, scan, control = out.stdout.split()
    assert flag == "True" and scan.startswith(str(site)) and control.startswith(str(site)), out.stdout
