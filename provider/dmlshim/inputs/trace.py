"""Tracing index values back to the graph inputs they come from (see :mod:`dmlshim.inputs.constraints`).

Besides the graph input, its offset and whether it *is* the indices tensor, a trace keeps track of which
component of an index tuple (the last dimension of GatherND/ScatterND indices) the input's values land in.
tf2onnx's ``unsorted_segment_sum`` builds ScatterND indices as ``Concat(Unsqueeze(ids, -1),
Unsqueeze(positions, -1), axis=-1)``: every id is component 0, so it must stay inside data dimension 0,
whatever the other dimensions are. The component is followed through the ops that keep the last axis
(Identity, Cast, an offset), Unsqueeze of a new last axis and Reshape to a last dimension of 1 (all
values in one component), and Concat along the last axis (the position of the input tells the
components); any other op on the way leaves the component unknown (every dimension then bounds the
value, as before).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper

__all__ = ["Component", "Shapes", "Traced", "attr", "int_scalar", "trace"]

# Ops whose output values are a subset (or a copy) of the values of the listed inputs.
_VALUE_PRESERVING: Mapping[str, tuple[int, ...]] = {
    "Identity": (0,),
    "Cast": (0,),
    "CastLike": (0,),
    "Reshape": (0,),
    "Unsqueeze": (0,),
    "Squeeze": (0,),
    "Flatten": (0,),
    "Transpose": (0,),
    "Expand": (0,),
    "Slice": (0,),
    "Split": (0,),
    "Tile": (0,),
    "Concat": (),  # every input
    "Gather": (0,),
    "GatherElements": (0,),
    "GatherND": (0,),
    "Where": (1, 2),
    "Scatter": (0, 2),
    "ScatterElements": (0, 2),
    "ScatterND": (0, 2),
    "TopK": (0,),
    "Unique": (0,),
}
# Ops of which only the first output holds input values (TopK's and Unique's others are positions/counts).
_FIRST_OUTPUT_ONLY = frozenset({"TopK", "Unique"})
# The subset of the above that keeps shape and layout (the graph input *is* the indices tensor).
_LAYOUT_PRESERVING = frozenset({"Identity", "Cast"})

_PASS_THROUGH = frozenset({"Identity", "Cast", "CastLike"})
_NEGATIVE_TESTS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})

Shapes = Mapping[str, tuple[int | None, ...]]


@dataclass(frozen=True)
class Component:
    """Where a traced tensor's values sit in an index tuple.

    ``single``: every value is component ``start``; otherwise position ``p`` of the tensor's last axis is
    component ``start + p``. None (the unknown case) is used instead of a Component.
    """

    start: int
    single: bool = False


@dataclass(frozen=True)
class Traced:
    """A graph input whose values reach an indices tensor."""

    source: str
    offset: int
    direct: bool
    component: Component | None
    scale: int = 1
    """The input's value (plus ``offset``) is multiplied by this before it is an index: the leading digit
    of a flattened multi-index ``i * n + j``."""
    cap: int | None = None
    """The input's value plus ``offset`` must stay below this as well: the trailing digit ``j`` of
    ``i * n + j`` must stay in ``[0, n)``."""


def int_scalar(value: np.ndarray | None) -> int | None:
    """The single integer a constant holds (every element equal), else None."""
    if value is None or value.size == 0 or value.dtype.kind not in "iu":
        return None
    first = value.reshape(-1)[0]
    return int(first) if bool(np.all(value == first)) else None


def attr(node: onnx.NodeProto, name: str, default: object) -> object:
    """A node attribute's value (strings decoded), or ``default``."""
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _strip(name: str, producers: Mapping[str, onnx.NodeProto]) -> str:
    """``name`` with Identity/Cast producers skipped (the value they copy)."""
    for _ in range(64):
        node = producers.get(name)
        if node is None or node.op_type not in _PASS_THROUGH or not node.input:
            return name
        name = node.input[0]
    return name


def _normalised_branch(node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto]) -> str | None:
    """The plain branch of a negative-index normalisation ``Where(c, x + n, x)`` (or ``Where(c, x,
    x + n)``, or ``x - n``): the two branches are one value ``x`` and ``x`` plus or minus something, and
    the condition compares ``x``. None for any other Where (both branches are then real uses)."""
    cond, first, second = node.input
    tested = producers.get(_strip(cond, producers))
    if tested is None or tested.op_type not in _NEGATIVE_TESTS:
        return None
    compared = {_strip(i, producers) for i in tested.input}
    for shifted, plain in ((first, second), (second, first)):
        base = _strip(plain, producers)
        add = producers.get(_strip(shifted, producers))
        if add is None or add.op_type not in ("Add", "Sub") or len(add.input) != 2:
            continue
        operands = [_strip(i, producers) for i in add.input]
        if base in operands and (add.op_type == "Add" or operands[0] == base) and base in compared:
            return plain
    return None


def _one_sided(node: onnx.NodeProto) -> bool:
    """Whether a Clip has at most one bound: inputs ``min``/``max`` from opset 11, attributes before."""
    inputs = [i for i in node.input[1:3] if i]
    attributes = [a.name for a in node.attribute if a.name in ("min", "max")]
    return len(inputs) + len(attributes) < 2


def _axes(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> list[int] | None:
    """Unsqueeze/Squeeze axes: the second input from opset 13, the attribute before; None if unknown."""
    if len(node.input) > 1 and node.input[1]:
        value = constants.get(node.input[1])
        return None if value is None else [int(v) for v in value.reshape(-1)]
    found = attr(node, "axes", None)
    return [int(v) for v in found] if isinstance(found, (list, tuple)) else None


def _rank(name: str, shapes: Shapes) -> int | None:
    shape = shapes.get(name)
    return None if shape is None else len(shape)


def _last(name: str, shapes: Shapes) -> int | None:
    shape = shapes.get(name)
    return shape[-1] if shape else None


def _input_component(
    node: onnx.NodeProto,
    pos: int,
    out: str,
    component: Component | None,
    shapes: Shapes,
    constants: Mapping[str, np.ndarray],
) -> Component | None:
    """Where the values of ``node.input[pos]`` sit, given where those of its output ``out`` sit."""
    if component is None or component.single:
        return component  # every value of the output is in one component: so is every value it copies
    op = node.op_type
    if op in _PASS_THROUGH:
        return component
    if op == "Unsqueeze":
        rank = _rank(out, shapes)
        axes = _axes(node, constants)
        if rank is None or axes is None:
            return None
        new = {a + rank if a < 0 else a for a in axes}
        return Component(component.start, single=True) if rank - 1 in new else component
    if op == "Squeeze":
        rank = _rank(node.input[0], shapes)
        axes = _axes(node, constants)
        if rank is None or axes is None:
            return None
        return None if rank - 1 in {a + rank if a < 0 else a for a in axes} else component
    if op == "Reshape":
        out_last, in_last = _last(out, shapes), _last(node.input[0], shapes)
        if out_last == 1:
            return Component(component.start, single=True)
        return component if out_last is not None and out_last == in_last else None
    if op == "Concat":
        rank = _rank(out, shapes)
        axis = int(attr(node, "axis", 0))  # type: ignore[call-overload]
        if rank is None:
            return None
        if (axis + rank if axis < 0 else axis) != rank - 1:
            return component  # joined along another axis: the last one is unchanged
        start = component.start
        for earlier in node.input[:pos]:
            width = _last(earlier, shapes)
            if width is None:
                return None
            start += width
        return Component(start)
    return None


def _size_value(name: str, producers: Mapping[str, onnx.NodeProto], constants: Mapping[str, np.ndarray],
                shapes: Shapes) -> int | None:  # fmt: skip
    """A positive integer scalar known before the run: a constant, or one static dim read by
    ``Gather(Shape(x), k)`` (through Cast/Identity)."""
    name = _strip(name, producers)
    found = int_scalar(constants.get(name))
    if found is not None:
        return found if found > 0 else None
    node = producers.get(name)
    if node is None or node.op_type != "Gather" or len(node.input) != 2:
        return None
    shape_node = producers.get(_strip(node.input[0], producers))
    k = int_scalar(constants.get(node.input[1]))
    if shape_node is None or shape_node.op_type != "Shape" or k is None or shape_node.attribute:
        return None
    dims = shapes.get(shape_node.input[0])
    if dims is None or not -len(dims) <= k < len(dims):
        return None
    dim = dims[k]
    return dim if dim is not None and dim > 0 else None


def _flattened(
    node: onnx.NodeProto,
    graph_inputs: set[str],
    producers: Mapping[str, onnx.NodeProto],
    constants: Mapping[str, np.ndarray],
    shapes: Shapes,
    depth: int,
) -> Iterator[Traced]:
    """``Add(j, Mul(i, n))`` (either order) with ``n`` known: a multi-index flattened into one (torch's
    advanced indexing over several dims). ``i`` is scaled by ``n`` and ``j`` stays in ``[0, n)``."""
    for digit, product in (node.input, tuple(reversed(node.input))):
        mul = producers.get(_strip(product, producers))
        if mul is None or mul.op_type != "Mul" or len(mul.input) != 2:
            continue
        for lead, factor in (mul.input, tuple(reversed(mul.input))):
            n = _size_value(factor, producers, constants, shapes)
            if n is None:
                continue
            for t in trace(lead, graph_inputs, producers, constants, shapes, None, 0, False, depth + 1):
                yield replace(t, scale=t.scale * n)
            for t in trace(digit, graph_inputs, producers, constants, shapes, None, 0, False, depth + 1):
                yield replace(t, cap=n if t.cap is None else min(t.cap, n))
            return


def trace(
    name: str,
    graph_inputs: set[str],
    producers: Mapping[str, onnx.NodeProto],
    constants: Mapping[str, np.ndarray],
    shapes: Shapes,
    component: Component | None = Component(0),
    offset: int = 0,
    direct: bool = True,
    depth: int = 0,
) -> Iterator[Traced]:
    """Every graph input whose values reach ``name``, with its offset, whether it is ``name`` itself
    (same shape and layout) and the index-tuple component its values sit in (None when not known)."""
    if depth > 64:
        return
    if name in graph_inputs:
        yield Traced(name, offset, direct, component)
        return
    node = producers.get(name)
    if node is None:
        return
    op = node.op_type
    if op in ("Add", "Sub") and len(node.input) == 2:
        left, right = node.input
        args = (graph_inputs, producers, constants, shapes, component)
        c_right = int_scalar(constants.get(right))
        c_left = int_scalar(constants.get(left))
        if op == "Add" and c_right is None and c_left is None and offset == 0:
            yield from _flattened(node, graph_inputs, producers, constants, shapes, depth)
            return
        if c_right is not None:
            delta = c_right if op == "Add" else -c_right
            yield from trace(left, *args, offset + delta, False, depth + 1)
        elif c_left is not None and op == "Add":
            yield from trace(
                right,
                graph_inputs,
                producers,
                constants,
                shapes,
                component,
                offset + c_left,
                False,
                depth + 1,
            )
        return
    if op == "Where" and len(node.input) == 3:
        plain = _normalised_branch(node, producers)
        if plain is not None:
            # Where(idx < 0, idx + n, idx): a negative index wrapped; the index is idx itself.
            yield from trace(
                plain, graph_inputs, producers, constants, shapes, component, offset, direct, depth + 1
            )
            return
    if op == "Clip" and node.input and _one_sided(node):
        # Clip(idx, min=0) (torch.clamp(min=0)) leaves every value above the bound as it is: the index is
        # still bounded by the dimension it addresses. A Clip with both bounds makes any value valid.
        yield from trace(
            node.input[0], graph_inputs, producers, constants, shapes, component, offset, False, depth + 1
        )
        return
    if op == "If":
        # Output k of an If is output k of the branch that runs: the values of either branch's.
        k = list(node.output).index(name)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH and k < len(a.g.output):
                yield from trace(
                    a.g.output[k].name, graph_inputs, producers, constants, shapes, component, offset, False,
                    depth + 1,
                )  # fmt: skip
        return
    if op not in _VALUE_PRESERVING or (op in _FIRST_OUTPUT_ONLY and name != node.output[0]):
        return
    positions = _VALUE_PRESERVING[op] or tuple(range(len(node.input)))
    keeps = direct and op in _LAYOUT_PRESERVING
    for pos in positions:
        if pos < len(node.input) and node.input[pos]:
            inner = _input_component(node, pos, name, component, shapes, constants)
            yield from trace(
                node.input[pos], graph_inputs, producers, constants, shapes, inner, offset, keeps, depth + 1
            )
