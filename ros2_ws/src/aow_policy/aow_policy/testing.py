"""Stand-ins for an exported policy, for tests, benchmarks and sim-to-sim plumbing without training.

* :func:`policy_contract_for` -- a policy contract dict that fits a robot contract (what
  ``aow-export`` writes for a policy trained on that robot), for a given observation layout.
* :class:`FakePolicy` -- the :class:`aow_policy.policy.PolicyRunner` interface over a Python
  function, so tests can script the actions a "policy" returns.
* :func:`write_onnx_policy` -- a random-weight MLP written with ``onnx.helper`` (onnx is imported
  only there; it is not a runtime dependency), loadable by ``PolicyRunner.load``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aow_policy.layout import ObservationLayout
from aow_policy.policy_contract import (
    METADATA_KEY,
    SCHEMA_VERSION,
    contract_to_json,
    parse_contract,
    robot_action_term,
    robot_constraint_limits,
    robot_height_scan,
)
from aow_policy.robot import Robot


def locomotion_layout(robot: Robot, height_scan: bool = True) -> ObservationLayout:
    """The locomotion task's layout: proprioception (56 values for the AoW) + 187-point height scan."""
    terms: list[dict[str, Any]] = [
        {"name": "base_lin_vel", "size": 3, "scale": 2.0},
        {"name": "base_ang_vel", "size": 3, "scale": 0.25},
        {"name": "projected_gravity", "size": 3},
        {"name": "velocity_commands", "size": 3},
        {"name": "joint_pos", "size": len(robot.leg_joint_names), "joints": list(robot.leg_joint_names)},
        {"name": "joint_vel", "size": len(robot.joint_names), "scale": 0.05, "joints": list(robot.joint_names)},
        {"name": "last_action", "size": len(robot.joint_names)},
    ]
    if height_scan:
        terms.append(
            {
                "name": "height_scan",
                "size": robot.height_scan.num_points,
                "scale": 5.0,
                "clip": 1.0,
                "params": {"height_offset": 0.5},
            }
        )
    return ObservationLayout.build(terms)


def policy_contract_for(
    robot: Robot,
    layout: ObservationLayout | None = None,
    action_clip: float | None = None,
) -> dict[str, Any]:
    """A contract dict that passes :func:`aow_policy.policy_contract.check_fits_robot` for ``robot``."""
    layout = layout if layout is not None else locomotion_layout(robot)
    actions = []
    for name in robot.joint_names:
        a = robot_action_term(robot, name)
        actions.append(
            {"joint": a.joint, "kind": a.kind, "mode": a.mode, "scale": a.scale, "offset": a.offset}
            | {"low": a.low, "high": a.high}
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "robot": {"name": robot.name, "contract_hash": robot.contract_hash},
        "control": {"policy_dt": robot.rates.policy_dt, "physics_dt": robot.rates.physics_dt},
        "actions": actions,
        "action_clip": action_clip,
        "observation": {"dim": layout.dim, "terms": layout.to_list()},
        "height_scan": robot_height_scan(robot) if layout.has("height_scan") else None,
        "constraint_limits": robot_constraint_limits(robot),
        "training": {"task": "test", "algorithm": "none", "iteration": 0, "config_hash": "0" * 64},
        "export": {"time_utc": "1970-01-01T00:00:00Z", "opset": 17, "verified_max_abs_diff": 0.0},
    }


class FakePolicy:
    """``fn(obs) -> actions`` behind the PolicyRunner interface; records the observations it saw."""

    def __init__(
        self,
        contract: dict[str, Any],
        fn: Callable[[np.ndarray], Any] | None = None,
        record: bool = False,
    ):
        self.contract = contract
        parsed = parse_contract(contract)
        self.obs_dim = parsed.obs_dim
        self.num_actions = parsed.num_actions
        self.fn = fn if fn is not None else (lambda obs: np.zeros(self.num_actions, dtype=np.float32))
        self.record = record
        self.observations: list[np.ndarray] = []
        self.calls = 0
        self.source = "FakePolicy"

    def __call__(self, obs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """As PolicyRunner: writes into ``out`` when given (an output of another shape is returned
        as is, so that the caller's shape check sees it)."""
        self.calls += 1
        if self.record:
            self.observations.append(np.array(obs, copy=True))
        actions = np.asarray(self.fn(obs), dtype=np.float32)
        if out is None or actions.shape != out.shape:
            return actions
        out[...] = actions
        return out


def write_onnx_policy(
    path: str | os.PathLike[str],
    contract: dict[str, Any],
    hidden: Sequence[int] = (256, 128, 64),
    seed: int = 0,
    opset: int = 17,
) -> Path:
    """An ELU MLP obs -> actions with random weights and ``contract`` in its metadata."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    parsed = parse_contract(contract)
    rng = np.random.default_rng(seed)
    sizes = [parsed.obs_dim, *hidden, parsed.num_actions]
    nodes, inits = [], []
    x = "obs"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (0.01 * rng.standard_normal(fan_out)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        y = "actions" if i == len(sizes) - 2 else f"h{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"z{i}"]))
            nodes.append(helper.make_node("Elu", [f"z{i}"], [y]))
        else:
            nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y]))
        x = y
    graph = helper.make_graph(
        nodes,
        "aow_test_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", parsed.obs_dim])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", parsed.num_actions])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    helper.set_model_props(model, {METADATA_KEY: contract_to_json(contract)})
    onnx.checker.check_model(model)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return path
