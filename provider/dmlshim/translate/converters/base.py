"""What every converter shares: the Converter base, and (re-exported) the pieces of a lowering.

The pieces live in ``context`` (the node, failures, reading its inputs), ``views`` (the records of one
attempt), ``checks`` (limits, reductions, data types, operators) and ``lowering`` (layout, descriptor,
bindings). Every converter follows DirectMLX's five steps: read the input tensors (types and static shapes),
check the node, compute the DirectML Sizes (as a :class:`View`: the un-padded shapes of every DirectML
tensor), fill the descriptor, and let the translator validate it. The per-op part is only the View: which
shapes the DirectML tensors have and which fields the operator gets. Padding, data types, host steps and
bindings are built the same way for every op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ...dml.enums import OperatorType
from .checks import (
    check_common,
    check_reduction,
    max_dims,
    native_indices,
    plan_data,
    require_operator,
)
from .context import (
    MAX_ONNX_RANK,
    ConvertContext,
    NodeFailure,
    StaticTensor,
    check_index_type,
    inexpressible,
    malformed,
    normalize_axis,
    read_inputs,
)
from .lowering import Target, ViewBuilder, choose_view, index_steps
from .views import DataPlan, Lowering, View

__all__ = [
    "MAX_ONNX_RANK",
    "ConvertContext",
    "Converter",
    "DataPlan",
    "Implementations",
    "Lowering",
    "NodeFailure",
    "StaticTensor",
    "Target",
    "View",
    "ViewBuilder",
    "check_common",
    "check_index_type",
    "check_reduction",
    "choose_view",
    "index_steps",
    "inexpressible",
    "malformed",
    "max_dims",
    "native_indices",
    "normalize_axis",
    "plan_data",
    "read_inputs",
    "require_operator",
    "scatter_implementations",
]


Implementations = Mapping[int, Callable[[Any, ConvertContext], Lowering]]
"""since_version -> the converter method for it (Any: each subclass's table holds its own methods)."""


def scatter_implementations(lower: Callable[[Any, ConvertContext], Lowering]) -> Implementations:
    """The opsets ScatterElements and ScatterND share, all lowered by ``lower``.

    13 adds bfloat16 (DirectML cannot hold it), 16 adds reduction add/mul and 18 max/min: DirectML has no
    reduction, so from 16 on only ``reduction="none"`` lowers.
    """

    def lower_without_reduction(converter: Any, ctx: ConvertContext) -> Lowering:
        check_reduction(ctx)
        return lower(converter, ctx)

    return {11: lower, 13: lower, 16: lower_without_reduction, 18: lower_without_reduction}


class Converter:
    """Base of the converters: one subclass per ONNX op, one lowering method per opset that changed it.

    ``IMPLEMENTATIONS`` maps each since_version to its method explicitly (no discovery by name); the
    opsets that change nothing DirectML sees map to the same method.
    """

    op_type: ClassVar[str]
    domain: ClassVar[str] = ""
    IMPLEMENTATIONS: ClassVar[Implementations]
    OPERATORS: ClassVar[tuple[OperatorType, ...]]
    """Every DirectML operator a lowering may choose: where none is available, none can succeed."""

    def convert(self, ctx: ConvertContext) -> Lowering:
        impl = self.IMPLEMENTATIONS.get(ctx.since_version)
        if impl is None:
            known = ", ".join(str(v) for v in sorted(self.IMPLEMENTATIONS))
            raise malformed(
                "OPSET_UNSUPPORTED",
                f"{self.op_type}-{ctx.since_version} has no converter (implemented: {known})",
                ctx.since_version,
            )
        return impl(self, ctx)
