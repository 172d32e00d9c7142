"""onnxruntime's own view of a model's values: the element type and shape it infers for every value a
top-level node computes.

ONNX's shape inference and onnxruntime's differ: ``onnx.shape_inference`` with data propagation proves
static sizes onnxruntime never sees, and it gives no type for the outputs of some operators onnxruntime
knows (ai.onnx.ml, com.microsoft). What a partition boundary declares, and what a lowered model tells
onnxruntime about a replaced node's output, must be what onnxruntime itself would have known, so both come
from here: an onnxruntime CPU session over a weightless copy of the model
(:func:`dmlshim.model.weightless.without_weights`) in which every node output is a graph output with no
declared type; the session's outputs then list onnxruntime's own inference. The session is only loaded
(its graph resolved, which is where onnxruntime infers types), never initialized: no kernel is created, no
optimisation runs and no weight byte is copied.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping

import onnx
import onnxruntime as ort

from ..runtime.real import loaded_outputs
from .weightless import without_weights

logger = logging.getLogger(__name__)

__all__ = ["ort_value_types", "type_from_ort"]

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\(|\)|,)")


def _elem_type(name: str) -> int:
    try:
        return int(onnx.TensorProto.DataType.Value(name.upper()))
    except ValueError:
        aliases = {"float": "FLOAT", "double": "DOUBLE", "bool": "BOOL", "string": "STRING"}
        return int(onnx.TensorProto.DataType.Value(aliases.get(name, "UNDEFINED")))


def _parse(tokens: list[str], pos: int, out: onnx.TypeProto) -> int:
    """Parse one type starting at ``tokens[pos]`` into ``out``; return the position after it."""
    kind = tokens[pos]
    if tokens[pos + 1] != "(":
        raise ValueError(f"expected '(' after {kind}")
    pos += 2
    if kind in ("tensor", "sparse_tensor"):
        elem = _elem_type(tokens[pos])
        target = out.tensor_type if kind == "tensor" else out.sparse_tensor_type
        target.elem_type = elem
        pos += 1
    elif kind == "seq":
        pos = _parse(tokens, pos, out.sequence_type.elem_type)
    elif kind == "optional":
        pos = _parse(tokens, pos, out.optional_type.elem_type)
    elif kind == "map":
        out.map_type.key_type = _elem_type(tokens[pos])
        if tokens[pos + 1] != ",":
            raise ValueError("expected ',' in map(...)")
        pos = _parse(tokens, pos + 2, out.map_type.value_type)
    else:
        raise ValueError(f"unknown type kind {kind!r}")
    if tokens[pos] != ")":
        raise ValueError("expected ')'")
    return pos + 1


def type_from_ort(type_string: str, shape: object = None) -> onnx.TypeProto | None:
    """The ONNX type of onnxruntime's type string (``tensor(float)``, ``seq(tensor(int64))``,
    ``map(int64,tensor(float))``), with ``shape`` (onnxruntime's list of ints, names and None) on a
    tensor; None when the string cannot be read."""
    tokens = [m.group(1) for m in _TOKEN.finditer(type_string)]
    tp = onnx.TypeProto()
    try:
        end = _parse(tokens, 0, tp)
    except (ValueError, IndexError):
        return None
    if end != len(tokens):
        return None
    if tp.HasField("tensor_type") and isinstance(shape, (list, tuple)):
        dims = tp.tensor_type.shape
        dims.SetInParent()
        for d in shape:
            dim = dims.dim.add()
            if isinstance(d, int) and d >= 0:
                dim.dim_value = d
            elif isinstance(d, str) and d:
                dim.dim_param = d
    return tp


def _rank_zero(tp: onnx.TypeProto | None) -> bool:
    return (
        tp is not None
        and tp.HasField("tensor_type")
        and tp.tensor_type.HasField("shape")
        and not tp.tensor_type.shape.dim
    )


def ort_value_types(
    model: onnx.ModelProto,
    *,
    keep_annotations: bool = True,
    onnx_types: Mapping[str, onnx.TypeProto] | None = None,
    names: Collection[str] | None = None,
) -> dict[str, onnx.TypeProto]:
    """The type and shape onnxruntime infers for every value a top-level node of ``model`` computes (or
    for ``names`` only).

    onnxruntime's Python API lists an unknown shape and a scalar's alike (``[]``): such a value keeps a
    rank-0 shape only when ``onnx_types`` (ONNX's inference) says it is a scalar; otherwise its shape is
    left unknown, which never makes a feed refused.

    Args:
        model: the model (not modified; its large initializers are not copied).
        keep_annotations: keep the model's ``value_info`` and declared output shapes (onnxruntime's view of
            the model as it is); False leaves them out, so that the shapes follow from the graph inputs and
            initializers alone (a stale annotation cannot take part).
        onnx_types: ONNX's inferred types by value name, to tell scalars from unknown shapes.
        names: only these values are asked for (listed as outputs, read back and parsed). onnxruntime
            resolves the whole graph either way and types a node's output from its inputs' types alone, so
            each value gets the type it gets among all; the one session stays, only the thousands of
            outputs of a large model are not listed and parsed for nothing.

    Returns:
        Value name -> type; empty when onnxruntime cannot build the session (the caller falls back on
        ONNX's inference).
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(without_weights(model))
    graph = copy.graph
    if not keep_annotations:
        del graph.value_info[:]
        for out in graph.output:
            if out.type.HasField("tensor_type"):
                out.type.tensor_type.ClearField("shape")
    known = {o.name for o in graph.output} | {v.name for v in graph.input}
    known |= {t.name for t in graph.initializer}
    wanted = None if names is None else set(names)
    for node in graph.node:
        for name in node.output:
            if name and name not in known and (wanted is None or name in wanted):
                graph.output.add().name = name
                known.add(name)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        outputs = loaded_outputs(copy.SerializeToString(), so)
    except Exception as exc:  # onnxruntime raises several unrelated types for a model it refuses
        logger.debug("onnxruntime's view of the model is not available: %s", exc)
        return {}
    types: dict[str, onnx.TypeProto] = {}
    for arg in outputs:
        if wanted is not None and arg.name not in wanted:
            continue
        tp = type_from_ort(arg.type, arg.shape)
        if tp is not None and _rank_zero(tp) and not _rank_zero((onnx_types or {}).get(arg.name)):
            tp.tensor_type.ClearField("shape")
        if tp is not None:
            types[arg.name] = tp
    return types
