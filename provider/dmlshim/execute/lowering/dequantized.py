"""Gather the quantized values, then dequantize: a gather whose data is a per-tensor ``DequantizeLinear``.

A QDQ model's embedding reads ``Gather(DequantizeLinear(table, scale, zero_point), ids)``. onnxruntime's
QDQ transformers gather the quantized rows and dequantize only those. Once the custom-op engine has
replaced the Gather by a custom node, onnxruntime no longer sees that pattern: it dequantized the whole
table on every run and handed the float copy to the custom node (issue 36: 3x onnxruntime's run time and
+180 MB on a 49,152 x 576 int8 table). With a per-tensor scale and zero point, ``DequantizeLinear`` is
elementwise, ``(q - zero_point) * scale`` for each element alone, so it commutes with any gather: the
lowering gathers the quantized values and dequantizes the gathered elements with the same
``DequantizeLinear`` (same scale, zero point and attributes), bit for bit what onnxruntime computes either
way (tests/test_quant50_dequantized_gather.py).

Only gathers (Gather, GatherElements, GatherND): a scatter writes float updates into the data. Only a
scale (and zero point) of one element held by an initializer of the same graph that no feed can replace,
and no ``block_size``: a per-axis or blocked scale depends on the element's position.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from .emitter import Names

__all__ = ["DequantizedGather", "dequantize_producers", "dequantized_gather", "drop_unread_dequantize"]

GATHERS = frozenset({"Gather", "GatherElements", "GatherND"})
"""The ops whose output elements are each one element of data (so an elementwise map commutes)."""


@dataclass(frozen=True)
class DequantizedGather:
    """The gather on quantized values and the ``DequantizeLinear`` that follows it.

    Attributes:
        gather: the gather node reading the quantized values, with a fresh output.
        dequantize: the ``DequantizeLinear`` from that output to the gather's own output.
        source: the output of the ``DequantizeLinear`` the gather read (dropped once nothing reads it).
    """

    gather: onnx.NodeProto
    dequantize: onnx.NodeProto
    source: str


def _single_element_initializer(graph: onnx.GraphProto, name: str) -> bool:
    if any(v.name == name for v in graph.input):
        return False  # a feed could replace it
    tensor = next((t for t in graph.initializer if t.name == name), None)
    return tensor is not None and int(np.prod(list(tensor.dims), dtype=np.int64)) == 1


def dequantize_producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The ``DequantizeLinear`` nodes of ``graph`` by output name."""
    return {n.output[0]: n for n in graph.node if n.op_type == "DequantizeLinear" and n.output}


def dequantized_gather(
    node: onnx.NodeProto, graph: onnx.GraphProto, producers: Mapping[str, onnx.NodeProto], names: Names
) -> DequantizedGather | None:
    """The rewrite of ``node`` when its data is a per-tensor ``DequantizeLinear`` of ``graph`` (else None);
    ``producers``: :func:`dequantize_producers` of ``graph``."""
    if node.op_type not in GATHERS or node.domain not in ("", "ai.onnx") or not node.input[0]:
        return None
    dq = producers.get(node.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
    if attrs.get("block_size", 0):
        return None
    params = [i for i in dq.input[1:] if i]
    if len(params) < 1 or not all(_single_element_initializer(graph, p) for p in params):
        return None
    stem = (node.name or node.op_type).replace("/", "_")
    quantized = names.fresh(f"{stem}_quantized")
    gather = onnx.NodeProto()
    gather.CopyFrom(node)
    gather.input[0] = dq.input[0]
    gather.output[0] = quantized
    # per tensor: ``axis`` says nothing, and the gathered rank may not have it
    kept = {k: v for k, v in attrs.items() if k != "axis"}
    dequantize = helper.make_node(
        "DequantizeLinear",
        [quantized, *dq.input[1:]],
        [node.output[0]],
        name=names.fresh(f"{stem}_dequantize"),
        **kept,
    )
    return DequantizedGather(gather, dequantize, node.input[0])


def drop_unread_dequantize(graph: onnx.GraphProto, sources: set[str], read: set[str]) -> None:
    """Remove from ``graph`` the ``DequantizeLinear`` nodes whose output is in ``sources`` and no longer
    read (``read``: every name a node of the graph or its subgraphs reads, and the graph outputs), so that
    onnxruntime does not dequantize the whole table for nothing."""
    unread = sources - read
    if not unread:
        return
    keep = [n for n in graph.node if not (n.op_type == "DequantizeLinear" and n.output[0] in unread)]
    del graph.node[:]
    graph.node.extend(keep)
