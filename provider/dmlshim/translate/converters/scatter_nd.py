"""ScatterND 11/13/16/18 -> DML_OPERATOR_SCATTER_ND.

The DML EP's rule (facts §5): D = max(r, q, rank(updates)), InputDimensionCount = r,
IndicesDimensionCount = q. DirectML has no scatter reduction: reduction != "none" falls back.
"""

from __future__ import annotations

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
    check_reduction,
    choose_view,
    malformed,
    plan_data,
    require_operator,
)
from .gather_nd import nd_shapes, nd_view

OP = OperatorType.SCATTER_ND


class ScatterNDConverter(Converter):
    """ONNX ScatterND: output = data; output[indices[i..]] = updates[i..]."""

    op_type = "ScatterND"

    def _impl_v11(self, ctx: ConvertContext) -> Lowering:
        return self._lower(ctx)

    def _impl_v13(self, ctx: ConvertContext) -> Lowering:
        # Opset 13 only adds bfloat16, which DirectML cannot hold.
        return self._lower(ctx)

    def _impl_v16(self, ctx: ConvertContext) -> Lowering:
        # Opset 16 adds reduction add/mul.
        check_reduction(ctx)
        return self._lower(ctx)

    def _impl_v18(self, ctx: ConvertContext) -> Lowering:
        # Opset 18 adds reduction max/min.
        check_reduction(ctx)
        return self._lower(ctx)

    IMPLEMENTATIONS: ClassVar[Implementations] = {11: _impl_v11, 13: _impl_v13, 16: _impl_v16, 18: _impl_v18}

    def _lower(self, ctx: ConvertContext) -> Lowering:
        data_shape, data_elem = ctx.tensor(0, "data")
        idx_shape, idx_elem = ctx.tensor(1, "indices")
        upd_shape, upd_elem = ctx.tensor(2, "updates")
        check_index_type(ctx, idx_elem, ctx.input_names[1])
        if upd_elem != data_elem:
            raise malformed("TYPE_MISMATCH", "ScatterND updates must have data's type", upd_elem)
        k, expected = nd_shapes(ctx, data_shape, idx_shape, 0)
        if upd_shape != expected:
            raise malformed(
                "UPDATES_SHAPE_INVALID",
                f"ScatterND updates must have shape indices.shape[:-1] + data.shape[k:] = {list(expected)}, "
                f"not {list(upd_shape)}",
                list(upd_shape),
            )
        shapes = {"data": data_shape, "indices": idx_shape, "updates": upd_shape, "output": data_shape}
        check_common(ctx, shapes)
        require_operator(ctx, OP)
        data = plan_data(ctx, OP, data_elem, "data")

        def build(merge: bool) -> View:
            inp, idx, upd, _ = nd_view(data_shape, idx_shape, upd_shape, 0, k, data.pairs, merge)
            fields = (("InputDimensionCount", len(inp)), ("IndicesDimensionCount", len(idx)))
            return View(inp, idx, inp, updates=upd, fields=fields)

        view, layout, d = choose_view(ctx, OP, build, lambda v: max(v.ranks), extended=data.pairs)
        return build_lowering(
            ctx,
            OP,
            view,
            layout,
            d,
            data,
            onnx_shapes=shapes,
            index_elem=idx_elem,
            index_bounds=data_shape[:k],
            per_component=True,
        )
