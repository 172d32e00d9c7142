"""A model without its weight bytes, for the work that needs only its structure: shape inference, the
model check, placement. Large initializers (and initializers whose data is external) become graph inputs
of the same type and shape; values that drive shapes or index bounds are small and stay.

One exception to "the same shape": a large one-dimensional initializer that a Reshape, Expand or
ConstantOfShape reads as its shape. Given its values, onnx reads them (as onnxruntime does); given only
its static length N, onnx before 1.23 makes the output a tensor of rank N, one protobuf dimension (about
80 bytes) per element, copied at every pass: a Reshape reading a 2^20-element constant cost the model
check 10 s and 616 MB on onnx 1.20, where onnxruntime's session took 0.7 s and 290 MB. A shape of more than
:data:`dmlshim.model.data_cuts.MAX_RANK` elements is no rank anything runs, so such an input is declared
of unknown length (onnx 1.23 bounds that inference the same way), and no step that works on the copy
allocates in proportion to it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper

WEIGHTLESS_MIN_BYTES = 64 * 1024
"""Initializers at least this large are left out of the weightless copy (typed graph inputs instead)."""


@functools.cache
def _itemsize(data_type: int) -> int:
    """The bytes of one element of an ONNX tensor type (0 for strings and unknown types): looked up once
    per type (a session build asks for every initializer's size several times)."""
    if data_type in (0, onnx.TensorProto.STRING):
        return 0
    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 0


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """The bytes a numeric tensor's values take (0 for strings and unknown types)."""
    itemsize = _itemsize(tensor.data_type)
    if not itemsize:
        return 0
    return math.prod(tensor.dims) * itemsize  # (in C: asked of every initializer several times a build)


def is_external(tensor: onnx.TensorProto) -> bool:
    """The tensor's data lives in another file."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def model_shell(model: onnx.ModelProto) -> onnx.ModelProto:
    """A new model with every field of ``model`` but the graph."""
    out = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == "graph":
            continue
        if field.is_repeated:
            getattr(out, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    return out


def graph_shell(graph: onnx.GraphProto, out: onnx.GraphProto) -> None:
    """Copy every field of ``graph`` but its initializers into ``out``."""
    for field, value in graph.ListFields():
        if field.name == "initializer":
            continue
        if field.is_repeated:
            getattr(out, field.name).extend(value)
        else:
            setattr(out, field.name, value)


SHAPE_SLOTS: dict[str, int] = {"Reshape": 1, "Expand": 1, "ConstantOfShape": 0}
"""The input each op's inference reads as a shape: given only its length, older onnx takes that as the
output's rank."""

UNKNOWN_LENGTH = "dmlshim_shape_longer_than_any_rank"
"""The dimension name a long shape constant's length is declared by in the weightless copy."""


def _shape_read(graph: onnx.GraphProto, names: set[str]) -> set[str]:
    """Those of ``names`` that a node of ``graph`` (or of a graph inside its nodes) reads as a shape."""
    from ..graph import walk_nodes

    found: set[str] = set()
    for _, node in walk_nodes(graph):
        slot = SHAPE_SLOTS.get(node.op_type)
        if slot is None or node.domain not in ("", "ai.onnx") or slot >= len(node.input):
            continue
        if node.input[slot] in names:
            found.add(node.input[slot])
    return found


VALUE_BLIND_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)
"""Ops whose type inference reads no input's values (their data and indices are read at run time only)."""

_INTEGER_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
)


def read_by_value(graph: onnx.GraphProto, tensors: Iterable[onnx.TensorProto]) -> frozenset[str]:
    """The names of those of ``tensors`` (initializers of ``graph``) whose values onnxruntime's type
    inference may read when it builds a session: integer, at most one-dimensional (a shape, axes, pads,
    repeats, a count), read by a node (of ``graph`` or of a graph inside its nodes) that is no gather or
    scatter. onnxruntime reads no such value from external data or from an initializer handed through
    ``add_external_initializers`` ("Cannot parse data from external tensors": it refuses a model it runs
    when the value is inline, such as a Reshape whose 2^20-element shape is a constant), so such a value
    must reach it inline, however large."""
    from ..graph import walk_nodes

    candidates = {t.name for t in tensors if t.data_type in _INTEGER_TYPES and len(t.dims) <= 1}
    if not candidates:
        return frozenset()
    found: set[str] = set()
    for _, node in walk_nodes(graph):
        if node.op_type in VALUE_BLIND_OPS and node.domain in ("", "ai.onnx"):
            continue
        found.update(name for name in node.input if name in candidates)
    return frozenset(found)


def _declared(tensor: onnx.TensorProto, unknown_length: set[str]) -> onnx.ValueInfoProto:
    if tensor.name in unknown_length:
        return helper.make_tensor_value_info(tensor.name, tensor.data_type, [UNKNOWN_LENGTH])
    return helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))


def without_weights(model: onnx.ModelProto, min_bytes: int = WEIGHTLESS_MIN_BYTES) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers of at least ``min_bytes`` (and external ones) are typed
    graph inputs instead; ``model`` itself when it has none. No weight byte is copied. A one-dimensional
    one longer than any rank (:data:`~dmlshim.model.data_cuts.MAX_RANK`) that a node reads as a shape is
    declared of unknown length (see the module docstring)."""
    from .data_cuts import MAX_RANK

    graph = model.graph
    heavy = [t for t in graph.initializer if is_external(t) or tensor_nbytes(t) >= min_bytes]
    if not heavy:
        return model
    light = model_shell(model)
    graph_shell(graph, light.graph)
    names = {t.name for t in heavy}
    light.graph.initializer.extend(t for t in graph.initializer if t.name not in names)
    declared = {v.name for v in graph.input}
    long = {t.name for t in heavy if len(t.dims) == 1 and t.dims[0] > MAX_RANK and t.name not in declared}
    unknown_length = _shape_read(graph, long) if long else set()
    light.graph.input.extend(_declared(t, unknown_length) for t in heavy if t.name not in declared)
    return light


def without_fed_defaults(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without the values of the initializers a caller may override (those that are
    also graph inputs, from IR version 4): they stay graph inputs, typed as declared (shaped as the
    initializer when the declaration has no shape). onnxruntime does not treat them as constants, so no
    type may follow from their values (onnx's inference would read them: a Slice's ``ends`` default gave
    a static length that a feed then changed). ``model`` itself when it has none."""
    graph = model.graph
    fed = {v.name for v in graph.input}
    defaults = [t for t in graph.initializer if t.name in fed] if model.ir_version >= 4 else []
    if not defaults:
        return model
    out = model_shell(model)
    graph_shell(graph, out.graph)
    names = {t.name: t for t in defaults}
    out.graph.initializer.extend(t for t in graph.initializer if t.name not in names)
    for value in out.graph.input:
        tensor = names.get(value.name)
        tensor_type = value.type.tensor_type
        if tensor is None or not value.type.HasField("tensor_type") or tensor_type.HasField("shape"):
            continue
        if not tensor_type.elem_type:
            tensor_type.elem_type = tensor.data_type
        tensor_type.shape.SetInParent()
        for d in tensor.dims:
            tensor_type.shape.dim.add().dim_value = int(d)
    return out


def without_declared_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A weightless copy of ``model`` (:func:`without_weights`) for shape inference, without the shapes its
    ``value_info`` and graph outputs declare, in every graph: onnxruntime runs each node at the shapes its
    inputs give whatever a declaration says (a stale one makes it warn at most)."""
    light = without_weights(model)
    if light is model:
        light = onnx.ModelProto()
        light.CopyFrom(model)
    _drop_declared(light.graph)
    return light


def _drop_declared(graph: onnx.GraphProto) -> None:
    from ..graph import subgraphs

    del graph.value_info[:]
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    for node in graph.node:
        for _, sub in subgraphs(node):
            _drop_declared(sub)
