"""What onnxruntime's CPU provider is given for gather/scatter nodes that do not run as DirectML operators.

ONNX deprecated Scatter in opset 11 in favour of ScatterElements, which has the same inputs, output,
``axis`` attribute and meaning (ScatterElements-11 is Scatter-11 renamed). onnxruntime registers Scatter
only up to opset 10, so a model importing ai.onnx 11 or later that still uses Scatter loads nowhere in
onnxruntime. Whenever such a node has to run on the CPU (an empty tensor, a rank above 8, a data type
DirectML lacks, a node inside control flow), the engines give onnxruntime the equivalent ScatterElements
node instead, and the run record says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import onnx

from ...graph import default_opset, subgraphs
from ..record import PLACEMENT_CPU, NodeRecord

__all__ = [
    "REASON_SCATTER_AS_SCATTER_ELEMENTS",
    "SCATTER_ELEMENTS_NOTE",
    "for_onnxruntime",
    "has_deprecated_scatter",
    "note_scatter_as_scatter_elements",
    "rewrite_deprecated_scatter",
]

DEPRECATED_SINCE = 11
"""The ai.onnx opset from which Scatter is deprecated (onnxruntime has no kernel for it)."""

REASON_SCATTER_AS_SCATTER_ELEMENTS = "scatter_as_scatter_elements"
SCATTER_ELEMENTS_NOTE = (
    "Scatter is deprecated from ai.onnx opset 11 and onnxruntime has no kernel for it there; the CPU "
    "provider ran the equivalent ScatterElements (same inputs, output and axis: ScatterElements-11 is "
    "Scatter-11 renamed)"
)


def _default_opset(model: onnx.ModelProto) -> int:
    return default_opset(model)  # the last entry, as onnxruntime (the first made [13, 9] refuse Scatter)


def _is_deprecated_scatter(node: onnx.NodeProto) -> bool:
    return node.op_type == "Scatter" and node.domain in ("", "ai.onnx")


def _graph_has_scatter(graph: onnx.GraphProto) -> bool:
    return any(
        _is_deprecated_scatter(node) or any(_graph_has_scatter(g) for _, g in subgraphs(node))
        for node in graph.node
    )


def has_deprecated_scatter(model: onnx.ModelProto) -> bool:
    """Whether the model (subgraphs included) has a Scatter node that onnxruntime cannot load."""
    return _default_opset(model) >= DEPRECATED_SINCE and _graph_has_scatter(model.graph)


def _rewrite_graph(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        if _is_deprecated_scatter(node):
            node.op_type = "ScatterElements"
            note = "dmlshim: a Scatter node (deprecated from opset 11), run as the equivalent ScatterElements"
            node.doc_string = f"{note}. {node.doc_string}" if node.doc_string else note
        for _, sub in subgraphs(node):
            _rewrite_graph(sub)


def rewrite_deprecated_scatter(model: onnx.ModelProto) -> bool:
    """Turn the model's deprecated Scatter nodes (opset 11 and later, subgraphs included) into
    ScatterElements nodes with the same name, inputs, output and axis, in place; whether any was."""
    if not has_deprecated_scatter(model):
        return False
    _rewrite_graph(model.graph)
    return True


def for_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model onnxruntime should load: itself, or a copy with :func:`rewrite_deprecated_scatter` done."""
    if not has_deprecated_scatter(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _rewrite_graph(copy.graph)
    return copy


def note_scatter_as_scatter_elements(records: Iterable[NodeRecord]) -> tuple[NodeRecord, ...]:
    """The records with the note added to every Scatter node that onnxruntime ran (the model imports
    ai.onnx 11 or later: call only when :func:`has_deprecated_scatter` holds)."""
    out = []
    for record in records:
        if record.op_type == "Scatter" and record.placement == PLACEMENT_CPU:
            note = (REASON_SCATTER_AS_SCATTER_ELEMENTS, SCATTER_ELEMENTS_NOTE)
            if note not in record.reasons:
                record = dataclasses.replace(record, reasons=(*record.reasons, note))
        out.append(record)
    return tuple(out)
