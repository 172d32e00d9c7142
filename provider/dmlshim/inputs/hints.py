"""Sizes a model was traced at: candidate symbol sizes read from the constants of the graph.

A traced export (``torch.onnx.export`` with the TorchScript exporter, among others) can bake the sizes of
the example inputs into constants while declaring the inputs' dimensions symbolic. Such a model runs only
at those sizes: GPT-NeoX reshapes ``Range(0, seq, 1)`` to a constant ``[6, 1]`` (so ``seq`` must be 6),
Funnel computes GatherElements indices from a float constant ``8.0`` (the traced ``seq``), and any other
size gives a Reshape of the wrong element count or an index out of range. No trace of the indices finds
these relations, so the sizes are read from the constants and tried as candidates:

* the target shape of a Reshape (each entry above 1, and their product when no entry is 0 or -1), and the
  shape given to Expand, Tile and ConstantOfShape (each entry above 1);
* a scalar (one-element) constant with an integer value above 1, integer or floating point, that feeds
  arithmetic, a comparison or a Range (where a traced length is used).

Sizes come back smallest first, at most :data:`MAX_HINTS` of them and none above :data:`MAX_HINT`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import constant_node_shape, constant_node_value, walk_nodes

__all__ = ["MAX_HINT", "MAX_HINTS", "size_hints"]

MAX_HINTS = 24
"""Most hinted sizes returned (the smallest ones)."""
MAX_HINT = 4096
"""Largest size taken as a hint (bigger constants are vocabulary or hidden sizes, not traced lengths)."""

_SHAPE_INPUT = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}
_SCALAR_USERS = frozenset(
    {"Add", "Sub", "Mul", "Div", "Range", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal",
     "Min", "Max", "Mod"}
)  # fmt: skip
_COPIES = frozenset({"Cast", "CastLike", "Identity", "QuantizeLinear", "DequantizeLinear"})


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small constants of the graph and its subgraphs: initializers stored inline and Constant nodes."""
    found: dict[str, np.ndarray] = {}

    def keep(name: str, tensor: onnx.TensorProto) -> None:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or math.prod(tensor.dims) > 64:
            return
        try:
            found[name] = numpy_helper.to_array(tensor)
        except Exception:  # an unusual element type: not a size anyway
            return

    for tensor in model.graph.initializer:
        keep(tensor.name, tensor)
    for _, node in walk_nodes(model.graph):
        shape = constant_node_shape(node)
        if shape is not None and math.prod(shape) <= 64:
            try:
                value = constant_node_value(node)
            except Exception:  # an unusual element type: not a size anyway
                continue
            if value is not None:
                found[node.output[0]] = value
    return found


def _integer(value: np.ndarray) -> int | None:
    """The integer a one-element numeric constant holds, else None."""
    if value.size != 1 or value.dtype.kind not in "iuf":
        return None
    number = float(value.reshape(-1)[0])
    return int(number) if math.isfinite(number) and number == int(number) else None


def _from_shape(value: np.ndarray, with_product: bool) -> Iterable[int]:
    if value.dtype.kind not in "iu" or value.ndim != 1:
        return ()
    entries = [int(v) for v in value]
    sizes = [v for v in entries if v > 1]
    if with_product and entries and all(v > 0 for v in entries):
        sizes.append(math.prod(entries))
    return sizes


def size_hints(model: onnx.ModelProto, constants: Mapping[str, np.ndarray] | None = None) -> tuple[int, ...]:
    """Candidate sizes for symbolic dimensions, read from the model's constants (see the module doc).

    Args:
        model: the model (external weights are never read).
        constants: the small constants by name, when the caller has them already.
    """
    values = constants if constants is not None else _constant_values(model)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for _, node in walk_nodes(model.graph):
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    sizes: set[int] = set()
    for _, node in walk_nodes(model.graph):
        pos = _SHAPE_INPUT.get(node.op_type)
        if pos is not None and len(node.input) > pos and node.input[pos] in values:
            sizes.update(_from_shape(values[node.input[pos]], node.op_type == "Reshape"))
    for name, value in values.items():
        number = _integer(value)
        if number is not None and 1 < number <= MAX_HINT and _reaches_arithmetic(name, consumers):
            sizes.add(number)
    return tuple(sorted(s for s in sizes if 1 < s <= MAX_HINT)[:MAX_HINTS])


def _reaches_arithmetic(name: str, consumers: Mapping[str, list[onnx.NodeProto]]) -> bool:
    """Whether a value feeds arithmetic, a comparison or a Range, directly or through copies."""
    seen = {name}
    frontier = [name]
    for _ in range(6):
        following: list[str] = []
        for value in frontier:
            for node in consumers.get(value, ()):
                if node.op_type in _SCALAR_USERS:
                    return True
                if node.op_type in _COPIES and node.input and node.input[0] == value:
                    following.extend(o for o in node.output[:1] if o and o not in seen)
        seen.update(following)
        frontier = following
    return False
