"""The shapes a run's feeds give values whose declared dims are symbolic names graph inputs declare.

A symbol's size is read from the feed of an input declaring it; where several inputs declare one symbol,
onnxruntime does not hold their feeds to one size, so the size stands only when those feeds agree, and
otherwise onnx's inference at the run's shapes answers (or nothing does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...model.data_prop import infer_with_data_prop

logger = logging.getLogger(__name__)

__all__ = ["INFERRED_KEPT", "FeedShapes", "feeds_agree", "input_symbols", "shared_symbols", "value_shape"]

INFERRED_KEPT = 64
"""Distinct input shapes whose inferred shapes :class:`FeedShapes` keeps (then it starts over)."""


def input_symbols(graph: onnx.GraphProto) -> dict[str, tuple[str, int]]:
    """Each symbolic dimension name ``graph``'s inputs declare, with the first input and axis declaring it."""
    symbols: dict[str, tuple[str, int]] = {}
    for value in graph.input:
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.dim_param and not d.HasField("dim_value"):
                symbols.setdefault(d.dim_param, (value.name, axis))
    return symbols


def shared_symbols(graph: onnx.GraphProto) -> dict[str, tuple[tuple[str, int], ...]]:
    """Each symbolic dimension name two or more of ``graph``'s inputs declare, with every input and axis
    declaring it: onnxruntime does not hold the feeds to one size for it (``x: ['N', 4]`` fed 100 rows and
    ``z: ['N']`` fed 5 run), so the first declaring input's size stands for the others' only when the
    feeds agree."""
    declaring: dict[str, list[tuple[str, int]]] = {}
    for value in graph.input:
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.dim_param and not d.HasField("dim_value"):
                declaring.setdefault(d.dim_param, []).append((value.name, axis))
    return {name: tuple(where) for name, where in declaring.items() if len(where) > 1}


def feeds_agree(where: Sequence[tuple[str, int]], values: Mapping[str, Any]) -> bool:
    """Whether every value of ``values`` that an input of ``where`` names (a feed, or an initializer
    listed as an input) has one size at its axis there (one without a shape or that axis: no)."""
    size: int | None = None
    for feed, axis in where:
        if feed not in values:
            continue
        dims = value_shape(values[feed])
        if dims is None or axis >= len(dims):
            return False
        if size is None:
            size = int(dims[axis])
        elif int(dims[axis]) != size:
            return False
    return True


@dataclass(frozen=True)
class FeedShapes:
    """Shapes of lean gathers' inputs that follow from the feeds' shapes alone: each dim a size, or a
    symbolic name some graph input declares (static shape inference carried it there); else, when
    ``skeleton`` is given, onnx's shape inference of the model at the run's input shapes (once per
    distinct input shapes).

    Attributes:
        dims: the static dims by value name (a dim may be None or a name no input declares).
        symbols: for each symbolic name, the graph input and axis that declare it.
        skeleton: the model without its large initializers (declared as inputs instead), or None.
        indices: the computed indices of those gathers, which the check fetches (their values prove
            them in range on each run; no QDQ group holds integer indices).
        shared: every input and axis declaring each symbol that several inputs declare
            (:func:`shared_symbols`): a run whose feeds disagree on one has no size for it from the feeds
            (onnx's inference at the run's shapes, where ``skeleton`` is given, or none: a proof resting
            on another input's size would prove indices in range of a dimension the value lacks).
    """

    dims: Mapping[str, tuple[int | str | None, ...]]
    symbols: Mapping[str, tuple[str, int]]
    skeleton: onnx.ModelProto | None = None
    indices: frozenset[str] = frozenset()
    shared: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    _inferred: dict[tuple[Any, ...], dict[str, tuple[int, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def resolve(self, name: str, values: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The run's shape of ``name`` from the fed values' shapes (None when it does not follow)."""
        shape: list[int] = []
        for d in self.dims[name]:
            if isinstance(d, int):
                shape.append(d)
                continue
            feed, axis = self.symbols.get(d, ("", 0)) if d is not None else ("", 0)
            dims = value_shape(values.get(feed)) if feed else None
            if dims is None or axis >= len(dims):
                return self._infer(values).get(name)
            if d in self.shared and not feeds_agree(self.shared[d], values):
                return self._infer(values).get(name)
            shape.append(int(dims[axis]))
        return tuple(shape)

    def _infer(self, values: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        if self.skeleton is None:
            return {}
        inputs = self.skeleton.graph.input
        fed = [(v.name, value_shape(values.get(v.name))) for v in inputs if v.name in values]
        key = tuple(fed)
        if key not in self._inferred:
            if len(self._inferred) >= INFERRED_KEPT:
                self._inferred.clear()
            self._inferred[key] = _inferred_shapes(self.skeleton, dict(fed), set(self.dims))
        return self._inferred[key]


def value_shape(value: Any) -> tuple[int, ...] | None:
    """An array's or OrtValue's shape (None for anything without one)."""
    if type(value) is np.ndarray:
        return value.shape  # already a tuple of ints (asked on every run of the whole-model check)
    dims = getattr(value, "shape", None)
    dims = dims() if callable(dims) else dims  # an OrtValue's shape is a method
    return None if dims is None else tuple(int(d) for d in dims)


def _inferred_shapes(
    skeleton: onnx.ModelProto, fed: Mapping[str, tuple[int, ...] | None], names: set[str]
) -> dict[str, tuple[int, ...]]:
    """The static shapes onnx infers for ``names`` with the graph inputs at the ``fed`` shapes."""
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    for value in model.graph.input:
        shape = fed.get(value.name)
        if shape is not None:
            del value.type.tensor_type.shape.dim[:]
            for d in shape:
                value.type.tensor_type.shape.dim.add().dim_value = d
    try:
        inferred = infer_with_data_prop(model)
    except Exception as exc:  # an op onnx cannot infer: the run goes to the partitioned steps
        logger.debug("whole-model check: no shapes inferred at %s (%s)", dict(fed), exc)
        return {}
    found: dict[str, tuple[int, ...]] = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        known = value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims)
        if value.name in names and known:
            found[value.name] = tuple(int(d.dim_value) for d in dims)
    return found


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for shape inference: nodes and inputs, small integer initializers (shape constants), the
    other initializers declared as inputs of their type and shape."""
    graph = model.graph
    inputs = list(graph.input)
    declared = {v.name for v in inputs}
    small = []
    for t in graph.initializer:
        if t.name in declared:
            continue
        count = int(np.prod(t.dims, dtype=np.int64))
        if (
            t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
            and count <= 64
            and (t.data_location != onnx.TensorProto.EXTERNAL)
        ):
            small.append(t)
        else:
            inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    skeleton_graph = helper.make_graph(list(graph.node), graph.name, inputs, list(graph.output), small)
    skeleton = helper.make_model(skeleton_graph, opset_imports=list(model.opset_import))
    skeleton.ir_version = model.ir_version
    skeleton.functions.extend(model.functions)
    return skeleton
