"""Launch files: valid Python, documented arguments, the right executables (ast; launch only if installed)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "aow_policy"
LAUNCH = PACKAGE / "launch"
CONTROLLER_ARGS = {"policy", "robot_config", "params_file", "namespace", "use_monitor", "use_sim_time", "log_dir"}
SIM_ARGS = CONTROLLER_ARGS | {"use_bridge", "sim_bridge_executable", "sim_bridge_args"}


def arguments(path: Path) -> dict[str, tuple[str | None, str]]:
    """The module-level ARGUMENTS dict literal: name -> (default, description)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ARGUMENTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} has no ARGUMENTS table")


def string_constants(path: Path) -> set[str]:
    return {
        n.value
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


@pytest.mark.parametrize(("name", "expected"), [("controller.launch.py", CONTROLLER_ARGS), ("sim.launch.py", SIM_ARGS)])
def test_launch_arguments_are_the_documented_ones(name, expected):
    path = LAUNCH / name
    compile(path.read_text(), str(path), "exec")  # valid Python
    args = arguments(path)
    assert set(args) == expected
    # documented: in the file's docstring, or for sim.launch.py in the controller launch it includes
    docs = {p.name: ast.get_docstring(ast.parse(p.read_text())) for p in LAUNCH.glob("*.launch.py")}
    doc = docs[name] + (docs["controller.launch.py"] if name == "sim.launch.py" else "")
    for arg, (_, description) in args.items():
        assert len(description) > 15, f"{name}: argument {arg} has no real description"
        assert arg in doc, f"{name}: argument {arg} is not mentioned in the docstring"
    assert args["policy"][0] is None  # required: no silent default policy
    assert args["use_monitor"][0] == "true"


def test_controller_launch_starts_both_nodes_with_the_params_file():
    consts = string_constants(LAUNCH / "controller.launch.py")
    assert {"controller_node", "violation_monitor_node", "aow_policy"} <= consts
    source = (LAUNCH / "controller.launch.py").read_text()
    assert 'IfCondition(LaunchConfiguration("use_monitor"))' in source
    assert "parameters=[params_file" in source  # the file first, the launch arguments override it
    scripts = ast.parse((PACKAGE / "setup.py").read_text())
    entry_points = {n.value for n in ast.walk(scripts) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert "controller_node = aow_policy.controller_node:main" in entry_points
    assert "violation_monitor_node = aow_policy.violation_monitor_node:main" in entry_points


def test_sim_launch_hooks_the_bridge_executable_and_includes_the_controller():
    source = (LAUNCH / "sim.launch.py").read_text()
    assert arguments(LAUNCH / "sim.launch.py")["sim_bridge_executable"][0] == "aow-sim-bridge"
    assert "ExecuteProcess" in source and "controller.launch.py" in source
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'aow-sim-bridge = "sim2sim.bridge:main"' in pyproject  # the executable the hook runs


@pytest.mark.ros
def test_launch_descriptions_build_with_ros_launch(monkeypatch):
    import ament_index_python.packages as ament

    monkeypatch.setattr(ament, "get_package_share_directory", lambda name: str(PACKAGE))
    for name, expected in (("controller.launch.py", CONTROLLER_ARGS), ("sim.launch.py", SIM_ARGS)):
        spec = importlib.util.spec_from_file_location(name.replace(".", "_"), LAUNCH / name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        description = module.generate_launch_description()
        declared = {a.name for a in description.get_launch_arguments()}
        assert expected <= declared
