"""Constant indices outside the axis they address, found statically (``dmlshim inspect``).

A gather/scatter node whose indices are an initializer or the output of a Constant node, and whose data
shape is known, can be checked before any run. ONNX makes an index outside ``[-s, s-1]`` (``s`` the size of
the axis it addresses) an error: onnxruntime raises at run time, and DirectML's gathers return undefined
values for it (reads clamped within the buffer, directml-facts.md). Such a node becomes ``error`` with
reason ``INDEX_OUT_OF_RANGE`` naming the first offending index, its position, the axis and its size.

The rules, per the ONNX operators' specifications:

- Gather, GatherElements, Scatter, ScatterElements: every index lies in ``[-s, s-1]``,
  ``s = data.shape[axis]``.
- GatherND: ``indices[..., j]`` lies in ``[-s, s-1]``, ``s = data.shape[batch_dims + j]``.
- ScatterND: ``indices[..., j]`` lies in ``[-s, s-1]``, ``s = data.shape[j]``.

Only the top-level graph's nodes are checked, and only indices the weightless read holds (large external
index tensors are left to the run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..graph import node_path
from .ep_refusals import constant_values
from .plan import NodeTranslation, Reason, Status

if TYPE_CHECKING:  # a session build's constant-folding check reads this module without the translation
    from .model_translation import ModelTranslation

_AXIS_OPS = frozenset({"Gather", "GatherElements", "Scatter", "ScatterElements"})
_TUPLE_OPS = frozenset({"GatherND", "ScatterND"})


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    """The first constant index of a node outside the axis it addresses."""

    tensor: str
    position: tuple[int, ...]
    index: int
    axis: int
    size: int

    def reason(self, op_type: str, data: str) -> Reason:
        where = f"{self.tensor}{list(self.position)}"
        return Reason(
            "INDEX_OUT_OF_RANGE",
            f"constant index {self.index} at {where} addresses axis {self.axis} of {data!r}, of size "
            f"{self.size}: ONNX {op_type} takes indices in [{-self.size}, {self.size - 1}], so onnxruntime "
            "fails the run on it (and DirectML's result for it is undefined)",
            self.index,
        )


def flag_constant_indices(mt: ModelTranslation, graph: onnx.GraphProto) -> ModelTranslation:
    """``mt`` with each top-level node whose constant indices leave their axis marked ``error``
    (reason ``INDEX_OUT_OF_RANGE`` first); ``mt`` itself when there is none."""
    ops = _AXIS_OPS | _TUPLE_OPS
    nodes = {node_path("", n, i): n for i, n in enumerate(graph.node) if n.op_type in ops}
    if not nodes:
        return mt
    changed: list[NodeTranslation] = []
    found = False
    constants = constant_values(graph)  # constant_value's answers in this graph, from one walk
    bounds: dict[str, tuple[int, int] | None] = {}  # by indices: their least and greatest value
    answers: dict[tuple[Any, ...], OutOfRange | None] = {}  # by indices, op, data shape and attributes
    for t in mt.nodes:
        node = nodes.get(t.name)
        bad = (
            _first_out_of_range(t, node, graph, constants, bounds, answers)
            if node is not None and t.domain == ""
            else None
        )
        if bad is None:
            changed.append(t)
            continue
        found = True
        reason = bad.reason(t.op_type, node.input[0])  # type: ignore[union-attr]
        changed.append(dataclasses.replace(t, status=Status.ERROR, reasons=(reason, *t.reasons)))
    return dataclasses.replace(mt, nodes=tuple(changed)) if found else mt


def _first_out_of_range(
    t: NodeTranslation,
    node: onnx.NodeProto,
    graph: onnx.GraphProto,
    constants: Callable[[str], np.ndarray | None],
    bounds: dict[str, tuple[int, int] | None],
    answers: dict[tuple[Any, ...], OutOfRange | None],
) -> OutOfRange | None:
    inputs = node.input  # each field read from protobuf once: a large graph's nodes are many
    if len(inputs) < 2:
        return None
    name = inputs[1]
    if not name:
        return None
    if name not in bounds:
        # constant_value walks every node: the table answers each name once (a 20,000-Gather chain reading
        # one index tensor was quadratic, and a model with a constant index per Gather was too)
        bounds[name] = _bounds(constants(name))
    least_greatest = bounds[name]
    if least_greatest is None:
        return None  # no constant integer indices: first_out_of_range finds none, whatever the node
    shape = _data_shape(t, inputs[0], graph)
    if shape is None:
        return None
    least, greatest = least_greatest
    if shape and -min(shape) <= least and greatest < min(shape):
        return None  # every index lies within every axis of the data: within the one it addresses
    # the answer follows from these alone: nodes reading the same indices alike share it (a chain of
    # 20,000 Gathers of one index tensor checked it 20,000 times)
    key = (name, node.op_type, shape, _attribute(node, "axis", 0), _attribute(node, "batch_dims", 0))
    if key not in answers:
        answers[key] = first_out_of_range(node, shape, constants(name))
    return answers[key]


def _bounds(indices: np.ndarray | None) -> tuple[int, int] | None:
    """The least and greatest of constant indices as :func:`first_out_of_range` reads them (as int64);
    None where it reads none (no value, not integers, empty)."""
    if indices is None or indices.dtype.kind not in "iu" or indices.size == 0:
        return None
    values = indices.astype(np.int64, copy=False)
    return int(values.min()), int(values.max())


def first_out_of_range(
    node: onnx.NodeProto, shape: Sequence[int], indices: np.ndarray | None
) -> OutOfRange | None:
    """The first of ``indices`` (the values of ``node``'s input 1) outside the axis of a data input of
    ``shape`` it addresses, per the ONNX rules above; None: all in range, or not integer indices."""
    if indices is None or indices.dtype.kind not in "iu" or indices.size == 0:
        return None
    indices = indices.astype(np.int64, copy=False)
    for axis, values, positions in _checks(node, shape, indices):
        size = shape[axis]
        bad = np.flatnonzero((values < -size) | (values >= size))
        if bad.size:
            k = int(bad[0])
            position = tuple(int(p) for p in np.unravel_index(k, values.shape)) + positions
            return OutOfRange(node.input[1], position, int(values.flat[k]), axis, size)
    return None


def _checks(
    node: onnx.NodeProto, shape: Sequence[int], indices: np.ndarray
) -> Iterator[tuple[int, np.ndarray, tuple[int, ...]]]:
    """(axis of the data, the index values addressing it, the position suffix of those values)."""
    rank = len(shape)
    if node.op_type in _AXIS_OPS:
        axis = _attribute(node, "axis", 0)
        if -rank <= axis < rank:
            yield axis % rank, indices, ()
        return
    if indices.ndim == 0:
        return
    batch = _attribute(node, "batch_dims", 0) if node.op_type == "GatherND" else 0
    depth = indices.shape[-1]
    if batch < 0 or batch + depth > rank:
        return  # a malformed node: its own translation says so
    for j in range(depth):
        yield batch + j, indices[..., j], (j,)


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _data_shape(t: NodeTranslation, name: str, graph: onnx.GraphProto) -> tuple[int, ...] | None:
    """The data input's (``name``) static shape: from the translation's plan, else as the graph declares
    it."""
    for b in t.inputs:
        if b.onnx_index == 0:
            return tuple(b.onnx_shape)
    for init in graph.initializer:
        if init.name == name:
            return tuple(init.dims)
    for vi in (*graph.input, *graph.value_info):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return tuple(d.dim_value for d in dims)
            return None
    return None
