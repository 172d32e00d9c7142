"""The ``Shape -> Gather(i) -> Unsqueeze(axes=0)`` input of a ``Concat`` onnxruntime's ``ReshapeFusion``
matches (:mod:`.ort_folding` asks :func:`shape_dim_input` for each input of the Concat it fuses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:
    from .ort_folding import _Graph

__all__ = ["shape_dim_input"]


def _unsqueeze_axes(g: _Graph, node: onnx.NodeProto) -> list[int] | None:
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1]:
        return g.int_values(g.canon.get(node.input[1], node.input[1]))
    return None


def _same_shape(g: _Graph, a: str, b: str) -> bool:
    """onnxruntime's ``CompareShape`` of two values' inferred shapes: same rank, each dimension the same
    number or the same symbol."""
    sa, sb = g.info(a), g.info(b)
    if sa is None or sb is None or sa.shape is None or sb.shape is None or len(sa.shape) != len(sb.shape):
        return False
    # a dimension onnx's inference names itself (unk__3) has no name in onnxruntime's graph: never equal
    return all(
        x is not None and x == y and not (isinstance(x, str) and x.startswith("unk__"))
        for x, y in zip(sa.shape, sb.shape, strict=True)
    )


def shape_dim_input(g: _Graph, concat: int, slot: int, root: str, position: int) -> bool:
    """``[root] -> Shape -> Gather(position) -> Unsqueeze(axes=0) -> Concat[slot]``."""
    unsqueeze = g.input_node(concat, slot)
    if not g.is_op(unsqueeze, "Unsqueeze"):
        return False
    gather = g.input_node(unsqueeze, 0)  # type: ignore[arg-type]
    if not g.is_op(gather, "Gather"):
        return False
    shape = g.input_node(gather, 0)  # type: ignore[arg-type]
    if not g.is_op(shape, "Shape"):
        return False
    if _unsqueeze_axes(g, g.nodes[unsqueeze]) != [0]:  # type: ignore[index]
        return False
    gather_inputs = g.inputs[gather]  # type: ignore[index]
    if len(gather_inputs) < 2 or gather_inputs[1] not in g.constant:
        return False
    index = g.value(gather_inputs[1])
    if index is None or index.size != 1 or int(index.reshape(-1)[0]) != position:
        return False
    source = g.inputs[shape][0]  # type: ignore[index]
    return source == root or _same_shape(g, source, root)
