"""The rule checks: each finds and describes every violation of one group of DirectML rules.

Rules that relate tensors to each other (Sizes formulas, batch dimensions) are only checked once the tensors
share one DimensionCount, and a formula is only evaluated once the fields it reads are in range: a single
mistake is reported once, not again as the failures it causes downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .enums import (
    DML_MAX_TENSOR_ELEMENTS,
    DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT,
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
)
from .rules import UINT64_MAX, UINT_MAX, Violation
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
        return Violation(rule=rule, field=field, message=f"{self.where}: {text}.", value=_shown_value(value))


_Check = Callable[[_Context], Iterator[Violation]]


def _sizes(sizes: Sequence[int]) -> list[int]:
    return [int(s) for s in sizes]


def _shown(sizes: Sequence[int]) -> list[int | str]:
    from ..translate.symbolic import describe  # symbolic descriptors: sizes by their dimension's name

    return [describe(int(s)) for s in sizes]


def _shown_value(value: object) -> object:
    from ..translate.symbolic import shown_value

    return shown_value(value)


def _known_different(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two size lists are known to differ: two differently named symbols (inspect's placeholders)
    may be equal at run time, so only sizes known to differ count (the run checks the real ones)."""
    from ..translate.symbolic import any_differ

    return any_differ(_sizes(a), _sizes(b))


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
        raise TypeError(f"{ctx.op.dml_name} has no Axis")  # a wiring bug in OPERATOR_CHECKS
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
    if _known_different(padding, [1] * len(padding)):
        yield ctx.violation(
            "LEADING_DIMENSIONS_NOT_ONE",
            f"{name}.Sizes",
            sizes,
            f"with {count_field} {meaningful} the leading {len(padding)} dimensions of {name} are padding "
            f"and must be 1, Sizes is {_shown(sizes)}",
        )


def _sizes_equal(
    ctx: _Context, name: str, expected: Sequence[int], rule_text: str, skip_axis: int | None = None
) -> Iterator[Violation]:
    # Symbolic descriptors (inspect on dynamic shapes) hold placeholder sizes; two different symbols may be
    # equal at run time, so only sizes known to differ fail here (the run checks the real ones).
    from ..translate.symbolic import differ

    actual = _sizes(ctx.tensors[name].sizes)
    want = _sizes(expected)
    differs = [
        i for i, (a, w) in enumerate(zip(actual, want, strict=False)) if differ(a, w) and i != skip_axis
    ]
    if differs or len(actual) != len(want):
        shown = "{" + ",".join(str(s) for s in _shown(want)) + "}"
        if skip_axis is not None:
            shown += f" except dimension {skip_axis} (Axis)"
        yield ctx.violation(
            "SIZES_MISMATCH", f"{name}.Sizes", actual, f"{rule_text}: expected {shown}, got {_shown(actual)}"
        )


def _output_rank_violation(ctx: _Context, name: str, concatenated: list[int]) -> Violation:
    return ctx.violation(
        "OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT",
        f"{name}.Sizes",
        concatenated,
        f"the {name}.Sizes formula yields {_shown(concatenated)}, whose meaningful dimensions do not fit "
        f"into DimensionCount {ctx.dimension_count}",
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
    if _known_different(input_batch, indices_batch):
        yield ctx.violation(
            "BATCH_SIZES_MISMATCH",
            "IndicesTensor.Sizes",
            indices_sizes,
            f"the first BatchDimensionCount ({batch}) meaningful dimensions of IndicesTensor "
            f"{_shown(indices_batch)} must equal those of InputTensor {_shown(input_batch)}",
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


COMMON_CHECKS: tuple[_Check, ...] = (
    _check_availability,
    _check_buffer_tensors,
    _check_dimension_counts,
    _check_data_types,
)

OPERATOR_CHECKS: dict[type, tuple[_Check, ...]] = {
    GatherDesc: (_check_axis, _check_gather),
    GatherElementsDesc: (_check_axis, _check_elements),
    ScatterDesc: (_check_axis, _check_elements),
    GatherNdDesc: (_check_nd,),
    GatherNd1Desc: (_check_nd,),
    ScatterNdDesc: (_check_nd,),
}
"""The operator-specific rules, by descriptor class, in the order they are reported."""


def find_violations(desc: OperatorDesc, fl: FeatureLevel) -> tuple[Violation, ...]:
    """Every violation of ``desc`` at ``fl``, messages included (the rule checks one by one).

    Raises:
        TypeError: ``desc`` is not a gather/scatter operator descriptor.
    """
    checks = OPERATOR_CHECKS.get(type(desc))
    if checks is None:
        raise TypeError(f"not a DirectML gather/scatter operator descriptor: {type(desc).__name__}")
    tensors = desc.tensors()
    ctx = _Context(desc, desc.operator_type, fl, tensors, tensors["InputTensor"].dimension_count)
    violations = tuple(v for check_fn in (*COMMON_CHECKS, *checks) for v in check_fn(ctx))
    logger.debug("%s: %d violation(s)", ctx.where, len(violations))
    return violations
