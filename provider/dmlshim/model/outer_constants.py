"""Outer-scope constants made visible to shape inference inside subgraphs.

onnx's shape inference reads the values of a graph's own initializers and ``Constant`` nodes, but not
those of an enclosing graph: a ``ConstantOfShape`` in an If branch (or a Loop body) whose shape is an
initializer of the main graph gets no static shape, so the memory limit never saw it, while onnxruntime
resolves the outer value and allocates the output (2 GB under a 100 MB limit, issue 35). For the static
size check only, :func:`with_outer_constants` gives a copy of the (weightless) model in which each
subgraph that has a size-making node and reads an outer constant carries a copy of the outer constants its
nodes read, as its own initializers; onnx's inference (with data propagation: a ``ConstantOfShape`` of a
``Mul`` or ``Concat`` of outer constants) then sizes the branch as onnxruntime does. An initializer that
is also a graph input is a default the caller may feed over: no constant.
"""

from __future__ import annotations

import logging

import onnx
from onnx import helper

from ..graph import subgraphs

__all__ = ["SIZE_MAKING_OPS", "has_outer_constants", "outer_constant_holders", "with_outer_constants"]

logger = logging.getLogger(__name__)

SIZE_MAKING_OPS = frozenset(
    {"ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample", "OneHot"}
)
"""Ops whose output may be far larger than their inputs, sized by an input's values."""

MAX_ELEMENTS = 1024
"""Outer constants longer than this are no shape, count or bound: never copied into a subgraph."""


def _value_attribute(node: onnx.NodeProto) -> onnx.AttributeProto | None:
    """The attribute a ``Constant`` node's value is taken from (None: sparse, string, large, none)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    for attr in node.attribute:
        name = attr.name
        if name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr if _small(attr.t) else None  # checked before copying: it may hold a large weight
        if name in ("value_int", "value_float"):
            return attr
        if (name == "value_ints" and len(attr.ints) <= MAX_ELEMENTS) or (
            name == "value_floats" and len(attr.floats) <= MAX_ELEMENTS
        ):
            return attr
    return None


def _constant_node_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The value of a ``Constant`` node as a tensor named by its output (None: sparse, string, none)."""
    attr = _value_attribute(node)
    if attr is None:
        return None
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
    elif attr.name == "value_int":
        tensor = helper.make_tensor("", onnx.TensorProto.INT64, [], [attr.i])
    elif attr.name == "value_ints":
        tensor = helper.make_tensor("", onnx.TensorProto.INT64, [len(attr.ints)], list(attr.ints))
    elif attr.name == "value_float":
        tensor = helper.make_tensor("", onnx.TensorProto.FLOAT, [], [attr.f])
    else:
        tensor = helper.make_tensor("", onnx.TensorProto.FLOAT, [len(attr.floats)], list(attr.floats))
    tensor.name = node.output[0]
    return tensor


def _small(tensor: onnx.TensorProto) -> bool:
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return (
        count <= MAX_ELEMENTS
        and tensor.data_type not in (0, onnx.TensorProto.STRING)
        and tensor.data_location != onnx.TensorProto.EXTERNAL
    )


def _own_constants(
    graph: onnx.GraphProto, overridable: bool, values: bool = True
) -> dict[str, onnx.TensorProto | None]:
    """``graph``'s small initializers and ``Constant`` node values, by name; ``overridable``: an
    initializer that is also a graph input is a default the caller may feed over (IR version 4 on), which
    onnxruntime does not treat as a constant, so it is none here. ``values`` False: the names only (each
    a ``Constant`` node's maps to None), for a walk that only tells whether any would be copied: a
    detector's 944 ``Constant`` nodes are not each copied into a tensor to be dropped."""
    fed = {v.name for v in graph.input} if overridable else set()
    found: dict[str, onnx.TensorProto | None] = {
        t.name: t for t in graph.initializer if _small(t) and t.name not in fed
    }
    for node in graph.node:
        if not values:
            if _value_attribute(node) is not None:
                found[node.output[0]] = None
            continue
        tensor = _constant_node_tensor(node)
        if tensor is not None:
            found[tensor.name] = tensor
    return found


def _defined(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(o for node in graph.node for o in node.output)
    return names


def _inject(
    graph: onnx.GraphProto,
    outer: dict[str, onnx.TensorProto | None],
    top: bool,
    apply: bool,
    overridable: bool,
) -> bool:
    """Copy into each subgraph below ``graph`` the outer constants (``outer``, then each enclosing graph's
    own) its nodes read, where one of its size-making nodes reads one (``apply`` False: only tell whether
    any would be). True when any was (or would be) copied."""
    changed = False
    defined = _defined(graph)
    if not top:
        read = {name for node in graph.node for name in node.input if name and name not in defined}
        wanted = {name for name in read if name in outer}
        # a size-making node reading an outer constant, or a value the subgraph computes from them
        # (``ConstantOfShape(Mul(outer, 2))``): onnx's data propagation follows those within the graph
        sizing = bool(wanted) and any(node.op_type in SIZE_MAKING_OPS for node in graph.node)
        if sizing and apply:
            graph.initializer.extend(t for name in sorted(wanted) if (t := outer[name]) is not None)
        changed = sizing
    # a name this graph defines hides an outer one of the same name
    if not any(True for node in graph.node for _ in subgraphs(node)):
        return changed
    visible = {name: t for name, t in outer.items() if name not in defined}
    visible.update(_own_constants(graph, overridable, values=apply))
    for node in graph.node:
        for _, sub in subgraphs(node):
            changed |= _inject(sub, visible, top=False, apply=apply, overridable=overridable)
    return changed


def has_outer_constants(model: onnx.ModelProto) -> bool:
    """Whether :func:`with_outer_constants` would copy any outer constant into a subgraph (a walk, no
    copy)."""
    return bool(outer_constant_holders(model))


def outer_constant_holders(model: onnx.ModelProto) -> set[int]:
    """The indices of the top-level nodes holding a subgraph :func:`with_outer_constants` copies outer
    constants into (a walk, no copy)."""
    graph = model.graph
    nested = [sub for node in graph.node for _, sub in subgraphs(node)]
    if not any(_sizes_anything(sub) for sub in nested):
        return set()  # (only a subgraph with a size-making node copies constants: the walk below says no)
    overridable = model.ir_version >= 4
    visible = _own_constants(graph, overridable, values=False)
    return {
        i
        for i, node in enumerate(graph.node)
        if node.attribute
        and any(
            _inject(sub, visible, top=False, apply=False, overridable=overridable)
            for _, sub in subgraphs(node)
        )
    }


def _sizes_anything(graph: onnx.GraphProto) -> bool:
    """Whether ``graph`` or a graph nested in it has a size-making node."""
    for node in graph.node:
        if node.op_type in SIZE_MAKING_OPS:
            return True
    return any(_sizes_anything(sub) for node in graph.node for _, sub in subgraphs(node))


def with_outer_constants(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A weightless copy of ``model`` (:func:`~dmlshim.model.weightless.without_weights`: no weight is
    copied) whose subgraphs carry the outer-scope constants their size-making nodes read; None, and nothing
    copied, when no subgraph has such a node (the model's own inference already sizes what it can)."""
    from .weightless import without_weights

    if not has_outer_constants(model):
        return None
    overridable = model.ir_version >= 4  # (before IR 4 every initializer is a graph input, and constant)
    light = without_weights(model)
    if light is model:
        light = onnx.ModelProto()
        light.CopyFrom(model)
    _inject(light.graph, {}, top=True, apply=True, overridable=overridable)
    logger.debug("outer-scope constants copied into subgraphs for the static size check")
    return light
