"""Cuts no data-propagating pass can reveal: where :func:`~dmlshim.model.data_prop.infer_with_data_prop`
may go straight to onnx's own pass.

A cut "of unknown length" hides a value from the data-propagating nodes that read it until a cut pass has
shown that propagation does not make it long; when every cut is of that kind, the pass's loop ends on onnx's
own uncut pass. The cut pass only proves it safe. The proof is at hand, without the pass, where every read
whose type inference could still refine (no type, no rank, or one dimension of unknown length) reads the
output of a ``Range``: onnx sizes a ``Range`` from constant inputs only (initializers and ``Constant``
nodes, never propagated data), so its type is the same in every pass, and so is every verdict of the plan.
The transformer exports of ``onnx_models/real`` cut only such values (``arange`` position ids).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .data_cuts import UNKNOWN, GraphPath, Site, each

__all__ = ["cuts_settled", "range_ignores_propagated_data"]


@functools.cache
def range_ignores_propagated_data() -> bool:
    """Whether the installed onnx leaves ``Range(0, n, 1)`` of unknown length when ``n`` is known only
    through data propagation (``Gather(Shape(x), 0)``): true of onnx 1.20 to 1.23; asked once, of a
    four-node model, so that an onnx whose Range reads propagated data keeps the cut passes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["y"], to=TensorProto.INT64),
    ]
    values = (("i", 0), ("zero", 0), ("one", 1))
    scalars = [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in values]
    graph = helper.make_graph(
        nodes,
        "range_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        scalars,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an onnx that cannot infer the probe: the cut passes decide
        return False
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        if value.name == "r":
            dims = value.type.tensor_type.shape.dim
            return len(dims) == 1 and not dims[0].HasField("dim_value")
    return False


def _settled(tp: onnx.TypeProto | None) -> bool:
    """A type no data-propagating pass can change the verdict on: a tensor of known rank other than 1, or
    of rank 1 and known length."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return False
    dims = tp.tensor_type.shape.dim
    return len(dims) != 1 or dims[0].HasField("dim_value")


def cuts_settled(
    model: onnx.ModelProto,
    paths: list[GraphPath],
    sites: Iterable[Site],
    plan: Mapping[Site, tuple[str, bytes]],
    types: Mapping[GraphPath, Mapping[str, onnx.TypeProto]],
    inits: Mapping[GraphPath, Mapping[str, onnx.TensorProto]],
) -> bool:
    """Whether the cut passes would end on onnx's uncut pass without revealing anything (see the module
    docstring): every cut of ``plan`` is of unknown length, and every read that is neither an initializer
    nor of a settled type reads a ``Range`` output. ``types`` and ``inits``: what the plan was made from."""
    if not plan or any(kind != UNKNOWN for kind, _ in plan.values()):
        return False
    open_values = {
        site.value
        for site in sites
        if site.value not in inits[site.path] and not _settled(types[site.path].get(site.value))
    }
    if not open_values or not range_ignores_propagated_data():
        return not open_values
    for _, graph in each(model, paths):
        for node in graph.node:
            if open_values.isdisjoint(node.output):
                continue
            if node.op_type != "Range" or node.domain not in ("", "ai.onnx"):
                return False
            open_values.difference_update(node.output)
    return not open_values  # a value no node makes (a graph or body input) may still be refined
