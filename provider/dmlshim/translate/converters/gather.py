"""Gather 1/11/13 -> DML_OPERATOR_GATHER.

The DML EP's rule (facts §5): D = max(r, q, r+q-1), Axis = axis + (D - r), IndexDimensions = q.
"""

from __future__ import annotations

import math
from typing import ClassVar

from ...dml.enums import OperatorType
from .base import (
    ConvertContext,
    Converter,
    Implementations,
    Lowering,
    View,
    build_lowering,
    check_common,
    check_index_type,
    choose_view,
    malformed,
    normalize_axis,
    plan_data,
    require_operator,
)

OP = OperatorType.GATHER


def _dimension_count(view: View) -> int:
    return max(view.ranks)


class GatherConverter(Converter):
    """ONNX Gather: output = data[:axis] + indices.shape + data[axis+1:]."""

    op_type = "Gather"

    def _impl_v1(self, ctx: ConvertContext) -> Lowering:
        # Gather-1 defines only indices in [0, s-1]; onnxruntime wraps negatives anyway and so do we.
        return self._lower(ctx)

    def _impl_v11(self, ctx: ConvertContext) -> Lowering:
        # Opset 11: negative indices count from the end of the axis.
        return self._lower(ctx)

    def _impl_v13(self, ctx: ConvertContext) -> Lowering:
        # Opset 13 only adds bfloat16, which DirectML cannot hold (plan_data falls back).
        return self._lower(ctx)

    IMPLEMENTATIONS: ClassVar[Implementations] = {1: _impl_v1, 11: _impl_v11, 13: _impl_v13}

    def _lower(self, ctx: ConvertContext) -> Lowering:
        # 1. read the inputs
        data_shape, data_elem = ctx.tensor(0, "data")
        idx_shape, idx_elem = ctx.tensor(1, "indices")
        # 2. check
        check_index_type(ctx, idx_elem, ctx.input_names[1])
        r, q = len(data_shape), len(idx_shape)
        if r < 1:
            raise malformed("RANK_INVALID", "Gather data must have rank >= 1", r)
        axis = normalize_axis(ctx, r)
        out_shape = data_shape[:axis] + idx_shape + data_shape[axis + 1 :]
        shapes = {"data": data_shape, "indices": idx_shape, "output": out_shape}
        check_common(ctx, shapes)
        require_operator(ctx, OP)
        data = plan_data(ctx, OP, data_elem, "data")
        pair = (2,) if data.pairs else ()

        # 3. compute the DirectML sizes
        def build(merge: bool) -> View:
            if not merge:
                return View(
                    data_shape + pair,
                    idx_shape,
                    out_shape + pair,
                    axis=axis,
                    fields=(("IndexDimensions", q),),
                )
            # Gather treats all dims before the axis alike, and all after it; the index dims are one list.
            pre = math.prod(data_shape[:axis])
            post = math.prod(data_shape[axis + 1 :]) * (2 if data.pairs else 1)
            n = data_shape[axis]
            idx = (math.prod(idx_shape),) if q else ()
            fields = (("IndexDimensions", len(idx)),)
            return View((pre, n, post), idx, (pre, *idx, post), axis=1, fields=fields)

        view, layout, d = choose_view(ctx, OP, build, _dimension_count, extended=data.pairs)
        # 4. fill the descriptor
        return build_lowering(
            ctx,
            OP,
            view,
            layout,
            d,
            data,
            onnx_shapes=shapes,
            index_elem=idx_elem,
            index_bounds=(data_shape[axis],),
            per_component=False,
            attributes=(("axis", axis),),
        )
