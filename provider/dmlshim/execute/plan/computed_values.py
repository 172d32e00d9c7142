"""Shape-like values *computed* from the feeds, for :mod:`.fed_values` to size their nodes before any run.

A shape made from a feed inside the graph escaped the memory limit: ``ConstantOfShape(Concat(Shape(x),
c))`` with ``x`` fed ``[20000]`` and ``c = [20000]``, ``Expand(y, Mul(Shape(x), k))`` or
``ConstantOfShape(Concat(Unsqueeze(n), Unsqueeze(n)))`` with ``n`` a fed scalar made onnxruntime
allocate 1.6 GB under ``DMLSHIM_MEMORY_LIMIT=100000000`` in every engine and the drop-in (the measured
peaks are in docs/safety.md). The top-level shape arithmetic feeding an Expand, ConstantOfShape, Tile,
Range, OneHot or Reshape is followed here: ``Shape`` of a feed, ``Gather``, ``Slice``, ``Concat``,
``Unsqueeze``, ``Squeeze``, ``Cast`` (integer to integer), ``Add``, ``Sub``, ``Mul``, ``Div`` (truncating,
as onnxruntime's integer division), ``Reshape`` and ``Identity`` of small integer tensors (at most 64
elements: feeds, initializers, ``Constant`` nodes), evaluated with numpy on each run's feeds. A value
anything else makes, an invalid input (onnxruntime's error stands) or a larger value is left unknown, and
its node is sized where it runs, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..proofs.symbol_shapes import value_shape
from .fed_values import _MAX_ELEMENTS, _reshaped, _small_ints

__all__ = ["ComputedValues"]

logger = logging.getLogger(__name__)

_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
_OPS = frozenset({"Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Div", "Reshape"})
_INTEGERS = frozenset(
    getattr(onnx.TensorProto, t)
    for t in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
)


@dataclass(frozen=True)
class _Step:
    op_type: str
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any]
    opset: int


@dataclass(frozen=True)
class ComputedValues:
    """The steps computing small integer values from the feeds (:meth:`values`)."""

    steps: tuple[_Step, ...] = ()
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Small integer initializers (those listed as inputs: defaults a feed overrides) and Constants."""

    @property
    def names(self) -> frozenset[str]:
        """The values computed from the feeds."""
        return frozenset(s.output for s in self.steps)

    @classmethod
    def of(cls, graph: onnx.GraphProto, fed: set[str], targets: set[str], opset: int) -> ComputedValues:
        """The top-level steps of ``graph`` the values ``targets`` need, from ``fed`` (graph inputs) and
        small integer constants."""
        constants: dict[str, np.ndarray] = {}
        for tensor in graph.initializer:
            if tensor.data_type in _INTEGERS and _count(tensor.dims) <= _MAX_ELEMENTS:
                value = _array(tensor)
                if value is not None:
                    constants[tensor.name] = value
        known = set(fed) | set(constants)
        steps: dict[str, _Step] = {}
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or not node.output or not node.output[0]:
                continue
            if node.op_type == "Constant":
                value = _constant(node)
                if value is not None:
                    constants[node.output[0]] = value
                    known.add(node.output[0])
                continue
            if node.op_type not in _OPS and node.op_type not in _ARITH and node.op_type != "Identity":
                continue
            used = [n for n in node.input if n]
            if not used or not all(n in known for n in used):
                continue
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            steps[node.output[0]] = _Step(node.op_type, tuple(node.input), node.output[0], attributes, opset)
            known.add(node.output[0])
        needed: set[str] = set()
        todo = [t for t in targets if t in steps]
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            todo.extend(n for n in steps[name].inputs if n in steps)
        kept = tuple(s for s in steps.values() if s.output in needed)
        return cls(kept, constants) if kept else cls()

    def values(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The values the steps compute from ``feeds`` (those known; none raises), and the constants
        no feed overrides."""
        out: dict[str, np.ndarray] = {k: v for k, v in self.constants.items() if k not in feeds}

        def small(name: str) -> np.ndarray | None:
            if name in out:
                return out[name]
            if name in feeds:
                return _small_ints(feeds[name])
            return self.constants.get(name)

        for step in self.steps:
            try:
                with np.errstate(all="ignore"):
                    value = _evaluate(step, small, feeds)
            except (ValueError, TypeError, IndexError, OverflowError, np.exceptions.AxisError) as exc:
                logger.debug("%s %r left unknown: %s", step.op_type, step.output, exc)
                value = None
            value = None if value is None else np.asarray(value)  # numpy makes 0-d results scalars
            if value is not None and value.dtype.kind in "iu" and value.size <= _MAX_ELEMENTS:
                out[step.output] = value
        return out


def _count(dims: Any) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


def _array(tensor: onnx.TensorProto) -> np.ndarray | None:
    """The tensor's values when it holds them (not external data, nor a weightless model's stand-in)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        value = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, OSError) as exc:
        logger.debug("%r not read: %s", tensor.name, exc)
        return None
    return value if value.size == _count(tensor.dims) else None


def _constant(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.t.data_type in _INTEGERS and _count(a.t.dims) <= _MAX_ELEMENTS:
            return _array(a.t)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints" and len(a.ints) <= _MAX_ELEMENTS:
            return np.array(list(a.ints), np.int64)
    return None


def _evaluate(step: _Step, small: Any, feeds: Mapping[str, Any]) -> np.ndarray | None:
    op, attrs = step.op_type, step.attributes
    if op == "Shape":
        name = step.inputs[0]
        value = small(name)
        dims = (
            tuple(value.shape)
            if value is not None
            else (value_shape(feeds.get(name)) if name in feeds else None)
        )
        if dims is None:
            return None
        rank = len(dims)
        start, end = (int(attrs.get(k, d)) for k, d in (("start", 0), ("end", rank)))
        start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
        return np.array(dims[start:end], np.int64)
    args = [small(n) if n else None for n in step.inputs]
    if any(a is None for n, a in zip(step.inputs, args, strict=True) if n):
        return None
    if op == "Identity":
        return args[0]
    if op in _ARITH or op == "Div":
        a, b = args[0], args[1]
        if a.dtype != b.dtype:
            return None
        if op != "Div":
            return _ARITH[op](a, b).astype(a.dtype)
        if not np.all(b):
            return None  # onnxruntime's integer division by zero: its own error or result
        q = np.abs(a) // np.abs(b)  # truncation toward zero, as C++'s integer division
        return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
    if op == "Cast":
        to = int(attrs.get("to", 0))
        return args[0].astype(helper.tensor_dtype_to_np_dtype(to)) if to in _INTEGERS else None
    if op == "Concat":
        if len({a.dtype for a in args}) != 1 or "axis" not in attrs:
            return None
        return np.concatenate(args, axis=int(attrs["axis"]))
    if op == "Gather":
        data, index = args[0], args[1]
        axis = int(attrs.get("axis", 0))
        axis = axis + data.ndim if axis < 0 else axis
        if (
            not 0 <= axis < data.ndim
            or np.any(index < -data.shape[axis])
            or np.any(index >= data.shape[axis])
        ):
            return None
        return np.take(data, index.astype(np.int64), axis=axis)
    if op == "Reshape":
        shape = _reshaped(
            args[0].shape, [int(d) for d in args[1].reshape(-1)], allowzero=bool(attrs.get("allowzero"))
        )
        return args[0].reshape(shape) if shape is not None else None
    if op in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes") if step.opset < 13 else (args[1] if len(args) > 1 else None)
        return _squeezed(op, args[0], None if axes is None else [int(x) for x in np.reshape(axes, -1)])
    return _sliced(step, args)


def _squeezed(op: str, data: np.ndarray, axes: list[int] | None) -> np.ndarray | None:
    if op == "Squeeze":
        rank = data.ndim
        axes = [i for i, d in enumerate(data.shape) if d == 1] if axes is None else axes
        norm = sorted({a + rank if a < 0 else a for a in axes})
        if len(norm) != len(axes) or any(not 0 <= a < rank or data.shape[a] != 1 for a in norm):
            return None
        return data.reshape([d for i, d in enumerate(data.shape) if i not in norm])
    if axes is None:
        return None
    rank = data.ndim + len(axes)
    norm = sorted({a + rank if a < 0 else a for a in axes})
    if len(norm) != len(axes) or any(not 0 <= a < rank for a in norm):
        return None
    dims = iter(data.shape)
    return data.reshape([1 if i in norm else next(dims) for i in range(rank)])


def _sliced(step: _Step, args: list[Any]) -> np.ndarray | None:
    """``Slice`` (opset 10 on: starts, ends, axes, steps as inputs), with onnx's clamping."""
    if step.opset < 10:
        return None
    data = args[0]
    starts, ends = (np.reshape(a, -1) for a in args[1:3])
    axes = np.reshape(args[3], -1) if len(args) > 3 and args[3] is not None else np.arange(len(starts))
    strides = (
        np.reshape(args[4], -1) if len(args) > 4 and args[4] is not None else np.ones(len(starts), np.int64)
    )
    if not len(starts) == len(ends) == len(axes) == len(strides):
        return None
    index: list[slice] = [slice(None)] * data.ndim
    for start, end, axis, stride in zip(
        starts.tolist(), ends.tolist(), axes.tolist(), strides.tolist(), strict=True
    ):
        axis = axis + data.ndim if axis < 0 else axis
        if not 0 <= axis < data.ndim or not stride:
            return None
        dim = data.shape[axis]
        start, end = (v + dim if v < 0 else v for v in (start, end))
        if stride > 0:
            index[axis] = slice(max(0, min(dim, start)), max(0, min(dim, end)), stride)
        else:
            last = max(-1, min(dim - 1, end))
            index[axis] = slice(max(0, min(dim - 1, start)), last if last >= 0 else None, stride)
    return data[tuple(index)]
