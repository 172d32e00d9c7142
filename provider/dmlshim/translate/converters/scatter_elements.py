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
from .base import ConvertContext, Converter, Implementations, Lowering, View, scatter_implementations
from .gather_elements import lower_elementwise

OP = OperatorType.SCATTER_ELEMENTS


def _dimension_count(view: View) -> int:
    return max(len(view.input), 4)


class ScatterElementsConverter(Converter):
    """ONNX ScatterElements: output = data; output[... indices[i..] ...] = updates[i..]."""

    op_type = "ScatterElements"
    OPERATORS: ClassVar[tuple[OperatorType, ...]] = (OP,)

    def _lower(self, ctx: ConvertContext) -> Lowering:
        return lower_elementwise(ctx, OP, _dimension_count, scatter=True)

    IMPLEMENTATIONS: ClassVar[Implementations] = scatter_implementations(_lower)


class ScatterConverter(ScatterElementsConverter):
    """ONNX Scatter (deprecated since opset 11 in favour of ScatterElements; same semantics)."""

    op_type = "Scatter"

    IMPLEMENTATIONS: ClassVar[Implementations] = {
        9: ScatterElementsConverter._lower,
        # Opset 11 allows negative indices; DirectML (FL 3_0+) or the host step wraps them.
        11: ScatterElementsConverter._lower,
    }
