"""Checks shared by every converter: level-independent limits, reductions, data types, operators, counts."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

from onnx import TensorProto

from ...dml import support
from ...dml.enums import DML_MAX_TENSOR_ELEMENTS, DataType, FeatureLevel, OperatorType
from ...dml.symbolic import is_symbolic
from ..plan import (
    Reinterpret,
    elem_type_name,
)
from ..support_table import dml_data_type
from .context import MAX_ONNX_RANK, ConvertContext, inexpressible, malformed
from .views import DataPlan

_COMMON_LIMITS: tuple[tuple[str, Callable[[tuple[int, ...]], object], str], ...] = (
    (
        "RANK_TOO_LARGE",
        lambda shape: len(shape) if len(shape) > MAX_ONNX_RANK else None,
        f"{{role}} has rank {{value}}; DirectML tensors have at most {MAX_ONNX_RANK} dimensions "
        "(onnxruntime's DirectML provider rejects the node)",
    ),
    (
        "EMPTY_TENSOR",
        lambda shape: list(shape) if 0 in shape else None,
        "{role} has shape {value}; DirectML forbids a size of 0, so the node runs on the CPU (ONNX's result)",
    ),
    (
        "TOO_MANY_ELEMENTS",
        lambda shape: math.prod(shape) if math.prod(shape) > DML_MAX_TENSOR_ELEMENTS else None,
        "{role} holds {value} elements; a DirectML tensor holds at most 2^32-1",
    ),
)
"""(reason code, the offending value of a shape or None, message) of each level-independent limit."""


def check_common(ctx: ConvertContext, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Level-independent fallbacks: rank above 8, empty tensors, too many elements.

    A tensor with a symbolic size has only its rank decided; its size limits wait for the real shapes. A
    tensor whose sizes are all known is checked now, symbolic sizes elsewhere in the node or not (a data
    tensor of 4e14 elements falls back whatever the indices' size).
    """
    shapes = {
        role: (1,) * len(shape) if any(is_symbolic(d) for d in shape) else shape
        for role, shape in shapes.items()
    }
    if all(
        len(shape) <= MAX_ONNX_RANK and 0 not in shape and math.prod(shape) <= DML_MAX_TENSOR_ELEMENTS
        for shape in shapes.values()
    ):
        return
    # Limit by limit, not shape by shape: a rank above 8 anywhere is the reason before an empty tensor.
    for code, offending, message in _COMMON_LIMITS:
        for role, shape in shapes.items():
            value = offending(shape)
            if value is not None:
                raise inexpressible(code, message.format(role=role, value=value), value)


def check_reduction(ctx: ConvertContext) -> str:
    """Scatter reductions: DirectML's scatter descriptors have no reduction field (up to FL 6_4)."""
    # ONNX adds max and min at opset 18, but onnxruntime's CPU kernels (the ones the node falls back to)
    # read the attribute whatever the opset: a ScatterElements-16 or ScatterND-16 with reduction='max' (the
    # TorchScript exporter writes one for scatter_reduce at opset 16-17) computes the maximum there.
    allowed = ("none", "add", "mul", "max", "min")
    reduction = ctx.str_attr("reduction", "none")
    if reduction not in allowed:
        raise malformed(
            "ATTRIBUTE_INVALID",
            f"{ctx.op_type}-{ctx.since_version} reduction must be one of {', '.join(allowed)}",
            reduction,
        )
    if reduction != "none":
        newer = (
            f" (ONNX defines it from opset 18; onnxruntime computes it at opset {ctx.since_version} too)"
            if reduction in ("max", "min") and ctx.since_version < 18
            else ""
        )
        raise inexpressible(
            "SCATTER_REDUCTION_UNSUPPORTED",
            f"DirectML has no scatter reduction (reduction={reduction!r}){newer}; the node runs on the CPU",
            reduction,
        )
    return reduction


def plan_data(ctx: ConvertContext, op: OperatorType, elem: int, role: str) -> DataPlan:
    """Bind the data type as is, bool as UINT8, or 64-bit as UINT32 pairs where the level has no 64-bit."""
    dml = dml_data_type(elem)
    if dml is None:
        raise inexpressible(
            "DATA_TYPE_UNSUPPORTED",
            f"DirectML has no data type for tensor({elem_type_name(elem)}) ({role})",
            elem_type_name(elem),
        )
    fl = ctx.feature_level
    accepted = support.supported_data_types(op, "InputTensor", fl)
    if dml in accepted:
        how = Reinterpret.BOOL_AS_UINT8 if elem == TensorProto.BOOL else Reinterpret.NONE
        return DataPlan(elem, dml, how)
    if dml.is_64bit and DataType.UINT32 in accepted:
        return DataPlan(elem, DataType.UINT32, Reinterpret.UINT32_PAIRS)
    since = support.first_level_supporting_data_type(op, "InputTensor", dml)
    later = f"; supported from {since.dml_name}" if since is not None else ""
    raise inexpressible(
        "DATA_TYPE_UNSUPPORTED",
        f"{op.dml_name} at {fl.dml_name} takes no {dml.name} data (tensor({elem_type_name(elem)})){later}",
        elem_type_name(elem),
    )


def require_operator(ctx: ConvertContext, op: OperatorType, why: str = "") -> None:
    if not support.operator_available(op, ctx.feature_level):
        since = support.first_feature_level(op)
        raise inexpressible(
            "OPERATOR_UNAVAILABLE",
            f"{op.dml_name} is not available at {ctx.feature_level.dml_name} (introduced in "
            f"{since.dml_name}){why}",
            op.dml_name,
        )


def native_indices(ctx: ConvertContext, op: OperatorType) -> bool:
    """FL 3_0 and up take signed INT32/INT64 indices (negatives included); below, only UINT32."""
    return DataType.INT64 in support.supported_data_types(op, "IndicesTensor", ctx.feature_level)


def max_dims(ctx: ConvertContext, op: OperatorType) -> tuple[int, bool]:
    """(largest DimensionCount, whether it is the only one) for the operator at the level."""
    return _max_dims(op, ctx.feature_level)


@functools.lru_cache(maxsize=256)
def _max_dims(op: OperatorType, fl: FeatureLevel) -> tuple[int, bool]:
    counts = list(support.supported_dimension_counts(op, fl))
    return max(counts), len(counts) == 1
