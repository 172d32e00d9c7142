"""A model without its weight bytes, for the work that needs only its structure: shape inference, the
model check, placement. Large initializers (and initializers whose data is external) become graph inputs
of the same type and shape; values that drive shapes or index bounds are small and stay."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

WEIGHTLESS_MIN_BYTES = 64 * 1024
"""Initializers at least this large are left out of the weightless copy (typed graph inputs instead)."""


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """The bytes a numeric tensor's values take (0 for strings and unknown types)."""
    if tensor.data_type in (0, onnx.TensorProto.STRING):
        return 0
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return count * itemsize


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


def without_weights(model: onnx.ModelProto, min_bytes: int = WEIGHTLESS_MIN_BYTES) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers of at least ``min_bytes`` (and external ones) are typed
    graph inputs instead; ``model`` itself when it has none. No weight byte is copied."""
    graph = model.graph
    heavy = [t for t in graph.initializer if is_external(t) or tensor_nbytes(t) >= min_bytes]
    if not heavy:
        return model
    light = model_shell(model)
    graph_shell(graph, light.graph)
    names = {t.name for t in heavy}
    light.graph.initializer.extend(t for t in graph.initializer if t.name not in names)
    declared = {v.name for v in graph.input}
    light.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in heavy
        if t.name not in declared
    )
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
