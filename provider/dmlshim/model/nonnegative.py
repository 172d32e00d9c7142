"""Integer tensors a graph makes non-negative by construction, proved from the graph alone.

A gather's indices that can never be negative select, wherever onnxruntime accepts them (its CPU Gather
and GatherElements refuse an index outside ``[-dim, dim)``), exactly the elements DirectML's GATHER and
GATHER_ELEMENTS select: negative indices are the only place the two definitions part. The whole-model
check uses this to take such a gather's output from onnxruntime without fetching its inputs (see
:mod:`dmlshim.execute.proofs.gather_given`).

The proof follows a value back through operators that only move, repeat or select elements of their
data input (Expand, Reshape, Transpose, Slice, a gather's data, ...) to a source that cannot be negative:
a Clip whose bounds are both proved non-negative (its ``min`` alone when it has no ``max``: ONNX's Clip is
``min(max(x, lo), hi)``, so when ``lo > hi`` every element is ``hi``), a Max with one input proved
non-negative, Relu, an index-producing operator (ArgMax, TopK's indices, NonZero, Shape, Size), a Range
from a non-negative start by a non-negative step, or a constant whose elements are all non-negative.
Anything else, a graph input included, is not proved; so is an initializer that is also a graph input
(the caller may feed it any value). Casts count only when they cannot wrap (to a wider or equal signed
type from a smaller or equal one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

MOVES_FIRST_INPUT = frozenset(
    (
        "Expand",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Identity",
        "Transpose",
        "Tile",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
    )
)
"""Operators whose output elements are all elements of their first input."""

ALWAYS_NONNEGATIVE = {
    "ArgMax": (0,),
    "ArgMin": (0,),
    "NonZero": (0,),
    "Shape": (0,),
    "Size": (0,),
    "TopK": (1,),
    "Relu": (0,),
}
"""Operators whose listed outputs cannot hold a negative value (Relu: max(x, 0) of any type)."""

_INT_BITS: dict[int, tuple[int, bool]] = {
    TensorProto.BOOL: (1, False),
    TensorProto.UINT8: (8, False),
    TensorProto.UINT16: (16, False),
    TensorProto.UINT32: (32, False),
    TensorProto.INT8: (8, True),
    TensorProto.INT16: (16, True),
    TensorProto.INT32: (32, True),
    TensorProto.INT64: (64, True),
}

MAX_CONSTANT_ELEMENTS = 1 << 16
"""Larger constants are not read for the proof (their values are weights, not index arithmetic)."""


def _constant_nonnegative(tensor: onnx.TensorProto) -> bool:
    if tensor.data_location == TensorProto.EXTERNAL or tensor.data_type not in _INT_BITS:
        return False
    if int(np.prod(tensor.dims, dtype=np.int64)) > MAX_CONSTANT_ELEMENTS:
        return False
    values = numpy_helper.to_array(tensor)
    return bool(values.size == 0 or values.min() >= 0)


def _cast_keeps_sign(source: int | None, target: int) -> bool:
    """A Cast from ``source`` to ``target`` maps every non-negative value to a non-negative value."""
    if source is None or source not in _INT_BITS or target not in _INT_BITS:
        return False
    (src_bits, src_signed), (dst_bits, dst_signed) = _INT_BITS[source], _INT_BITS[target]
    if not dst_signed:
        return True
    return dst_bits > src_bits or (dst_bits == src_bits and src_signed)


def nonnegative_prover(
    graph: onnx.GraphProto,
    constants: Mapping[str, onnx.TensorProto],
    elem_types: Mapping[str, int],
) -> Callable[[str], bool]:
    """A function answering, for a value name of ``graph``'s top level, whether every element of it is
    non-negative by construction (see the module docstring). ``constants``: initializers and Constant
    outputs by name; ``elem_types``: the element type of a value where known (for Cast)."""
    producer = {out: node for node in graph.node for out in node.output if out}
    # An initializer that is also a graph input is a default the caller may override with any value
    # (from IR version 4; before, it is a constant, but proving less is never wrong).
    fed = {v.name for v in graph.input}
    constants = {name: t for name, t in constants.items() if name not in fed}
    memo: dict[str, bool] = {}

    def constant_at_least_zero(name: str) -> bool:
        tensor = constants.get(name)
        return tensor is not None and _constant_nonnegative(tensor)

    def proved(name: str, depth: int = 0) -> bool:
        if name in memo:
            return memo[name]
        memo[name] = False  # a cycle (invalid anyway) or a deep chain proves nothing
        if depth > 64:
            return False
        result = _proved(name, depth)
        memo[name] = result
        return result

    def _proved(name: str, depth: int) -> bool:
        if name in constants:
            return constant_at_least_zero(name)
        node = producer.get(name)
        if node is None or node.domain not in ("", "ai.onnx"):
            return False
        op, inputs = node.op_type, list(node.input)
        position = list(node.output).index(name)
        if op in ALWAYS_NONNEGATIVE:
            return position in ALWAYS_NONNEGATIVE[op]
        if op in MOVES_FIRST_INPUT:
            return position == 0 and bool(inputs) and proved(inputs[0], depth + 1)
        if op == "Concat":
            return all(proved(i, depth + 1) for i in inputs if i)
        if op == "Where":
            return len(inputs) == 3 and proved(inputs[1], depth + 1) and proved(inputs[2], depth + 1)
        if op == "Clip":
            return clip_nonnegative(node, inputs, depth)
        if op == "Max":  # at least its largest input: one input proved non-negative is enough
            return any(proved(i, depth + 1) for i in inputs if i)
        if op == "Range":  # start, start + delta, ...: never below start when delta is not negative
            return len(inputs) == 3 and proved(inputs[0], depth + 1) and proved(inputs[2], depth + 1)
        if op == "Min":
            return all(proved(i, depth + 1) for i in inputs if i)
        if op == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            return (
                to is not None
                and _cast_keeps_sign(elem_types.get(inputs[0]), int(to))
                and proved(inputs[0], depth + 1)
            )
        return False

    def clip_nonnegative(node: onnx.NodeProto, inputs: list[str], depth: int) -> bool:
        """Clip is ``min(max(x, lo), hi)`` (onnxruntime's too): at least ``min(lo, hi)``; with no ``hi``,
        at least ``lo``. Both bounds must be proved, as ``Clip(min=0, max=-1)`` gives -1 everywhere."""
        bounds = {a.name: a.f for a in node.attribute if a.name in ("min", "max")}
        if bounds:  # Clip before opset 11: the bounds are attributes (max defaults to the largest float)
            return "min" in bounds and bounds["min"] >= 0 and bounds.get("max", 0.0) >= 0
        lo = inputs[1] if len(inputs) > 1 else ""
        hi = inputs[2] if len(inputs) > 2 else ""
        return bool(lo) and proved(lo, depth + 1) and (not hi or proved(hi, depth + 1))

    return proved
