"""Trace the deterministic actor (normalizer included) to ONNX and attach the contract.

Exporter choice: torch 2.13's default ``torch.onnx.export(dynamo=True)`` needs onnxscript, which
this toolkit does not otherwise depend on, and for a plain MLP it gives no better graph. The
TorchScript exporter (``dynamo=False``) produces the small graph we want: the normalizer as
Sub/Div/Clip on constant statistics, the observation split as two Gathers, then Gemm/Elu layers,
with a dynamic batch axis. Its deprecation warning is silenced here and only here.
"""

from __future__ import annotations

import io
import warnings

import onnx
import torch

from aow_policy.policy import INPUT_NAME, OUTPUT_NAME
from aow_policy.policy_contract import METADATA_KEY, contract_to_json
from export.checkpoint_source import ExportError

MIN_OPSET = 17
DEFAULT_OPSET = 17
EXPORTER = f"torch {torch.__version__} torch.onnx.export (TorchScript exporter)"


def actor_to_onnx(actor: torch.nn.Module, obs_dim: int, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """ONNX model with input ``obs`` [batch, obs_dim] and output ``actions`` [batch, num_actions]."""
    if opset < MIN_OPSET:
        raise ExportError(f"opset {opset} is too old: use {MIN_OPSET} or newer")
    buffer = io.BytesIO()
    example = torch.zeros(2, obs_dim)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            actor.eval(),
            (example,),
            buffer,
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=opset,
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            do_constant_folding=True,
        )
    model = onnx.load_from_string(buffer.getvalue())
    model.producer_name = "aow-export"
    model.doc_string = "AoW locomotion policy: deterministic action (mean) with the observation normalizer folded in"
    return model


def attach_contract(model: onnx.ModelProto, contract: dict) -> onnx.ModelProto:
    """Store the contract in metadata_props (replacing an earlier one) and run the ONNX checker."""
    for prop in list(model.metadata_props):
        if prop.key == METADATA_KEY:
            model.metadata_props.remove(prop)
    prop = model.metadata_props.add()
    prop.key, prop.value = METADATA_KEY, contract_to_json(contract)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as e:
        raise ExportError(f"the exported graph fails onnx.checker: {e}") from None
    return model
