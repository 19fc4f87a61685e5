"""Export trained policies to ONNX with their contract, verified against PyTorch (``aow-export``)."""

from export.checkpoint_source import ExportError
from export.pipeline import ExportResult, export_policy

__all__ = ["ExportError", "ExportResult", "export_policy"]
