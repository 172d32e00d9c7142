"""ScatterND 11/13/16/18 -> DML_OPERATOR_SCATTER_ND.

The DML EP's rule (facts §5): D = max(r, q, rank(updates)), InputDimensionCount = r,
IndicesDimensionCount = q. DirectML has no scatter reduction: reduction != "none" falls back.
"""

from __future__ import annotations

from typing import ClassVar

from ...dml.enums import OperatorType
from ...dml.symbolic import any_differ, is_symbolic
from .base import (
    ConvertContext,
    Converter,
    Implementations,
    Lowering,
    Target,
    View,
    check_common,
    inexpressible,
    malformed,
    read_inputs,
    scatter_implementations,
)
from .gather_nd import nd_shapes, nd_view

OP = OperatorType.SCATTER_ND


class ScatterNDConverter(Converter):
    """ONNX ScatterND: output = data; output[indices[i..]] = updates[i..]."""

    op_type = "ScatterND"
    OPERATORS: ClassVar[tuple[OperatorType, ...]] = (OP,)

    def _lower(self, ctx: ConvertContext) -> Lowering:
        (data_shape, data_elem), (idx_shape, _), (upd_shape, _) = read_inputs(ctx, updates=True)
        if data_shape and idx_shape and idx_shape[-1] == 0 and not is_symbolic(idx_shape[-1]):
            _empty_tuples(idx_shape, data_shape, upd_shape)
        k, expected = nd_shapes(ctx, data_shape, idx_shape, 0)
        if any_differ(upd_shape, expected):
            raise malformed(
                "UPDATES_SHAPE_INVALID",
                f"ScatterND updates must have shape indices.shape[:-1] + data.shape[k:] = {list(expected)}, "
                f"not {list(upd_shape)}",
                list(upd_shape),
            )
        shapes = {"data": data_shape, "indices": idx_shape, "updates": upd_shape, "output": data_shape}
        check_common(ctx, shapes)
        target = Target.plan(ctx, OP, data_elem, shapes)

        def build(merge: bool) -> View:
            inp, idx, upd, _ = nd_view(data_shape, idx_shape, upd_shape, 0, k, target.data.pairs, merge)
            fields = (("InputDimensionCount", len(inp)), ("IndicesDimensionCount", len(idx)))
            return View(inp, idx, inp, updates=upd, fields=fields)

        return target.lower(build, lambda v: max(v.ranks), index_bounds=data_shape[:k], per_component=True)

    IMPLEMENTATIONS: ClassVar[Implementations] = scatter_implementations(_lower)


def _empty_tuples(
    idx_shape: tuple[int, ...], data_shape: tuple[int, ...], upd_shape: tuple[int, ...]
) -> None:
    """A ScatterND whose index tuples have 0 coordinates: valid ONNX (each update replaces the whole data
    tensor, as onnxruntime's CPU kernel computes it), but DirectML's SCATTER_ND takes tuples of 1 to
    InputDimensionCount coordinates: always a fallback (or malformed when the updates do not fit)."""
    expected = idx_shape[:-1] + data_shape
    if any_differ(upd_shape, expected):
        raise malformed(
            "UPDATES_SHAPE_INVALID",
            f"ScatterND updates must have shape indices.shape[:-1] + data.shape = {list(expected)} when the "
            f"last dim of indices is 0, not {list(upd_shape)}",
            list(upd_shape),
        )
    raise inexpressible(
        "INDEX_TUPLE_EMPTY",
        f"the last dim of indices {list(idx_shape)} is 0: every index tuple is empty and each update "
        "replaces the whole data tensor; DirectML's SCATTER_ND takes tuples of 1 or more coordinates, so the "
        "node runs on the CPU",
        list(idx_shape),
    )
