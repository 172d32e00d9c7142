"""Nodes onnxruntime's constant folding leaves although every input is constant, because the CPU kernel it
would run fails or does not exist (:mod:`.ort_folding` asks these before folding a node)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:
    from .ort_folding import _Graph

__all__ = ["INDEXED", "index_out_of_range", "no_cpu_kernel"]


INDEXED = frozenset({"Gather", "GatherElements"})


def index_out_of_range(g: _Graph, i: int) -> bool:
    """A Gather/GatherElements of constants with an index out of ``[-dim, dim-1]`` on its axis (its values
    and the data's shape known): onnxruntime's CPU kernel refuses it when constant folding runs it, so
    the node is not folded (it fails when the session runs it)."""
    names = g.inputs[i]
    if len(names) < 2 or not names[0] or not names[1]:
        return False
    found = g.info(names[0])
    dims = found.static_dims if found is not None else None
    indices = g.value(names[1], limit=1 << 16)
    if dims is None or indices is None or indices.dtype.kind not in "iu" or not dims:
        return False
    axis = next((a.i for a in g.nodes[i].attribute if a.name == "axis"), 0)
    if not -len(dims) <= axis < len(dims):
        return False
    dim = dims[axis]
    return bool(indices.size) and bool(((indices < -dim) | (indices >= dim)).any())


_MOVES = frozenset(
    {
        "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
        "Cast", "Shape", "Size", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
    }
)  # fmt: skip
# the ops onnxruntime CPU folds for a 16-bit float (1.32, tests/test_inspect_folding_hostile53.py); the
# others (Add, Mul, Floor, Sqrt, Where, Tile, ReduceSum, ...) have no CPU kernel of the type: not folded
_HALF_FOLDED = {
    onnx.TensorProto.FLOAT16: _MOVES | {"Expand", "Round", "Min", "Max", "Sign", "Clip"},
    onnx.TensorProto.BFLOAT16: _MOVES | {"Sign"},
}
_NARROW_FLOATS = frozenset(
    {
        onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
        onnx.TensorProto.FLOAT8E5M2FNUZ,
    }
)  # fmt: skip


def no_cpu_kernel(g: _Graph, i: int) -> bool:
    """Whether onnxruntime CPU has no kernel for the node's 16-bit or 8-bit float inputs or outputs (by
    their inferred types), so constant folding leaves it."""
    op = g.ops[i]
    for name in (*g.inputs[i], *g.outs[i]):
        found = g.info(name) if name else None
        t = found.elem_type if found is not None else 0
        if t in _HALF_FOLDED and op not in _HALF_FOLDED[t]:
            return True
        if t in _NARROW_FLOATS and op not in _MOVES:
            return True
    return False
