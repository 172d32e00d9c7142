"""The rules every operator's tensors follow: availability at the feature level, buffer tensor fields,
dimension counts and data types."""

from __future__ import annotations

from collections.abc import Iterator

from .enums import DML_MAX_TENSOR_ELEMENTS, DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT, TensorFlags
from .rule_context import RuleContext, sizes_of
from .rules import UINT64_MAX, UINT_MAX, Violation
from .support import (
    describe_data_types,
    describe_dimension_counts,
    first_feature_level,
    first_level_supporting_data_type,
    first_level_supporting_dimension_count,
    max_dimension_count,
    support_row,
)
from .tensor import BufferTensorDesc, calc_buffer_tensor_size

# --- operator and buffer tensor rules (every operator) -------------------------------------------------


def check_availability(ctx: RuleContext) -> Iterator[Violation]:
    if support_row(ctx.op, ctx.fl) is None:
        since = first_feature_level(ctx.op)
        yield ctx.violation(
            "OPERATOR_UNAVAILABLE",
            "Type",
            ctx.op.dml_name,
            f"the operator was introduced in {since.dml_name}",
        )


def check_buffer_tensor(ctx: RuleContext, name: str, tensor: BufferTensorDesc) -> Iterator[Violation]:
    limit = max_dimension_count(ctx.fl)
    if not 1 <= tensor.dimension_count <= limit:
        constant = "DML_TENSOR_DIMENSION_COUNT_MAX1" if limit > 5 else "DML_TENSOR_DIMENSION_COUNT_MAX"
        yield ctx.violation(
            "TENSOR_DIMENSION_COUNT_OUT_OF_RANGE",
            f"{name}.DimensionCount",
            tensor.dimension_count,
            f"a buffer tensor has 1 to {constant} ({limit}) dimensions at this level, "
            f"{name} has {tensor.dimension_count}",
        )

    flags = int(tensor.flags)
    if flags & ~int(TensorFlags.OWNED_BY_DML):
        yield ctx.violation(
            "FLAGS_INVALID",
            f"{name}.Flags",
            flags,
            f"DML_TENSOR_FLAGS defines only NONE (0) and OWNED_BY_DML (1), {name}.Flags is {flags}",
        )
    elif flags & TensorFlags.OWNED_BY_DML and name not in ctx.desc.INPUT_TENSOR_FIELDS:
        yield ctx.violation(
            "FLAGS_INVALID",
            f"{name}.Flags",
            flags,
            f"DML_TENSOR_FLAG_OWNED_BY_DML can only be set on input tensors, not on {name}",
        )

    sizes = sizes_of(tensor.sizes)
    if any(s == 0 for s in sizes):
        yield ctx.violation(
            "SIZE_ZERO",
            f"{name}.Sizes",
            sizes,
            f"a size of 0 in any dimension is invalid, {name} has {sizes}",
        )
    if any(not 0 <= s <= UINT_MAX for s in sizes):
        yield ctx.violation(
            "UINT_OUT_OF_RANGE", f"{name}.Sizes", sizes, f"every Sizes entry is a UINT, {name} has {sizes}"
        )
    elif tensor.element_count > DML_MAX_TENSOR_ELEMENTS:
        yield ctx.violation(
            "ELEMENT_COUNT_EXCEEDS_MAX",
            f"{name}.Sizes",
            sizes,
            f"a tensor may hold at most 2^32-1 elements, {name} holds {tensor.element_count}",
        )

    strides = sizes_of(tensor.strides) if tensor.strides is not None else None
    strides_ok = True
    if strides is not None and len(strides) != len(sizes):
        strides_ok = False
        yield ctx.violation(
            "STRIDES_LENGTH_MISMATCH",
            f"{name}.Strides",
            strides,
            f"Strides must have DimensionCount ({len(sizes)}) entries, {name} has {len(strides)}",
        )
    if strides is not None and any(not 0 <= s <= UINT_MAX for s in strides):
        strides_ok = False
        yield ctx.violation(
            "UINT_OUT_OF_RANGE",
            f"{name}.Strides",
            strides,
            f"every Strides entry is a UINT, {name} has {strides}",
        )

    if strides_ok and all(s >= 1 for s in sizes):
        required = calc_buffer_tensor_size(tensor.data_type, sizes, strides)
        total = int(tensor.total_tensor_size_in_bytes)
        if total < required:
            yield ctx.violation(
                "TOTAL_TENSOR_SIZE_TOO_SMALL",
                f"{name}.TotalTensorSizeInBytes",
                total,
                f"TotalTensorSizeInBytes must be at least DMLCalcBufferTensorSize = {required} bytes",
            )
        elif total > UINT64_MAX:
            yield ctx.violation(
                "UINT_OUT_OF_RANGE",
                f"{name}.TotalTensorSizeInBytes",
                total,
                "TotalTensorSizeInBytes is a UINT64",
            )

    alignment = int(tensor.guaranteed_base_offset_alignment)
    if not 0 <= alignment <= UINT_MAX:
        yield ctx.violation(
            "UINT_OUT_OF_RANGE",
            f"{name}.GuaranteedBaseOffsetAlignment",
            alignment,
            "GuaranteedBaseOffsetAlignment is a UINT",
        )
    elif alignment and (alignment & (alignment - 1) or alignment < DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT):
        yield ctx.violation(
            "BASE_OFFSET_ALIGNMENT_INVALID",
            f"{name}.GuaranteedBaseOffsetAlignment",
            alignment,
            "GuaranteedBaseOffsetAlignment must be 0 or a power of two of at least "
            f"DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT ({DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT}), not {alignment}",
        )


def check_buffer_tensors(ctx: RuleContext) -> Iterator[Violation]:
    for name, tensor in ctx.tensors.items():
        yield from check_buffer_tensor(ctx, name, tensor)


def check_dimension_counts(ctx: RuleContext) -> Iterator[Violation]:
    row = support_row(ctx.op, ctx.fl)
    for name, tensor in ctx.tensors.items():
        count = tensor.dimension_count
        if row is not None and count not in row.dimension_counts:
            since = first_level_supporting_dimension_count(ctx.op, count)
            later = f" ({count} is supported from {since.dml_name})" if since is not None else ""
            yield ctx.violation(
                "DIMENSION_COUNT_UNSUPPORTED",
                f"{name}.DimensionCount",
                count,
                f"the supported dimension counts of {name} are "
                f"{describe_dimension_counts(row.dimension_counts)}, not {count}{later}",
            )
        if name != "InputTensor" and count != ctx.dimension_count:
            yield ctx.violation(
                "DIMENSION_COUNT_MISMATCH",
                f"{name}.DimensionCount",
                count,
                f"all tensors must have the same DimensionCount, {name} has {count} "
                f"and InputTensor {ctx.dimension_count}",
            )


def check_data_types(ctx: RuleContext) -> Iterator[Violation]:
    row = support_row(ctx.op, ctx.fl)
    input_type = ctx.tensors["InputTensor"].data_type
    for name, tensor in ctx.tensors.items():
        data_type = tensor.data_type
        if row is not None and data_type not in row.data_types_of(name):
            since = first_level_supporting_data_type(ctx.op, name, data_type)
            later = f" ({data_type.name} is supported from {since.dml_name})" if since is not None else ""
            allowed = describe_data_types(row.data_types_of(name))
            yield ctx.violation(
                "DATA_TYPE_UNSUPPORTED",
                f"{name}.DataType",
                data_type.dml_name,
                f"{name} supports {allowed}, not {data_type.name}{later}",
            )
        if name not in ("InputTensor", "IndicesTensor") and data_type != input_type:
            yield ctx.violation(
                "DATA_TYPE_MISMATCH",
                f"{name}.DataType",
                data_type.dml_name,
                f"{name} must have InputTensor's DataType {input_type.name}, not {data_type.name}",
            )
