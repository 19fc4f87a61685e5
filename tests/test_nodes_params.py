"""Node parameters, config/controller.yaml and diagnostics, checked without ROS; the node shells statically."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import yaml

from aow_policy.controller import ControllerConfig, ControllerCore
from aow_policy.loop_stats import LoopStats
from aow_policy.monitor import ViolationMonitor
from aow_policy.node_support import (
    CONTROLLER_PARAMS,
    MONITOR_PARAMS,
    ParamSpec,
    check_parameters,
    controller_diagnostics,
    monitor_diagnostics,
    split_joint_list,
)
from aow_policy.robot import load_robot
from aow_policy.testing import FakePolicy, policy_contract_for

PACKAGE = Path(__file__).resolve().parents[1] / "ros2_ws" / "src" / "aow_policy"
ROBOT = load_robot()


def yaml_params(node: str) -> dict:
    data = yaml.safe_load((PACKAGE / "config" / "controller.yaml").read_text())
    return data[f"/**/{node}"]["ros__parameters"]


@pytest.mark.parametrize(
    ("node", "specs"), [("controller_node", CONTROLLER_PARAMS), ("violation_monitor_node", MONITOR_PARAMS)]
)
def test_yaml_holds_every_parameter_with_the_node_default(node, specs):
    values = yaml_params(node)
    assert list(values) == [s.name for s in specs]
    for spec in specs:
        assert values[spec.name] == spec.default and type(values[spec.name]) is type(spec.default), spec.name
        assert len(spec.description) > 10, spec.name
    check_parameters(specs, values)


def test_every_core_setting_is_a_controller_parameter_with_the_core_default():
    table = {s.name: s for s in CONTROLLER_PARAMS}
    defaults = ControllerConfig()
    for f in fields(ControllerConfig):
        assert table[f.name].default == getattr(defaults, f.name)
    config = ControllerConfig.from_mapping({s.name: s.default for s in CONTROLLER_PARAMS})
    assert config == defaults


def test_parameter_ranges_and_choices_are_enforced():
    with pytest.raises(ValueError, match=r"joint_states_max_age.*below"):
        check_parameters(
            CONTROLLER_PARAMS, {s.name: s.default for s in CONTROLLER_PARAMS} | {"joint_states_max_age": 0.0}
        )
    with pytest.raises(ValueError, match=r"output_mode.*not one of"):
        check_parameters(CONTROLLER_PARAMS, {s.name: s.default for s in CONTROLLER_PARAMS} | {"output_mode": "ros1"})
    ParamSpec("x", 1.0, "a number in range", 0.0, 2.0).check(2.0)
    assert split_joint_list(" LF_HAA, RF_HAA ,,") == ["LF_HAA", "RF_HAA"]


def test_controller_diagnostics_levels():
    core = ControllerCore(ROBOT, FakePolicy(policy_contract_for(ROBOT)))
    loop = LoopStats(0.02)
    for i in range(5):
        loop.record(i * 0.02, i * 0.02 + 0.001)
    level, message, values = controller_diagnostics(core, loop, 1.0)
    assert level == "WARN" and "ZERO_TORQUE" in message
    assert values["state"] == "ZERO_TORQUE" and values["joint_states.age_s"] == "never"
    assert values["loop.iterations"] == "5" and values["loop.overruns"] == "0"
    assert float(values["loop.period_mean_ms"]) == pytest.approx(20.0)
    core.stop(1.0, "test")
    core._enter_damping(1.0, "joint_states: 0.2 s old")  # a fault, as the watchdog raises it
    level, message, _ = controller_diagnostics(core, loop, 1.0)
    assert level == "ERROR" and "joint_states: 0.2 s old" in message


def test_loop_stats_jitter_and_overruns():
    loop = LoopStats(0.02)
    starts = [0.0, 0.02, 0.04, 0.075, 0.09]  # one late period (35 ms > 1.5 x 20 ms)
    computes = [0.001, 0.001, 0.025, 0.001, 0.001]  # one compute longer than the period
    for s, c in zip(starts, computes, strict=True):
        loop.record(s, s + c)
    summary = loop.summary()
    assert loop.overruns == 2 and loop.recent_overruns() == 2 and loop.recent_overruns() == 0
    assert summary["period_max_ms"] == pytest.approx(35.0)
    assert summary["period_mean_ms"] == pytest.approx(22.5)
    assert summary["compute_max_ms"] == pytest.approx(25.0)


def test_monitor_diagnostics_levels():
    monitor = ViolationMonitor(ROBOT)
    assert monitor_diagnostics(monitor.summary(), monitor.interval_summary(0.0))[0] == "STALE"
    v = np.zeros(len(ROBOT.joint_names))
    monitor.update(0.0, v)
    assert monitor_diagnostics(monitor.summary(), monitor.interval_summary(0.5))[0] == "OK"
    v[1] = 9.0
    monitor.update(0.01, v)
    level, _, values = monitor_diagnostics(monitor.summary(), monitor.interval_summary(1.0))
    assert level == "WARN" and values["open_events"] == "velocity:LF_HFE"


def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]


def test_controller_node_shell_wires_services_diagnostics_and_parameters():
    """Static checks of the rclpy shell (it cannot run here): the names the issue specifies."""
    path = PACKAGE / "aow_policy" / "controller_node.py"
    calls = _calls(path)
    services = [c.args[1].value for c in calls if getattr(c.func, "attr", "") == "create_service"]
    assert services == ["~/start", "~/stop"]
    publishers = [ast.unparse(c.args[1]) for c in calls if getattr(c.func, "attr", "") == "create_publisher"]
    assert "'/diagnostics'" in publishers
    declared = [ast.unparse(c.args[1]) for c in calls if getattr(c.func, "id", "") == "declare_parameters"]
    assert declared == ["CONTROLLER_PARAMS"]
    source = path.read_text()
    assert "qos_profile_sensor_data" in source and "self.core.step(" in source
    monitor = PACKAGE / "aow_policy" / "violation_monitor_node.py"
    declared = [ast.unparse(c.args[1]) for c in _calls(monitor) if getattr(c.func, "id", "") == "declare_parameters"]
    assert declared == ["MONITOR_PARAMS"]
    assert "self.log.close()" in monitor.read_text()
