"""Static sizes hidden behind constant arithmetic: ``Range(0, Mul(a, b), 1)``, ``Tile(t, Concat(r1, r2))``,
``Pad(t, Mul(p, q))``, ``Range(0, Cast(f), 1)``.

onnx's shape inference reads a shape input's values only when it is an initializer or a ``Constant`` (and,
with data propagation, through a few shape ops for some readers): a ``Range`` or ``Tile`` whose size
input is computed from constants is left without a static shape, although onnxruntime folds the whole
chain when it builds the session and allocates the result (4 GB under a 100 MB ``DMLSHIM_MEMORY_LIMIT``
for a ``Range`` of 500,000,000 int64: the limit was not honoured, issue 35). :func:`folded_copy` computes
those small constant values the way onnxruntime's constant folding would (with numpy, only for
shape arithmetic on at most :data:`FOLD_MAX_ELEMENTS` elements each, and only on the
way to a shape input whose reader inference left unsized), and gives a weightless copy of the model
(without its declared shapes) where each such node is a ``Constant`` holding its value, for
:func:`~dmlshim.execute.plan.checks.check_static_sizes` to infer and check again.
"""

from __future__ import annotations

import logging
import math
from collections import ChainMap
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...graph import constant_node_shape, constant_node_value, default_opset, may_hold_op_types, subgraphs
from ...limits import static_dims

__all__ = ["FOLD_MAX_ELEMENTS", "folded_copy", "folded_copy_at"]

logger = logging.getLogger(__name__)

FOLD_MAX_ELEMENTS = 1024
"""Values of at most this many elements are computed (a shape is a rank long; a Range's bound is one)."""

SIZE_INPUTS: Mapping[str, tuple[int, ...]] = {
    "Range": (0, 1, 2),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Expand": (1,),
    "Pad": (1, 3),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "OneHot": (1,),
    "CenterCropPad": (1,),
}
"""The ops whose output size follows from the values of these inputs (positions)."""

_UNARY: Mapping[str, Callable[[np.ndarray], np.ndarray]] = {
    "Identity": lambda a: a, "Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil,
    "Sqrt": np.sqrt, "Relu": lambda a: np.maximum(a, np.zeros((), a.dtype)), "Not": np.logical_not,
}  # fmt: skip
_BINARY: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
}  # fmt: skip
_ELEMENTWISE = frozenset({*_UNARY, *_BINARY, "Div", "Mod", "Cast", "Where"})
_SHAPING = frozenset(
    {"Concat", "Squeeze", "Unsqueeze", "Reshape", "Gather", "Slice", "Shape", "Size", "ReduceProd"}
    | {"ReduceSum", "ReduceMax", "ReduceMin", "Range", "ConstantOfShape"}
)
"""Ops computed here (with numpy, as onnxruntime computes them), whose output is no larger than their
inputs together (Range and ConstantOfShape: computed only when their own size is small). Any other op
leaves its value unknown, as onnx's inference left it."""


def folded_copy(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto | None:
    """A weightless copy of ``model`` without its declared shapes, in which every node on the way to a
    shape input (:data:`SIZE_INPUTS`) of a reader ``graph`` (``model``'s graph as inference typed it)
    leaves unsized, and computable from small constants alone, is a ``Constant`` of its value; None
    when no such node exists (the common case: one walk over the nodes)."""
    found = folded_copy_at(model, graph)
    return None if found is None else found[0]


def folded_copy_at(model: onnx.ModelProto, graph: onnx.GraphProto) -> tuple[onnx.ModelProto, set[int]] | None:
    """:func:`folded_copy`, and the indices of the top-level nodes it changed (a folded node, or the node
    holding the subgraph it is in)."""
    if not may_hold_op_types(graph, tuple(SIZE_INPUTS)):
        return None  # no reader of a shape input (a chain of 20,000 nodes: no walk)
    folds: dict[tuple[int, ...], np.ndarray] = {}
    _fold_graph(model, graph, ChainMap(), (), folds)
    if not folds:
        return None
    from ...model.weightless import without_declared_shapes

    copy = without_declared_shapes(model)
    for path, value in folds.items():
        target = _node_at(copy.graph, path)
        out = target.output[0]
        name = target.name
        target.Clear()
        target.CopyFrom(
            helper.make_node("Constant", [], [out], name=name, value=numpy_helper.from_array(value, out))
        )
    logger.info("%d value(s) computed from constants to size the values they shape", len(folds))
    return copy, {path[0] for path in folds}


def _node_at(graph: onnx.GraphProto, path: tuple[int, ...]) -> onnx.NodeProto:
    """The node at ``path``: (node index, subgraph attribute index, node index, ...)."""
    node = graph.node[path[0]]
    for k in range(1, len(path), 2):
        sub = [g for _, g in subgraphs(node)][path[k]]
        node = sub.node[path[k + 1]]
    return node


def _fold_graph(
    model: onnx.ModelProto,
    graph: onnx.GraphProto,
    outer: ChainMap[str, Any],
    prefix: tuple[int, ...],
    folds: dict[tuple[int, ...], np.ndarray],
) -> None:
    """Fold, in ``graph`` (and its subgraphs, which see its values), the nodes leading to an unsized
    reader's shape input. ``outer``: name -> (small constant value, or the producing node's index path
    and node, or None for a value that is no constant)."""
    scope: ChainMap[str, Any] = outer.new_child()
    local = scope.maps[0]  # written directly: ChainMap's own __setitem__ is Python code, once per value
    for value in graph.input:
        local[value.name] = None  # a graph input (a feed, a body's state, an overridable initializer)
    for tensor in graph.initializer:
        if tensor.name not in scope or scope[tensor.name] is not None:
            local[tensor.name] = _Stored(tensor)
    # values are decoded, and declared shapes read, only where a size input's chain reaches them
    declared = {v.name: v for v in (*graph.value_info, *graph.output)}
    for i, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for out in node.output:
                local[out] = _Stored(node)
            continue
        for out in node.output:
            if out:
                local[out] = (prefix, i, node)
        if (
            node.op_type in SIZE_INPUTS
            and node.domain in ("", "ai.onnx")
            and not _sized(declared.get(node.output[0]))
        ):
            for position in SIZE_INPUTS[node.op_type]:
                if position < len(node.input) and node.input[position]:
                    _value(model, node.input[position], scope, folds)
        if node.attribute:  # most nodes hold no attribute, so no graph
            for k, (_, sub) in enumerate(subgraphs(node)):
                _fold_graph(model, sub, ChainMap(scope), (*prefix, i, k), folds)


class _Stored:
    """An initializer or a ``Constant`` node whose value is decoded when a size input's chain reads it."""

    __slots__ = ("source",)

    def __init__(self, source: onnx.TensorProto | onnx.NodeProto) -> None:
        self.source = source

    def value(self) -> np.ndarray | None:
        source = self.source
        if isinstance(source, onnx.TensorProto):
            return _small_initializer(source)
        shape = constant_node_shape(source)
        if shape is None or math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
        value = constant_node_value(source)
        return value if value is not None and value.dtype != object else None


def _sized(value: onnx.ValueInfoProto | None) -> bool:
    return value is not None and static_dims(value) is not None


def _small_initializer(tensor: onnx.TensorProto) -> np.ndarray | None:
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type == onnx.TensorProto.STRING:
        return None
    if math.prod(tensor.dims) > FOLD_MAX_ELEMENTS:
        return None
    try:
        return numpy_helper.to_array(tensor)
    except Exception:  # an initializer onnx cannot read: the model check names it
        return None


def _value(
    model: onnx.ModelProto,
    name: str,
    scope: MutableMapping[str, Any],
    folds: dict[tuple[int, ...], np.ndarray],
) -> np.ndarray | None:
    """The value of ``name`` when it is a small constant or computable from small constants (computing
    and recording the nodes on the way), else None."""
    found = scope.get(name)
    if found is None or isinstance(found, np.ndarray):
        return found
    if isinstance(found, _Stored):
        value = found.value()
        scope[name] = value
        return value
    prefix, index, node = found
    path = (*prefix, index)
    scope[name] = None  # computed once, and never again while computing it
    if node.domain not in ("", "ai.onnx") or node.op_type not in _ELEMENTWISE | _SHAPING:
        return None
    if len([o for o in node.output if o]) != 1 or any(True for _ in subgraphs(node)):
        return None
    inputs: list[np.ndarray | None] = []
    for each in node.input:
        value = _value(model, each, scope, folds) if each else None
        if each and value is None:
            return None
        inputs.append(value)
    value = _computed(model, node, inputs)
    if value is None:
        return None
    scope[name] = value
    folds[path] = value
    return value


def _computed(
    model: onnx.ModelProto, node: onnx.NodeProto, inputs: list[np.ndarray | None]
) -> np.ndarray | None:
    """The value ``node`` computes from ``inputs`` (None where it cannot tell, or it would be large)."""
    present = [v for v in inputs if v is not None]
    if node.op_type in _ELEMENTWISE:
        try:
            shape = np.broadcast_shapes(*(v.shape for v in present))
        except ValueError:
            return None
        if math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
    try:
        with np.errstate(all="raise"):
            out = _evaluate(node, inputs, _opset(model))
    except (ValueError, TypeError, IndexError, ArithmeticError, FloatingPointError, KeyError) as exc:
        logger.debug("not folded: %s %s: %s", node.op_type, node.name, exc)
        return None
    if out is None or out.size > FOLD_MAX_ELEMENTS or out.dtype == object:
        return None
    return out


def _opset(model: onnx.ModelProto) -> int:
    return default_opset(model, missing=1)  # the last entry, as onnxruntime


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> np.ndarray | None:
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    args = [v for v in inputs if v is not None]
    if op in _UNARY:
        return np.asarray(_UNARY[op](args[0]))
    if op in _BINARY:
        return np.asarray(_BINARY[op](args[0], args[1]))
    if op == "Div":
        a, b = args
        if a.dtype.kind in "iu":
            if np.any(b == 0):
                return None
            q = a // b  # C++'s division truncates: floor, plus one where the signs differ and it is inexact
            return np.asarray(q + ((a % b != 0) & ((a < 0) != (b < 0))), dtype=a.dtype)
        return np.asarray(np.divide(a, b))
    if op == "Mod":
        a, b = args
        if a.dtype.kind in "iu" and np.any(b == 0):
            return None
        # fmod=1: the sign of the dividend (C's fmod); else of the divisor (integers only), as numpy's mod
        return np.asarray(np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b))
    if op == "Cast":
        if "to" not in attrs or attrs["to"] in (onnx.TensorProto.STRING, onnx.TensorProto.BFLOAT16):
            return None
        return args[0].astype(helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    if op == "Where":
        return np.where(*args)
    if op == "Concat":
        return np.concatenate(args, axis=int(attrs["axis"]))
    if op in ("Squeeze", "Unsqueeze"):
        axes = _ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else attrs.get("axes")
        if op == "Squeeze":
            return np.squeeze(args[0], axis=None if axes is None else tuple(int(x) for x in axes))
        out = args[0]
        rank = out.ndim + len(axes or ())
        for axis in sorted(int(x) % rank for x in axes or ()):
            out = np.expand_dims(out, axis)
        return out
    if op == "Reshape":
        data, shape = args
        dims = _ints(shape)
        if not attrs.get("allowzero", 0):  # 0 copies the input's dimension
            dims = [data.shape[i] if d == 0 and i < data.ndim else d for i, d in enumerate(dims)]
        return data.reshape(dims)
    if op == "Gather":
        data, idx = args
        axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
        return np.take(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis)
    if op == "Slice":
        return _slice(inputs, attrs, opset)
    if op == "Shape":
        shape = np.array(args[0].shape, dtype=np.int64)
        return shape[slice(attrs.get("start", 0), attrs.get("end"))]
    if op == "Size":
        return np.array(args[0].size, dtype=np.int64)
    if op in ("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin"):
        axes = _ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else attrs.get("axes")
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return args[0]
        fn = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[op]
        keep = bool(attrs.get("keepdims", 1))
        axis = None if not axes else tuple(int(x) for x in axes)
        return np.asarray(fn(args[0], axis=axis, keepdims=keep), dtype=args[0].dtype)
    if op == "Range":
        if len(args) != 3 or any(v.size != 1 for v in args):
            return None
        start, limit, delta = (v.reshape(()).item() for v in args)
        if delta == 0 or max(math.ceil((limit - start) / delta), 0) > FOLD_MAX_ELEMENTS:
            return None
        return np.arange(start, limit, delta, dtype=args[0].dtype)
    if op == "ConstantOfShape":
        shape = _ints(args[0]) if args else []
        if any(d < 0 for d in shape) or math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
        value = attrs.get("value")
        fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
        return np.full(shape, fill[0], dtype=fill.dtype)
    return None


def _ints(value: np.ndarray) -> list[int]:
    return [int(x) for x in value.reshape(-1)]


def _slice(inputs: list[np.ndarray | None], attrs: Mapping[str, Any], opset: int) -> np.ndarray | None:
    data = inputs[0]
    assert data is not None
    if opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes, steps = list(attrs.get("axes", range(len(starts)))), [1] * len(starts)
    else:
        if len(inputs) < 3 or inputs[1] is None or inputs[2] is None:
            return None
        starts, ends = _ints(inputs[1]), _ints(inputs[2])
        axes_in = inputs[3] if len(inputs) > 3 else None
        steps_in = inputs[4] if len(inputs) > 4 else None
        axes = _ints(axes_in) if axes_in is not None else list(range(len(starts)))
        steps = _ints(steps_in) if steps_in is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            return None
        index[int(axis) % data.ndim] = slice(start, end, step)  # numpy clamps as ONNX does
    return data[tuple(index)]
