"""Scatter 9/11 (deprecated) and ScatterElements 11/13/16/18 -> DML_OPERATOR_SCATTER (= SCATTER_ELEMENTS).

The DML EP's rule (facts §5): D = max(r, 4) (this family alone is padded to at least 4 dimensions),
Axis = axis + (D - r). DirectML has no scatter reduction: reduction != "none" falls back.

Indices smaller than data on non-axis dimensions: the scatter runs on a window of data (InputTensor
strided over data, OutputTensor the window), and the host writes the window back into a copy of data,
because DirectML's OutputTensor must have InputTensor's Sizes.
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
    malformed,
    normalize_axis,
    plan_data,
    require_operator,
)
from .gather_elements import (
    check_elementwise_shapes,
    choose_elementwise_view,
    elementwise_view_builder,
    window_note,
)

OP = OperatorType.SCATTER_ELEMENTS


def _dimension_count(view: View) -> int:
    return max(len(view.input), 4)


def lower_scatter_elements(ctx: ConvertContext) -> Lowering:
    """The one recipe of the whole family (reduction already checked by the caller)."""
    data_shape, data_elem = ctx.tensor(0, "data")
    idx_shape, idx_elem = ctx.tensor(1, "indices")
    upd_shape, upd_elem = ctx.tensor(2, "updates")
    check_index_type(ctx, idx_elem, ctx.input_names[1])
    if upd_elem != data_elem:
        raise malformed("TYPE_MISMATCH", f"{ctx.op_type} updates must have data's type", upd_elem)
    if upd_shape != idx_shape:
        raise malformed(
            "UPDATES_SHAPE_INVALID",
            f"{ctx.op_type} updates {list(upd_shape)} must have the shape of indices {list(idx_shape)}",
            list(upd_shape),
        )
    r = len(data_shape)
    if r < 1:
        raise malformed("RANK_INVALID", f"{ctx.op_type} data must have rank >= 1", r)
    axis = normalize_axis(ctx, r)
    window = check_elementwise_shapes(ctx, data_shape, idx_shape, axis)
    shapes = {"data": data_shape, "indices": idx_shape, "updates": upd_shape, "output": data_shape}
    check_common(ctx, shapes)
    require_operator(ctx, OP)
    data = plan_data(ctx, OP, data_elem, "data")
    build = elementwise_view_builder(data_shape, idx_shape, axis, window, data, scatter=True)
    view, layout, d = choose_elementwise_view(
        ctx, OP, build, _dimension_count, data, window, (data_shape, idx_shape)
    )
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
        duplicate_indices=data.pairs,
        window=window,
        notes=(window_note(data_shape, idx_shape),) if window else (),
        attributes=(("axis", axis),),
    )


class ScatterConverter(Converter):
    """ONNX Scatter (deprecated since opset 11 in favour of ScatterElements; same semantics)."""

    op_type = "Scatter"

    def _impl_v9(self, ctx: ConvertContext) -> Lowering:
        return lower_scatter_elements(ctx)

    def _impl_v11(self, ctx: ConvertContext) -> Lowering:
        # Opset 11 allows negative indices; DirectML (FL 3_0+) or the host step wraps them.
        return lower_scatter_elements(ctx)

    IMPLEMENTATIONS: ClassVar[Implementations] = {9: _impl_v9, 11: _impl_v11}


class ScatterElementsConverter(Converter):
    """ONNX ScatterElements: output = data; output[... indices[i..] ...] = updates[i..]."""

    op_type = "ScatterElements"

    def _impl_v11(self, ctx: ConvertContext) -> Lowering:
        return lower_scatter_elements(ctx)

    def _impl_v13(self, ctx: ConvertContext) -> Lowering:
        # Opset 13 only adds bfloat16, which DirectML cannot hold.
        return lower_scatter_elements(ctx)

    def _impl_v16(self, ctx: ConvertContext) -> Lowering:
        # Opset 16 adds reduction add/mul.
        check_reduction(ctx)
        return lower_scatter_elements(ctx)

    def _impl_v18(self, ctx: ConvertContext) -> Lowering:
        # Opset 18 adds reduction max/min.
        check_reduction(ctx)
        return lower_scatter_elements(ctx)

    IMPLEMENTATIONS: ClassVar[Implementations] = {11: _impl_v11, 13: _impl_v13, 16: _impl_v16, 18: _impl_v18}
