"""Whether onnx's data propagation can change any type a model's inference gives.

onnx's inference with ``data_prop=True`` differs from the pass without it in one place only: after a node's
outputs are typed, the node's data-propagation function (``Cast``, ``Gather``, ``Shape``, ``Concat``, ...)
records the values it computes in a table (onnx's ``generated_shape_data_by_name``), and a *later* node's
type inference may read that table, through ``InferenceContext::getSymbolicInput``. In onnx's operator
definitions only ``getShapeInput`` reads it, and only these ops call that: ``Reshape``, ``Expand`` and
``ConstantOfShape`` (the shape input), ``Resize`` (``sizes``) and ``AffineGrid`` (``size``), every version
(read from onnx's ``onnx/defs``). A propagation function that fails (``Gather`` reading an index out of
range) is an error onnx keeps only under ``strict_mode``; the node's outputs are typed before it runs.

So where no node of the model, in any graph, is one of those ops, and no node's inference runs another
body with the table (a model-local function, an onnx function op without its own inference function, or
a schema registered by someone else, whose inference may read it), the two passes give the same model,
and the cheaper one answers (issue 35: a 20,000-Cast chain spent 2 s of CPU bounding a propagation whose
result no node read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache

import onnx

from ..graph import may_hold_op_types
from .graph_columns import flat_ops

__all__ = ["SYMBOLIC_READERS", "propagation_unread"]

SYMBOLIC_READERS = frozenset({"Reshape", "Expand", "ConstantOfShape", "Resize", "AffineGrid"})
"""Ops whose type inference reads propagated data (``getShapeInput``), matched in every domain."""

_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
"""Domains whose schemas onnx itself defines (their inference functions were read); a schema found in
another domain was registered at run time, with an inference that may read the table."""


def _pairs(graph: onnx.GraphProto) -> Iterator[tuple[str, str]]:
    """(domain, op type) of every node of ``graph`` and of every graph its attributes hold."""
    for node in graph.node:
        yield node.domain, node.op_type
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _pairs(attr.g)
            for sub in attr.graphs:
                yield from _pairs(sub)


@cache
def _reads_table(domain: str, op_type: str, version: int) -> bool:
    """Whether a node of this op may read propagated data during its own inference."""
    if op_type in SYMBOLIC_READERS:
        return True
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except Exception:  # no schema: onnx skips the node (it infers nothing for it)
        return False
    if domain not in _ONNX_DOMAINS:
        return True
    # No inference function of its own: onnx infers its function body, which is given the table.
    return not schema.has_type_and_shape_inference_function


def propagation_unread(model: onnx.ModelProto, serialized: bytes | None = None) -> bool:
    """True when ``infer_shapes(model, data_prop=True)`` equals ``infer_shapes(model, data_prop=False)``
    (``strict_mode`` off) because no node's inference can read what propagation computes (module
    docstring). False when one might (the caller then propagates). ``serialized``: the model's bytes,
    when the caller has them (searched and read instead of serializing the graph)."""
    if len(model.functions) or may_hold_op_types(model.graph, sorted(SYMBOLIC_READERS), serialized):
        return False  # (most real models hold a Reshape: answered from the graph's bytes, without a walk)
    versions = {op.domain: int(op.version) for op in model.opset_import}
    versions.setdefault("", versions.get("ai.onnx", 0))
    columns = flat_ops(model.graph, serialized)
    pairs: Iterable[tuple[str, str]]
    if columns is None:  # subgraphs (or a graph too large for the columns): walk every node
        pairs = _pairs(model.graph)
    else:
        op_types, domains = columns
        if not op_types.isdisjoint(SYMBOLIC_READERS):
            return False
        pairs = [(domain, op) for domain in domains for op in op_types]  # each node's pair is among these
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        if pair in seen:
            continue
        seen.add(pair)
        domain, op_type = pair
        domain = "" if domain == "ai.onnx" else domain
        if _reads_table(domain, op_type, versions.get(domain, 0)):
            return False  # the first reader answers (a walk stops there)
    return True
