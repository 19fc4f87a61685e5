"""`colcon test` checks of the installed package: the library imports and runs without ROS logic.

The full test suite lives in the repository's tests/ directory; these few checks make sure the
package as built by colcon (installed share files, importable modules) is usable.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

PACKAGE = Path(__file__).resolve().parents[1]


def test_library_imports_and_loads_the_robot_contract():
    from aow_policy.controller import ControllerCore
    from aow_policy.robot import load_robot
    from aow_policy.testing import FakePolicy, policy_contract_for

    robot = load_robot(PACKAGE / "config" / "aow_c.yaml")
    core = ControllerCore(robot, FakePolicy(policy_contract_for(robot)))
    command = core.step(0.0)
    assert command.state.value == "ZERO_TORQUE"
    assert np.isfinite(command.position).all()


def test_launch_files_parse_and_declare_documented_arguments():
    for path in sorted((PACKAGE / "launch").glob("*.launch.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "generate_launch_description" in functions, path.name


def test_package_xml_declares_what_the_nodes_import():
    declared = {e.text for e in ET.parse(PACKAGE / "package.xml").getroot() if e.tag.endswith("depend")}
    for node in ("controller_node.py", "violation_monitor_node.py"):
        tree = ast.parse((PACKAGE / "aow_policy" / node).read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                top = n.module.split(".")[0]
                if top not in ("aow_policy", "__future__", "typing", "time"):
                    assert top in declared, f"{node} imports {top}, not declared in package.xml"
