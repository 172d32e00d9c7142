"""Check a gather/scatter operator descriptor against every rule of the DirectML docs at a feature level.

``validate`` returns every violation at once, so a translator or a report can show them all. Rules that relate
tensors to each other (Sizes formulas, batch dimensions) are only checked once the tensors share one
DimensionCount, and a formula is only evaluated once the fields it reads are in range: a single mistake is
reported once, not again as the failures it causes downstream.

Rule codes (``Violation.rule``) are stable; tests and reports match on them, never on messages.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidDescriptorError
from .enums import (
    DML_MAX_TENSOR_ELEMENTS,
    DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT,
    DataType,
    FeatureLevel,
    OperatorType,
    TensorFlags,
)
from .operators import (
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
    snake_case,
)
from .shapes import gather_nd_output_sizes, gather_output_sizes
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

logger = logging.getLogger(__name__)

__all__ = ["RULES", "Violation", "check", "min_feature_level", "validate"]

UINT_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

RULES: dict[str, str] = {
    "OPERATOR_UNAVAILABLE": "the operator was introduced at a higher feature level",
    "TENSOR_DIMENSION_COUNT_OUT_OF_RANGE": (
        "a buffer tensor has 1 to DML_TENSOR_DIMENSION_COUNT_MAX (5) dimensions before FL 3_0, "
        "1 to DML_TENSOR_DIMENSION_COUNT_MAX1 (8) from FL 3_0"
    ),
    "DIMENSION_COUNT_UNSUPPORTED": "the operator's support table does not list this DimensionCount",
    "DIMENSION_COUNT_MISMATCH": "all tensors of the operator must have the same DimensionCount",
    "DATA_TYPE_UNSUPPORTED": "the operator's support table does not list this DataType for the tensor",
    "DATA_TYPE_MISMATCH": "OutputTensor (and UpdatesTensor) must have InputTensor's DataType",
    "FLAGS_INVALID": "Flags is NONE or OWNED_BY_DML, and OWNED_BY_DML only on input tensors",
    "SIZE_ZERO": "a size of 0 in any dimension is invalid",
    "UINT_OUT_OF_RANGE": "Sizes, Strides and GuaranteedBaseOffsetAlignment are 32-bit UINTs",
    "ELEMENT_COUNT_EXCEEDS_MAX": "a tensor holds at most 2^32-1 elements",
    "STRIDES_LENGTH_MISMATCH": "Strides, if given, has DimensionCount entries like Sizes",
    "TOTAL_TENSOR_SIZE_TOO_SMALL": "TotalTensorSizeInBytes is at least DMLCalcBufferTensorSize",
    "BASE_OFFSET_ALIGNMENT_INVALID": (
        "GuaranteedBaseOffsetAlignment is 0 or a power of two >= DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT (16)"
    ),
    "AXIS_OUT_OF_RANGE": "Axis is in [0, DimensionCount)",
    "INDEX_DIMENSIONS_OUT_OF_RANGE": "GATHER IndexDimensions is in [0, DimensionCount] (inclusive)",
    "INPUT_DIMENSION_COUNT_OUT_OF_RANGE": "InputDimensionCount is in [1, DimensionCount] (inclusive)",
    "INDICES_DIMENSION_COUNT_OUT_OF_RANGE": "IndicesDimensionCount is in [1, DimensionCount] (inclusive)",
    "BATCH_DIMENSION_COUNT_OUT_OF_RANGE": (
        "BatchDimensionCount is in [0, min(InputDimensionCount, IndicesDimensionCount - 1)]"
    ),
    "LEADING_DIMENSIONS_NOT_ONE": "the dimensions before the meaningful ones (the padding) must be 1",
    "BATCH_SIZES_MISMATCH": "the batch dimensions of InputTensor and IndicesTensor must be equal",
    "INDEX_TUPLE_SIZE_OUT_OF_RANGE": (
        "the last IndicesTensor dimension (coordinates per index tuple) is in "
        "[1, InputDimensionCount - BatchDimensionCount]"
    ),
    "OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT": (
        "the meaningful dimensions of the computed Sizes must fit into the shared DimensionCount"
    ),
    "SIZES_MISMATCH": "a tensor's Sizes differ from what the operator's Sizes rule requires",
}
"""Every rule code ``validate`` can report, with a one-line statement of the DirectML rule."""


@dataclass(frozen=True)
class Violation:
    """One DirectML rule a descriptor breaks.

    Attributes:
        rule: stable code from ``RULES``, e.g. ``"DATA_TYPE_UNSUPPORTED"``.
        field: DirectML path of the offending field, e.g. ``"IndicesTensor.DataType"`` or ``"Axis"``.
        message: one sentence quoting the DirectML rule and the feature level.
        value: the offending value, JSON-able (int, list of int, or a DirectML enum name).
    """

    rule: str
    field: str
    message: str
    value: object

    def as_dict(self) -> dict[str, Any]:
        """The violation as a JSON-ready dict with DirectML-style keys."""
        return {"rule": self.rule, "field": self.field, "message": self.message, "value": self.value}

    def __str__(self) -> str:
        return f"[{self.rule}] {self.field} = {self.value!r}: {self.message}"


@dataclass(frozen=True)
class _Context:
    desc: OperatorDesc
    op: OperatorType
    fl: FeatureLevel
    tensors: dict[str, BufferTensorDesc]
    dimension_count: int  # InputTensor.DimensionCount: the reference for every other count

    @property
    def where(self) -> str:
        return f"{self.op.dml_name} at {self.fl.dml_name}"

    @property
    def same_dimension_count(self) -> bool:
        return all(t.dimension_count == self.dimension_count for t in self.tensors.values())

    def violation(self, rule: str, field: str, value: object, text: str) -> Violation:
        return Violation(rule=rule, field=field, message=f"{self.where}: {text}.", value=value)


_Check = Callable[[_Context], Iterator[Violation]]


def _sizes(sizes: Sequence[int]) -> list[int]:
    return [int(s) for s in sizes]


# --- operator and buffer tensor rules (every operator) -------------------------------------------------


def _check_availability(ctx: _Context) -> Iterator[Violation]:
    if support_row(ctx.op, ctx.fl) is None:
        since = first_feature_level(ctx.op)
        yield ctx.violation(
            "OPERATOR_UNAVAILABLE",
            "Type",
            ctx.op.dml_name,
            f"the operator was introduced in {since.dml_name}",
        )


def _check_buffer_tensor(ctx: _Context, name: str, tensor: BufferTensorDesc) -> Iterator[Violation]:
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

    sizes = _sizes(tensor.sizes)
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

    strides = _sizes(tensor.strides) if tensor.strides is not None else None
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


def _check_buffer_tensors(ctx: _Context) -> Iterator[Violation]:
    for name, tensor in ctx.tensors.items():
        yield from _check_buffer_tensor(ctx, name, tensor)


def _check_dimension_counts(ctx: _Context) -> Iterator[Violation]:
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


def _check_data_types(ctx: _Context) -> Iterator[Violation]:
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


# --- field ranges and Sizes relations (per operator) ----------------------------------------------------


def _range_violation(
    ctx: _Context, rule: str, field: str, value: int, low: int, high: int, bound: str
) -> Iterator[Violation]:
    """``low <= value <= high`` (inclusive, facts §4) or a violation quoting ``bound``."""
    if not low <= value <= high:
        yield ctx.violation(rule, field, value, f"{field} must be in {bound}, which is [{low}, {high}] here")


def _axis(ctx: _Context) -> int:
    if not isinstance(ctx.desc, GatherDesc | GatherElementsDesc | ScatterDesc):
        raise TypeError(f"{ctx.op.dml_name} has no Axis")  # a wiring bug in _OPERATOR_CHECKS
    return int(ctx.desc.axis)


def _check_axis(ctx: _Context) -> Iterator[Violation]:
    axis = _axis(ctx)
    d = ctx.dimension_count
    if not 0 <= axis < d:
        yield ctx.violation(
            "AXIS_OUT_OF_RANGE", "Axis", axis, f"Axis must be in [0, DimensionCount), which is [0, {d}) here"
        )


def _axis_in_range(ctx: _Context) -> bool:
    return 0 <= _axis(ctx) < ctx.dimension_count


def _leading_ones(ctx: _Context, name: str, meaningful: int, count_field: str) -> Iterator[Violation]:
    """The dimensions before the last ``meaningful`` ones are padding and must be 1."""
    sizes = _sizes(ctx.tensors[name].sizes)
    padding = sizes[: len(sizes) - meaningful]
    if any(s != 1 for s in padding):
        yield ctx.violation(
            "LEADING_DIMENSIONS_NOT_ONE",
            f"{name}.Sizes",
            sizes,
            f"with {count_field} {meaningful} the leading {len(padding)} dimensions of {name} are padding "
            f"and must be 1, Sizes is {sizes}",
        )


def _sizes_equal(
    ctx: _Context, name: str, expected: Sequence[int], rule_text: str, skip_axis: int | None = None
) -> Iterator[Violation]:
    actual = _sizes(ctx.tensors[name].sizes)
    want = _sizes(expected)
    differs = [i for i, (a, w) in enumerate(zip(actual, want, strict=False)) if a != w and i != skip_axis]
    if differs or len(actual) != len(want):
        shown = "{" + ",".join(str(s) for s in want) + "}"
        if skip_axis is not None:
            shown += f" except dimension {skip_axis} (Axis)"
        yield ctx.violation(
            "SIZES_MISMATCH", f"{name}.Sizes", actual, f"{rule_text}: expected {shown}, got {actual}"
        )


def _output_rank_violation(ctx: _Context, name: str, concatenated: list[int]) -> Violation:
    return ctx.violation(
        "OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT",
        f"{name}.Sizes",
        concatenated,
        f"the {name}.Sizes formula yields {concatenated}, whose meaningful dimensions do not fit into "
        f"DimensionCount {ctx.dimension_count}",
    )


def _check_gather(ctx: _Context) -> Iterator[Violation]:
    desc = ctx.desc
    if not isinstance(desc, GatherDesc):
        raise TypeError(f"GATHER rules wired to {ctx.op.dml_name}")
    d = ctx.dimension_count
    k = int(desc.index_dimensions)
    yield from _range_violation(
        ctx, "INDEX_DIMENSIONS_OUT_OF_RANGE", "IndexDimensions", k, 0, d, "[0, IndicesTensor.DimensionCount]"
    )
    if not (ctx.same_dimension_count and _axis_in_range(ctx) and 0 <= k <= d):
        return
    yield from _leading_ones(ctx, "IndicesTensor", k, "IndexDimensions")
    input_sizes = _sizes(desc.input_tensor.sizes)
    indices_sizes = _sizes(desc.indices_tensor.sizes)
    axis = int(desc.axis)
    try:
        expected = gather_output_sizes(input_sizes, indices_sizes, axis, k)
    except ValueError:
        tail = indices_sizes[d - k :] if k else []
        yield _output_rank_violation(ctx, "OutputTensor", input_sizes[:axis] + tail + input_sizes[axis + 1 :])
        return
    yield from _sizes_equal(
        ctx,
        "OutputTensor",
        expected,
        "OutputTensor.Sizes must be {Input.Sizes[0..Axis], the last IndexDimensions of Indices.Sizes, "
        "Input.Sizes[Axis+1..]}, right-aligned",
    )


def _check_elements(ctx: _Context) -> Iterator[Violation]:
    """GATHER_ELEMENTS and SCATTER: Indices match Input except on Axis; the rest follow from that."""
    if not (ctx.same_dimension_count and _axis_in_range(ctx)):
        return
    axis = _axis(ctx)
    input_sizes = ctx.tensors["InputTensor"].sizes
    indices_sizes = ctx.tensors["IndicesTensor"].sizes
    yield from _sizes_equal(
        ctx,
        "IndicesTensor",
        input_sizes,
        "IndicesTensor.Sizes must match InputTensor.Sizes for every dimension except Axis",
        skip_axis=axis,
    )
    if "UpdatesTensor" in ctx.tensors:
        yield from _sizes_equal(
            ctx, "UpdatesTensor", indices_sizes, "UpdatesTensor.Sizes must match IndicesTensor.Sizes"
        )
        yield from _sizes_equal(
            ctx, "OutputTensor", input_sizes, "OutputTensor.Sizes must match InputTensor.Sizes"
        )
    else:
        yield from _sizes_equal(
            ctx, "OutputTensor", indices_sizes, "OutputTensor.Sizes must match IndicesTensor.Sizes"
        )


def _check_nd(ctx: _Context) -> Iterator[Violation]:
    """GATHER_ND, GATHER_ND1 and SCATTER_ND share one index-tuple model (no batch dimensions but ND1's)."""
    desc = ctx.desc
    if not isinstance(desc, GatherNdDesc | GatherNd1Desc | ScatterNdDesc):
        raise TypeError(f"ND rules wired to {ctx.op.dml_name}")
    d = ctx.dimension_count
    input_count = int(desc.input_dimension_count)
    indices_count = int(desc.indices_dimension_count)
    batch = int(desc.batch_dimension_count) if isinstance(desc, GatherNd1Desc) else 0
    yield from _range_violation(
        ctx,
        "INPUT_DIMENSION_COUNT_OUT_OF_RANGE",
        "InputDimensionCount",
        input_count,
        1,
        d,
        "[1, InputTensor.DimensionCount]",
    )
    indices_d = ctx.tensors["IndicesTensor"].dimension_count
    yield from _range_violation(
        ctx,
        "INDICES_DIMENSION_COUNT_OUT_OF_RANGE",
        "IndicesDimensionCount",
        indices_count,
        1,
        indices_d,
        "[1, IndicesTensor.DimensionCount]",
    )
    counts_ok = 1 <= input_count <= d and 1 <= indices_count <= indices_d
    if isinstance(desc, GatherNd1Desc):
        # The upper bound reads the two counts: with one of them out of range only a negative batch is
        # certainly wrong, anything else would be reported twice for one mistake.
        high = min(input_count, indices_count - 1) if counts_ok else None
        if batch < 0 or (high is not None and batch > high):
            counts_ok = False
            bound = f", which is [0, {high}] here" if high is not None else ""
            yield ctx.violation(
                "BATCH_DIMENSION_COUNT_OUT_OF_RANGE",
                "BatchDimensionCount",
                batch,
                "BatchDimensionCount must be in [0, min(InputDimensionCount, IndicesDimensionCount - 1)]"
                + bound,
            )
    if not (counts_ok and ctx.same_dimension_count):
        return

    yield from _leading_ones(ctx, "InputTensor", input_count, "InputDimensionCount")
    yield from _leading_ones(ctx, "IndicesTensor", indices_count, "IndicesDimensionCount")
    input_sizes = _sizes(desc.input_tensor.sizes)
    indices_sizes = _sizes(desc.indices_tensor.sizes)
    input_batch = input_sizes[d - input_count : d - input_count + batch]
    indices_batch = indices_sizes[d - indices_count : d - indices_count + batch]
    if input_batch != indices_batch:
        yield ctx.violation(
            "BATCH_SIZES_MISMATCH",
            "IndicesTensor.Sizes",
            indices_sizes,
            f"the first BatchDimensionCount ({batch}) meaningful dimensions of IndicesTensor {indices_batch} "
            f"must equal those of InputTensor {input_batch}",
        )

    tuple_size = indices_sizes[-1]
    if not 1 <= tuple_size <= input_count - batch:
        yield ctx.violation(
            "INDEX_TUPLE_SIZE_OUT_OF_RANGE",
            "IndicesTensor.Sizes",
            tuple_size,
            "the last dimension of IndicesTensor (coordinates per index tuple) must be in "
            f"[1, InputDimensionCount - BatchDimensionCount], which is [1, {input_count - batch}] here",
        )
        return

    target = "UpdatesTensor" if isinstance(desc, ScatterNdDesc) else "OutputTensor"
    try:
        expected = gather_nd_output_sizes(input_sizes, indices_sizes, input_count, indices_count, batch)
    except ValueError:
        lead = indices_sizes[d - indices_count : d - 1]
        yield _output_rank_violation(ctx, target, lead + input_sizes[d - input_count + batch + tuple_size :])
    else:
        yield from _sizes_equal(
            ctx,
            target,
            expected,
            f"{target}.Sizes must be the leading IndicesTensor.Sizes (without the tuple dimension) followed "
            "by the InputTensor.Sizes the index tuples do not address, right-aligned",
        )
    if isinstance(desc, ScatterNdDesc):
        yield from _sizes_equal(
            ctx, "OutputTensor", input_sizes, "OutputTensor.Sizes must match InputTensor.Sizes"
        )


# --- the accepting pass ---------------------------------------------------------------------------------
#
# Translation validates every descriptor it builds, most of them valid. ``_accepted`` proves validity with
# plain comparisons, building no message; only when it cannot does ``validate`` run the rule checks above,
# which then find and describe every violation. It must never accept what a rule check rejects (the tests
# compare both passes on mutated descriptors); rejecting a valid descriptor only costs time.


_BITS: dict[DataType, int] = {t: t.bits for t in DataType}


def _accepted(desc: OperatorDesc, fl: FeatureLevel) -> bool:
    """True only if no rule check of ``validate`` reports anything for ``desc`` at ``fl``."""
    row = support_row(desc.OPERATOR_TYPE, fl)
    if row is None:
        return False
    first = desc.input_tensor
    if type(first) is not BufferTensorDesc:
        return False
    d = len(first.sizes)
    if not 1 <= d <= max_dimension_count(fl) or d not in row.dimension_counts:
        return False
    input_type = first.data_type
    inputs = desc.INPUT_TENSOR_FIELDS
    for name, attribute in _TENSOR_ATTRIBUTES[type(desc)]:
        tensor = getattr(desc, attribute)
        if type(tensor) is not BufferTensorDesc:
            return False
        sizes = tensor.sizes
        data_type = tensor.data_type
        if len(sizes) != d or min(sizes) < 1 or max(sizes) > UINT_MAX:
            return False
        if name == "IndicesTensor":
            if data_type not in row.index_types:
                return False
        elif data_type not in row.data_types or (name != "InputTensor" and data_type != input_type):
            return False
        flags = int(tensor.flags)
        if flags and (flags != TensorFlags.OWNED_BY_DML or name not in inputs):
            return False
        elements = math.prod(sizes)
        if elements > DML_MAX_TENSOR_ELEMENTS:
            return False
        strides = tensor.strides
        if strides is not None:
            if len(strides) != d or min(strides) < 0 or max(strides) > UINT_MAX:
                return False
            elements = sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) + 1
        # DMLCalcBufferTensorSize (calc_buffer_tensor_size) from the element count at hand.
        required = ((elements * _BITS[data_type] + 7) // 8 + 3) & ~3
        if not required <= int(tensor.total_tensor_size_in_bytes) <= UINT64_MAX:
            return False
        alignment = int(tensor.guaranteed_base_offset_alignment)
        if alignment and not (
            0 < alignment <= UINT_MAX
            and not alignment & (alignment - 1)
            and alignment >= DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT
        ):
            return False
    return _ACCEPTS[type(desc)](desc, d)


def _accept_gather(desc: GatherDesc, d: int) -> bool:
    axis, k = int(desc.axis), int(desc.index_dimensions)
    if not (0 <= axis < d and 0 <= k <= d):
        return False
    inp, indices = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if any(s != 1 for s in indices[: d - k]):
        return False
    # gather_output_sizes without its right-alignment, which changes nothing when the ranks add up to d.
    expected = (*inp[:axis], *indices[d - k :], *inp[axis + 1 :])
    if len(expected) != d:
        try:
            expected = gather_output_sizes(inp, indices, axis, k)
        except ValueError:
            return False
    return desc.output_tensor.sizes == expected


def _accept_elements(desc: GatherElementsDesc | ScatterDesc, d: int) -> bool:
    axis = int(desc.axis)
    if not 0 <= axis < d:
        return False
    inp, idx = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if inp[:axis] != idx[:axis] or inp[axis + 1 :] != idx[axis + 1 :]:
        return False
    if isinstance(desc, ScatterDesc):
        return desc.updates_tensor.sizes == idx and desc.output_tensor.sizes == inp
    return desc.output_tensor.sizes == idx


def _accept_nd(desc: GatherNdDesc | GatherNd1Desc | ScatterNdDesc, d: int) -> bool:
    r, q = int(desc.input_dimension_count), int(desc.indices_dimension_count)
    batch = int(desc.batch_dimension_count) if isinstance(desc, GatherNd1Desc) else 0
    if not (1 <= r <= d and 1 <= q <= d and 0 <= batch <= min(r, q - 1)):
        return False
    inp, idx = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if any(s != 1 for s in inp[: d - r]) or any(s != 1 for s in idx[: d - q]):
        return False
    if inp[d - r : d - r + batch] != idx[d - q : d - q + batch] or not 1 <= idx[-1] <= r - batch:
        return False
    try:
        expected = gather_nd_output_sizes(inp, idx, r, q, batch)
    except ValueError:
        return False
    if isinstance(desc, ScatterNdDesc):
        return desc.updates_tensor.sizes == expected and desc.output_tensor.sizes == inp
    return desc.output_tensor.sizes == expected


_TENSOR_ATTRIBUTES: dict[type, tuple[tuple[str, str], ...]] = {
    desc_type: tuple((name, snake_case(name)) for name in desc_type.TENSOR_FIELDS)
    for desc_type in (GatherDesc, GatherElementsDesc, ScatterDesc, GatherNdDesc, GatherNd1Desc, ScatterNdDesc)
}
"""(DirectML name, attribute) of the tensor fields of each descriptor type, in struct order."""

_ACCEPTS: dict[type, Callable[[Any, int], bool]] = {
    GatherDesc: _accept_gather,
    GatherElementsDesc: _accept_elements,
    ScatterDesc: _accept_elements,
    GatherNdDesc: _accept_nd,
    GatherNd1Desc: _accept_nd,
    ScatterNdDesc: _accept_nd,
}


_COMMON_CHECKS: tuple[_Check, ...] = (
    _check_availability,
    _check_buffer_tensors,
    _check_dimension_counts,
    _check_data_types,
)

_OPERATOR_CHECKS: dict[type, tuple[_Check, ...]] = {
    GatherDesc: (_check_axis, _check_gather),
    GatherElementsDesc: (_check_axis, _check_elements),
    ScatterDesc: (_check_axis, _check_elements),
    GatherNdDesc: (_check_nd,),
    GatherNd1Desc: (_check_nd,),
    ScatterNdDesc: (_check_nd,),
}
"""The operator-specific rules, by descriptor class, in the order they are reported."""


def validate(desc: OperatorDesc, feature_level: FeatureLevel) -> tuple[Violation, ...]:
    """Every DirectML rule ``desc`` breaks on a device of ``feature_level``.

    When the operator does not exist at ``feature_level`` only OPERATOR_UNAVAILABLE and the level-independent
    rules are reported: there is no support table to check the tensors against.

    Args:
        desc: one of the six gather/scatter descriptors.
        feature_level: the DML_FEATURE_LEVEL the descriptor is meant for.

    Returns:
        All violations, in a stable order (operator, each tensor, dimension counts, data types, fields,
        Sizes relations); empty when DirectML would accept the descriptor.

    Raises:
        TypeError: ``desc`` is not a gather/scatter operator descriptor.
    """
    checks = _OPERATOR_CHECKS.get(type(desc))
    if checks is None:
        raise TypeError(f"not a DirectML gather/scatter operator descriptor: {type(desc).__name__}")
    fl = feature_level if type(feature_level) is FeatureLevel else FeatureLevel(feature_level)
    if _accepted(desc, fl):
        return ()
    return _violations(desc, fl, checks)


def _violations(desc: OperatorDesc, fl: FeatureLevel, checks: tuple[_Check, ...]) -> tuple[Violation, ...]:
    """Every violation, messages included (the rule checks one by one)."""
    tensors = desc.tensors()
    ctx = _Context(desc, desc.operator_type, fl, tensors, tensors["InputTensor"].dimension_count)
    violations = tuple(v for check_fn in (*_COMMON_CHECKS, *checks) for v in check_fn(ctx))
    logger.debug("%s: %d violation(s)", ctx.where, len(violations))
    return violations


def check(
    desc: OperatorDesc, feature_level: FeatureLevel, *, node: str | None = None, op_type: str | None = None
) -> None:
    """Raise if ``desc`` breaks any DirectML rule at ``feature_level``.

    Args:
        desc: one of the six gather/scatter descriptors.
        feature_level: the DML_FEATURE_LEVEL the descriptor is meant for.
        node: the ONNX node the descriptor was built for, if any (carried by the error).
        op_type: the ONNX op type, if any; defaults to the DirectML operator name.

    Raises:
        InvalidDescriptorError: with ``violations`` holding every broken rule and a message listing them all.
    """
    violations = validate(desc, feature_level)
    if not violations:
        return
    fl = FeatureLevel(feature_level)
    listed = "; ".join(f"({i}) {v}" for i, v in enumerate(violations, 1))
    message = (
        f"{desc.operator_type.dml_name} descriptor breaks {len(violations)} DirectML rule(s) at "
        f"{fl.dml_name}: {listed}"
    )
    first = violations[0]
    tensor = first.field.split(".", 1)[0] if "." in first.field else None
    raise InvalidDescriptorError(
        message,
        violations=violations,
        rule=first.rule,
        value=first.value,
        node=node,
        op_type=op_type or desc.operator_type.dml_name,
        tensor=tensor,
    )


def min_feature_level(desc: OperatorDesc) -> FeatureLevel | None:
    """The lowest feature level at which ``desc`` is valid, or None if no level accepts it.

    Args:
        desc: one of the six gather/scatter descriptors.
    """
    for fl in sorted(FeatureLevel):
        if not validate(desc, fl):
            return fl
    return None
