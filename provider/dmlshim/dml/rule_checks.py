"""The rule checks: each finds and describes every violation of one group of DirectML rules.

Rules that relate tensors to each other (Sizes formulas, batch dimensions) are only checked once the tensors
share one DimensionCount, and a formula is only evaluated once the fields it reads are in range: a single
mistake is reported once, not again as the failures it causes downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from .enums import (
    FeatureLevel,
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
from .rule_context import Check, RuleContext, known_different, shown, sizes_of
from .rules import Violation
from .shapes import gather_nd_output_sizes, gather_output_sizes
from .tensor_checks import (
    check_availability,
    check_buffer_tensors,
    check_data_types,
    check_dimension_counts,
)

logger = logging.getLogger(__name__)

# --- field ranges and Sizes relations (per operator) ----------------------------------------------------


def _range_violation(
    ctx: RuleContext, rule: str, field: str, value: int, low: int, high: int, bound: str
) -> Iterator[Violation]:
    """``low <= value <= high`` (inclusive, facts §4) or a violation quoting ``bound``."""
    if not low <= value <= high:
        yield ctx.violation(rule, field, value, f"{field} must be in {bound}, which is [{low}, {high}] here")


def _axis(ctx: RuleContext) -> int:
    if not isinstance(ctx.desc, GatherDesc | GatherElementsDesc | ScatterDesc):
        raise TypeError(f"{ctx.op.dml_name} has no Axis")  # a wiring bug in OPERATOR_CHECKS
    return int(ctx.desc.axis)


def _check_axis(ctx: RuleContext) -> Iterator[Violation]:
    axis = _axis(ctx)
    d = ctx.dimension_count
    if not 0 <= axis < d:
        yield ctx.violation(
            "AXIS_OUT_OF_RANGE", "Axis", axis, f"Axis must be in [0, DimensionCount), which is [0, {d}) here"
        )


def _axis_in_range(ctx: RuleContext) -> bool:
    return 0 <= _axis(ctx) < ctx.dimension_count


def _leading_ones(ctx: RuleContext, name: str, meaningful: int, count_field: str) -> Iterator[Violation]:
    """The dimensions before the last ``meaningful`` ones are padding and must be 1."""
    sizes = sizes_of(ctx.tensors[name].sizes)
    padding = sizes[: len(sizes) - meaningful]
    if known_different(padding, [1] * len(padding)):
        yield ctx.violation(
            "LEADING_DIMENSIONS_NOT_ONE",
            f"{name}.Sizes",
            sizes,
            f"with {count_field} {meaningful} the leading {len(padding)} dimensions of {name} are padding "
            f"and must be 1, Sizes is {shown(sizes)}",
        )


def _sizes_equal(
    ctx: RuleContext, name: str, expected: Sequence[int], rule_text: str, skip_axis: int | None = None
) -> Iterator[Violation]:
    # Symbolic descriptors (inspect on dynamic shapes) hold placeholder sizes; two different symbols may be
    # equal at run time, so only sizes known to differ fail here (the run checks the real ones).
    from .symbolic import differ

    actual = sizes_of(ctx.tensors[name].sizes)
    want = sizes_of(expected)
    differs = [
        i for i, (a, w) in enumerate(zip(actual, want, strict=False)) if differ(a, w) and i != skip_axis
    ]
    if differs or len(actual) != len(want):
        expected_text = "{" + ",".join(str(s) for s in shown(want)) + "}"
        if skip_axis is not None:
            expected_text += f" except dimension {skip_axis} (Axis)"
        yield ctx.violation(
            "SIZES_MISMATCH",
            f"{name}.Sizes",
            actual,
            f"{rule_text}: expected {expected_text}, got {shown(actual)}",
        )


def _output_rank_violation(ctx: RuleContext, name: str, concatenated: list[int]) -> Violation:
    return ctx.violation(
        "OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT",
        f"{name}.Sizes",
        concatenated,
        f"the {name}.Sizes formula yields {shown(concatenated)}, whose meaningful dimensions do not fit "
        f"into DimensionCount {ctx.dimension_count}",
    )


def _check_gather(ctx: RuleContext) -> Iterator[Violation]:
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
    input_sizes = sizes_of(desc.input_tensor.sizes)
    indices_sizes = sizes_of(desc.indices_tensor.sizes)
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


def _check_elements(ctx: RuleContext) -> Iterator[Violation]:
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


def _check_nd(ctx: RuleContext) -> Iterator[Violation]:
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
    input_sizes = sizes_of(desc.input_tensor.sizes)
    indices_sizes = sizes_of(desc.indices_tensor.sizes)
    input_batch = input_sizes[d - input_count : d - input_count + batch]
    indices_batch = indices_sizes[d - indices_count : d - indices_count + batch]
    if known_different(input_batch, indices_batch):
        yield ctx.violation(
            "BATCH_SIZES_MISMATCH",
            "IndicesTensor.Sizes",
            indices_sizes,
            f"the first BatchDimensionCount ({batch}) meaningful dimensions of IndicesTensor "
            f"{shown(indices_batch)} must equal those of InputTensor {shown(input_batch)}",
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


COMMON_CHECKS: tuple[Check, ...] = (
    check_availability,
    check_buffer_tensors,
    check_dimension_counts,
    check_data_types,
)

OPERATOR_CHECKS: dict[type, tuple[Check, ...]] = {
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
    ctx = RuleContext(desc, desc.operator_type, fl, tensors, tensors["InputTensor"].dimension_count)
    violations = tuple(v for check_fn in (*COMMON_CHECKS, *checks) for v in check_fn(ctx))
    logger.debug("%s: %d violation(s)", ctx.where, len(violations))
    return violations
