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
    Target,
    View,
    check_common,
    normalize_axis,
    read_inputs,
)

OP = OperatorType.GATHER


def _dimension_count(view: View) -> int:
    return max(view.ranks)


class GatherConverter(Converter):
    """ONNX Gather: output = data[:axis] + indices.shape + data[axis+1:]."""

    op_type = "Gather"
    OPERATORS: ClassVar[tuple[OperatorType, ...]] = (OP,)

    def _lower(self, ctx: ConvertContext) -> Lowering:
        # 1. read the inputs
        (data_shape, data_elem), (idx_shape, _) = read_inputs(ctx)
        # 2. check
        axis = normalize_axis(ctx, len(data_shape))
        q = len(idx_shape)
        out_shape = data_shape[:axis] + idx_shape + data_shape[axis + 1 :]
        shapes = {"data": data_shape, "indices": idx_shape, "output": out_shape}
        check_common(ctx, shapes)
        target = Target.plan(ctx, OP, data_elem, shapes)
        data = target.data
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

        # 4. fill the descriptor
        return target.lower(
            build, _dimension_count, index_bounds=(data_shape[axis],), attributes=(("axis", axis),)
        )

    IMPLEMENTATIONS: ClassVar[Implementations] = {
        # Gather-1 defines only indices in [0, s-1]; onnxruntime wraps negatives anyway and so do we.
        1: _lower,
        # Opset 11: negative indices count from the end of the axis.
        11: _lower,
        # Opset 13 only adds bfloat16, which DirectML cannot hold (plan_data falls back).
        13: _lower,
    }
