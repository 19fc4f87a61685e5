"""Checkpoint -> verified ONNX policy + policy.yaml, written atomically.

Order of work: load and check the checkpoint; check its contract against the robot; trace the
actor; verify the graph against PyTorch on random and rollout observations; write
both files under temporary names; load them back through the deployment runtime
(:class:`aow_policy.policy.PolicyRunner`, which also checks the sidecar) and verify again, single
observations included; only then rename them into place. Any failure removes the temporary
files, so no partial or unverified policy ever sits under the output name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from aow_policy.policy import INPUT_NAME, OUTPUT_NAME, PolicyRunner, session_options
from aow_policy.policy_contract import (
    PolicyContractError,
    contract_differences,
    contract_to_yaml,
    parse_contract,
    sidecar_path,
)
from aow_policy.robot import Robot, load_robot
from export.checkpoint_source import ExportError, PolicySource, load_policy_source, resolve_checkpoint
from export.contract import build_contract
from export.onnx_export import DEFAULT_OPSET, EXPORTER, actor_to_onnx, attach_contract
from export.verify import DEFAULT_TOLERANCE, Verification, compare, random_observations, rollout_observations

SINGLE_OBSERVATION_CHECKS = 100  # the runtime's one-at-a-time path, on the first observations


@dataclass
class ExportResult:
    onnx_path: Path
    yaml_path: Path
    checkpoint: Path
    picked_latest: bool
    verification: Verification
    contract: dict[str, Any]


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _raise_if_failed(verification: Verification, stage: str) -> None:
    if not verification.ok:
        raise ExportError(
            f"verification failed ({stage}): ONNX Runtime and PyTorch disagree by up to "
            f"{verification.worst:.3g} (tolerance {verification.tolerance:g}); nothing was written\n"
            + verification.summary()
        )


def export_policy(
    checkpoint_or_run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    robot: Robot | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
    num_random: int = 1000,
    rollout_steps: int = 50,
    rollout_envs: int = 4,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> ExportResult:
    """Export and verify; raises :class:`ExportError` (nothing written) on any refusal or mismatch."""
    robot = robot if robot is not None else load_robot()
    checkpoint, picked_latest = resolve_checkpoint(checkpoint_or_run_dir)
    if picked_latest:
        log(f"run directory {checkpoint_or_run_dir}: using the latest checkpoint {checkpoint.name}")
    output = Path(output) if output is not None else checkpoint.parent / "policy.onnx"
    if output.suffix != ".onnx":
        raise ExportError(f"output {output}: expected a .onnx file name (the contract goes beside it as .yaml)")
    yaml_out = sidecar_path(output)

    source = load_policy_source(checkpoint)
    log(
        f"checkpoint {checkpoint} (iteration {source.iteration}): {source.obs_dim} observations -> "
        f"{source.num_actions} actions, observation normalization {'on' if source.network.normalize_obs else 'off'}"
    )
    # Refuse a policy that cannot run on this robot before any tracing (numbers filled in later).
    diffs = contract_differences(parse_contract(build_contract(source, robot, opset, 0.0, {}, EXPORTER)), robot)
    if diffs:
        raise ExportError(f"{checkpoint} does not fit robot contract {robot.source}:\n  - " + "\n  - ".join(diffs))
    model = actor_to_onnx(source.actor, source.obs_dim, opset)

    observation_sets = {"random": random_observations(source, num_random, seed)}
    rollout, note = rollout_observations(source, rollout_steps, rollout_envs, seed)
    if rollout is not None:
        observation_sets["rollout"] = rollout
    session = ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    verification = compare(
        source, lambda obs: session.run([OUTPUT_NAME], {INPUT_NAME: obs})[0], observation_sets, tolerance
    )
    verification.notes.append(note)
    _raise_if_failed(verification, "graph")

    contract = build_contract(source, robot, opset, verification.worst, dict(verification.counts), EXPORTER)
    model_bytes = attach_contract(model, contract).SerializeToString()

    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{output.stem}.", suffix=".tmp.onnx", dir=output.parent)
    os.close(fd)
    os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; a policy file is meant to be shared
    tmp_onnx = Path(tmp_name)
    tmp_yaml = sidecar_path(tmp_onnx)
    try:
        _write_synced(tmp_onnx, model_bytes)
        _write_synced(tmp_yaml, contract_to_yaml(contract).encode())
        final = _verify_written(source, tmp_onnx, robot, observation_sets, tolerance)
        os.replace(tmp_yaml, yaml_out)
        os.replace(tmp_onnx, output)
    finally:
        tmp_onnx.unlink(missing_ok=True)
        tmp_yaml.unlink(missing_ok=True)
    final.notes = verification.notes
    log("verified against PyTorch:\n" + final.summary())
    log(f"wrote {output} and {yaml_out}")
    return ExportResult(output, yaml_out, checkpoint, picked_latest, final, contract)


def _verify_written(
    source: PolicySource, path: Path, robot: Robot, observation_sets: dict[str, np.ndarray], tolerance: float
) -> Verification:
    """Load the written files as the robot would and check them once more."""
    try:
        runner = PolicyRunner.load(path, robot)
    except PolicyContractError as e:
        raise ExportError(f"the written policy does not load in the runtime: {e}") from None

    def one_at_a_time(obs: np.ndarray) -> np.ndarray:
        return np.stack([runner(o) for o in obs])

    batch = compare(source, runner.run_batch, observation_sets, tolerance)
    singles = {"single observation": observation_sets["random"][:SINGLE_OBSERVATION_CHECKS]}
    single = compare(source, one_at_a_time, singles, tolerance)
    batch.max_abs_diff.update(single.max_abs_diff)
    batch.counts.update(single.counts)
    _raise_if_failed(batch, "written file")
    return batch
