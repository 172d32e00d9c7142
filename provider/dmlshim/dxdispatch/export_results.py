"""What ``dmlshim export`` writes and reports: file names, the per-node results and folder names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dml.enums import FeatureLevel

__all__ = [
    "DML_OUTPUT_FILE",
    "EXPECTED_OUTPUT_FILE",
    "FOLDER_RE",
    "INDEX_FILE",
    "INDEX_SCHEMA_VERSION",
    "MODEL_FILE",
    "README_FILE",
    "ExportResult",
    "ExportedNode",
    "PreparedInput",
    "SkippedNode",
    "sanitize_name",
]

INDEX_SCHEMA_VERSION = 1
MODEL_FILE = "model.json"
EXPECTED_OUTPUT_FILE = "expected_output.npy"
DML_OUTPUT_FILE = "dml_output.npy"
README_FILE = "README.txt"
INDEX_FILE = "index.json"

FOLDER_RE = re.compile(r"^\d+_[A-Za-z0-9_.-]+$")
"""The shape of a node folder's name: the graph position of the node (or of the control-flow node holding
it), then its sanitized path."""
_MAX_NAME_CHARS = 80


@dataclass(frozen=True)
class PreparedInput:
    """One DirectML input buffer as the operator sees it.

    Attributes:
        binding: the DirectML tensor field (``InputTensor``, ``IndicesTensor``, ``UpdatesTensor``).
        array: the buffer: shaped like the tensor's Sizes (or flat, for a strided tensor) in the tensor's
            data type.
        steps: what was done to the ONNX array to get there, one sentence each, in order.
    """

    binding: str
    array: np.ndarray = field(compare=False, repr=False)
    steps: tuple[str, ...]


@dataclass(frozen=True)
class ExportedNode:
    """A node written as a DxDispatch model.

    Attributes:
        folder: the node's folder name inside the export directory.
        node: the node's name (``<op_type>_<index>`` when it has none), with its subgraph path for a node
            inside control flow (``loop/body/scatter_row``).
        op_type: the ONNX op type.
        operator: the DirectML operator type name, as written in ``model.json``.
        output_shape: the DirectML OutputTensor Sizes (the shape of ``expected_output.npy``).
        output_dtype: the numpy dtype of ``expected_output.npy``.
        duplicate_indices: scatter writes overwritten by a later write; DirectML does not define which
            write wins, so a real GPU may legitimately disagree where this is non-zero.
        matches_onnxruntime: whether dmlshim's result for the node, mapped back to ONNX, equals the value
            onnxruntime computed for the node's output.
        steps: the host-side preparation applied, per binding.
        iterations: for a node inside control flow, the run of each enclosing If/Loop/Scan node its inputs
            were captured in, outermost first: (control-flow node path, iteration; None for an If, whose
            taken branch is part of the node's path).
    """

    folder: str
    node: str
    op_type: str
    operator: str
    output_shape: tuple[int, ...]
    output_dtype: str
    duplicate_indices: int
    matches_onnxruntime: bool
    steps: tuple[tuple[str, tuple[str, ...]], ...]
    iterations: tuple[tuple[str, int | None], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "node": self.node,
            "op_type": self.op_type,
            "operator": self.operator,
            "output_shape": list(self.output_shape),
            "output_dtype": self.output_dtype,
            "duplicate_indices": self.duplicate_indices,
            "matches_onnxruntime": self.matches_onnxruntime,
            "host_preparation": {binding: list(steps) for binding, steps in self.steps},
            "captured_in": [{"node": node, "iteration": it} for node, it in self.iterations],
        }


@dataclass(frozen=True)
class SkippedNode:
    """A gather/scatter node that was not exported.

    Attributes:
        node: the node's name (subgraph nodes are prefixed with their path, ``loop/body/scatter``).
        op_type: the ONNX op type.
        code: a stable reason code (``NOT_DML``, ``EMPTY_TENSOR``, ``INDEX_OUT_OF_RANGE``,
            ``EXPORT_FAILED``; for nodes inside control flow also ``BRANCH_NOT_TAKEN``,
            ``ITERATION_NOT_REACHED``, ``SUBGRAPH_NODE`` (a body dmlshim cannot step into) and
            ``CAPTURE_FAILED``).
        reason: one sentence for people.
    """

    node: str
    op_type: str
    code: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class ExportResult:
    """What ``export_model`` wrote.

    Attributes:
        directory: the export directory.
        feature_level: the DirectML feature level the nodes were translated for.
        exported: the nodes written, in graph order.
        skipped: the gather/scatter nodes not written, with reasons.
    """

    directory: Path
    feature_level: FeatureLevel
    exported: tuple[ExportedNode, ...]
    skipped: tuple[SkippedNode, ...]


def sanitize_name(name: str) -> str:
    """A node name made safe as one path component: only ``[A-Za-z0-9_.-]``, no ``..``, at most 80 chars.

    Path separators and every other character become ``_``, so the folder can never leave the export
    directory whatever the model calls its nodes.
    """
    text = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    text = re.sub(r"\.{2,}", "_", text)
    text = re.sub(r"_{2,}", "_", text)[:_MAX_NAME_CHARS].strip("._")
    return text or "node"
