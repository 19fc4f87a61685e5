"""Run an exported policy on the robot: ONNX Runtime, one thread, one observation at a time.

:meth:`PolicyRunner.load` reads the policy contract from the ONNX metadata, checks it against the
robot contract and refuses a policy that does not fit, naming every difference (joint names and
order, action limits, control period, height-scan grid, constraint limits, contract hash).
A call copies the observation into a preallocated buffer that ONNX Runtime reads in place
(IOBinding) and writes the actions into another preallocated buffer, so the control loop does
not allocate beyond the returned copy. numpy and onnxruntime only: never torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from aow_policy.policy_contract import (
    METADATA_KEY,
    PolicyContract,
    PolicyContractError,
    check_fits_robot,
    parse_contract,
    read_sidecar,
    sidecar_path,
)
from aow_policy.robot import Robot

INPUT_NAME = "obs"
OUTPUT_NAME = "actions"


class PolicyError(RuntimeError):
    """The policy produced something unusable (e.g. a non-finite action): stop driving joints."""


def session_options(threads: int = 1) -> ort.SessionOptions:
    """Latency-oriented options: one observation per call is too small to gain from threads."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # warnings about unused initializers would only add noise
    return so


def read_contract(session: ort.InferenceSession, source: str) -> dict[str, Any]:
    """The contract dict stored in the model's metadata."""
    meta = session.get_modelmeta().custom_metadata_map
    if METADATA_KEY not in meta:
        raise PolicyContractError(
            f"{source}: no {METADATA_KEY!r} in the ONNX metadata; export policies with aow-export "
            f"so that their joint order and observation layout travel with them"
        )
    try:
        data = json.loads(meta[METADATA_KEY])
    except json.JSONDecodeError as e:
        raise PolicyContractError(f"{source}: metadata {METADATA_KEY!r} is not valid JSON ({e})") from None
    return data


def _check_signature(session: ort.InferenceSession, contract: PolicyContract, source: str) -> None:
    inputs, outputs = session.get_inputs(), session.get_outputs()
    problems = []
    if [i.name for i in inputs] != [INPUT_NAME]:
        problems.append(f"inputs {[i.name for i in inputs]}, expected [{INPUT_NAME!r}]")
    elif inputs[0].type != "tensor(float)" or len(inputs[0].shape) != 2 or inputs[0].shape[1] != contract.obs_dim:
        problems.append(
            f"input {INPUT_NAME!r} is {inputs[0].type} {inputs[0].shape}, the contract says float [batch, "
            f"{contract.obs_dim}]"
        )
    if [o.name for o in outputs] != [OUTPUT_NAME]:
        problems.append(f"outputs {[o.name for o in outputs]}, expected [{OUTPUT_NAME!r}]")
    elif (
        outputs[0].type != "tensor(float)" or len(outputs[0].shape) != 2 or outputs[0].shape[1] != contract.num_actions
    ):
        problems.append(
            f"output {OUTPUT_NAME!r} is {outputs[0].type} {outputs[0].shape}, the contract says float [batch, "
            f"{contract.num_actions}]"
        )
    if problems:
        raise PolicyContractError(f"{source}: the network does not match its contract: " + "; ".join(problems))


class PolicyRunner:
    """``runner(obs)`` -> actions (num_actions,) float32 in contract joint order.

    One caller at a time: the input and output buffers are shared between calls.
    """

    def __init__(self, session: ort.InferenceSession, contract: PolicyContract, source: str = "<session>"):
        _check_signature(session, contract, source)
        self.source = source
        self.policy_contract = contract
        self._session = session
        self._obs = np.zeros((1, contract.obs_dim), dtype=np.float32)
        self._actions = np.zeros((1, contract.num_actions), dtype=np.float32)
        self._obs_row, self._actions_row = self._obs[0], self._actions[0]
        self._obs_shape = self._obs_row.shape
        self._zeros = np.zeros(contract.num_actions, dtype=np.float32)
        # OrtValues over the numpy buffers: ONNX Runtime reads and writes them in place.
        self._binding = session.io_binding()
        self._binding.bind_ortvalue_input(INPUT_NAME, ort.OrtValue.ortvalue_from_numpy(self._obs))
        self._binding.bind_ortvalue_output(OUTPUT_NAME, ort.OrtValue.ortvalue_from_numpy(self._actions))

    @classmethod
    def load(cls, path: str | os.PathLike[str], robot: Robot, threads: int = 1) -> PolicyRunner:
        """Load an exported policy; refuses a missing contract or one that does not fit ``robot``."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such policy file")
        try:
            session = ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types for unreadable models
            raise PolicyContractError(f"{path}: not a loadable ONNX model ({type(e).__name__}: {e})") from None
        data = read_contract(session, str(path))
        sidecar = sidecar_path(path)
        if sidecar.is_file() and read_sidecar(sidecar) != data:
            raise PolicyContractError(
                f"{sidecar} differs from the contract inside {path.name}: the sidecar belongs to another export"
            )
        try:
            contract = parse_contract(data)
        except PolicyContractError as e:
            raise PolicyContractError(f"{path}: {e}") from None
        check_fits_robot(contract, robot, source=str(path))
        return cls(session, contract, source=str(path))

    @property
    def contract(self) -> dict[str, Any]:
        """The policy contract as stored (schema in :mod:`aow_policy.policy_contract`)."""
        return json.loads(json.dumps(self.policy_contract.raw))  # a deep copy: callers cannot alter it

    @property
    def obs_dim(self) -> int:
        return self.policy_contract.obs_dim

    @property
    def num_actions(self) -> int:
        return self.policy_contract.num_actions

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The joint each action drives, in action order."""
        return self.policy_contract.joint_names

    def __call__(self, obs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Actions for one observation vector; writes into ``out`` when given, else returns a copy."""
        if getattr(obs, "shape", None) != self._obs_shape:
            obs = np.asarray(obs)
            if obs.shape != self._obs_shape:
                raise ValueError(f"observation of shape {obs.shape}, the policy expects ({self.obs_dim},)")
        self._obs_row[...] = obs  # plain assignment: np.copyto goes through a Python-level dispatcher
        self._session.run_with_iobinding(self._binding)
        # x.dot(0) is 0 for finite x and NaN otherwise: a cheaper finiteness test than isfinite().all().
        if self._actions_row.dot(self._zeros) != 0.0:
            raise PolicyError(
                f"non-finite action {self._actions_row.tolist()} (non-finite observation values at "
                f"{np.flatnonzero(~np.isfinite(self._obs_row)).tolist()})"
            )
        if out is None:
            return self._actions_row.copy()
        out[...] = self._actions_row
        return out

    def run_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch [N, obs_dim] (tests and offline evaluation; allocates)."""
        obs = np.ascontiguousarray(obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"observations of shape {obs.shape}, the policy expects (N, {self.obs_dim})")
        return self._session.run([OUTPUT_NAME], {INPUT_NAME: obs})[0]
