"""One passing and one failing descriptor per DirectML rule, at FL 1_0, 2_1, 3_0 and 4_1 where it applies.

Expected outcomes are transcribed from the reference pages' "Tensor support" tables and member text
(../shared/seeds) and from docs/directml-facts.md, never computed by dmlshim. Each case states the exact set
of (rule, field) pairs ``validate`` must report, so a single mistake must be reported once, not cascade.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlshim.dml import (
    BufferTensorDesc,
    DataType,
    FeatureLevel,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    OperatorType,
    ScatterDesc,
    ScatterNdDesc,
    TensorFlags,
)
from dmlshim.dml.validate import min_feature_level, validate

FL = FeatureLevel
DT = DataType
OP = OperatorType
F32, F16, U32 = DT.FLOAT32, DT.FLOAT16, DT.UINT32

LEVELS = (FL.FL_1_0, FL.FL_2_1, FL.FL_3_0, FL.FL_4_1)

# Availability sections of the reference pages and facts §3.
INTRODUCED = {
    OP.GATHER: FL.FL_1_0,
    OP.SCATTER: FL.FL_1_0,
    OP.GATHER_ELEMENTS: FL.FL_2_1,
    OP.GATHER_ND: FL.FL_2_1,
    OP.SCATTER_ND: FL.FL_2_1,
    OP.GATHER_ND1: FL.FL_3_0,
}
OPS = tuple(INTRODUCED)
NAME = {op: op.dml_name.removeprefix("DML_OPERATOR_") for op in OPS}  # SCATTER, not SCATTER_ELEMENTS

# "Tensor support" tables: "4" before FL 3_0, "1 to 8" from it; DML_TENSOR_DIMENSION_COUNT_MAX(1).
_FLOAT = {"FLOAT32", "FLOAT16"}
_UP_TO_32 = _FLOAT | {"INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8"}
_UP_TO_64 = _UP_TO_32 | {"FLOAT64", "INT64", "UINT64"}


def doc_dimension_counts(fl: FeatureLevel) -> set[int]:
    return {4} if fl < FL.FL_3_0 else set(range(1, 9))


def doc_generic_max(fl: FeatureLevel) -> int:
    return 5 if fl < FL.FL_3_0 else 8


def doc_data_types(op: OperatorType, fl: FeatureLevel) -> set[str]:
    if fl >= FL.FL_4_1:
        return _UP_TO_64
    if fl >= FL.FL_2_1:
        return _UP_TO_32
    return _FLOAT


def doc_index_types(fl: FeatureLevel) -> set[str]:
    return {"UINT32"} if fl < FL.FL_3_0 else {"INT64", "INT32", "UINT64", "UINT32"}


def available(op: OperatorType, fl: FeatureLevel) -> bool:
    return fl >= INTRODUCED[op]


# --- descriptor builders ------------------------------------------------------------------------------


def t(sizes: Sequence[int], dt: DataType = F32, **kwargs: object) -> BufferTensorDesc:
    return BufferTensorDesc(dt, tuple(sizes), **kwargs)  # type: ignore[arg-type]


def pad(shape: Sequence[int], d: int) -> tuple[int, ...]:
    return (1,) * (d - len(shape)) + tuple(shape)


def build(op: OperatorType, d: int = 4, data: DataType = F32, index: DataType = U32) -> OperatorDesc:
    """A descriptor DirectML accepts wherever ``op`` takes ``d`` dims, ``data`` and ``index`` types.

    Data is {3,5} right-aligned (or {5} in 1-D); the elements operators work along the last axis; the ND
    operators use 1-coordinate tuples, so the expected Sizes follow directly from the reference pages.
    """
    x = pad((3, 5), d) if d >= 2 else (5,)
    last2 = (*x[:-1], 2)
    if op is OP.GATHER:
        # {Input[0..Axis], Indices' last IndexDimensions, Input[Axis+1..]} = {.., 3, 2}
        return GatherDesc(t(x, data), t(pad((2,), d), index), t(last2, data), axis=d - 1, index_dimensions=1)
    if op is OP.GATHER_ELEMENTS:
        return GatherElementsDesc(t(x, data), t(last2, index), t(last2, data), axis=d - 1)
    if op is OP.SCATTER:
        return ScatterDesc(t(x, data), t(last2, index), t(last2, data), t(x, data), axis=d - 1)
    if d >= 2:
        # {2} tuples of size 1 into the meaningful {3,5}: {2} + {5}
        indices, counts, out = pad((2, 1), d), (2, 2), pad((2, 5), d)
    else:
        indices, counts, out = (1,), (1, 1), (1,)
    if op is OP.GATHER_ND:
        return GatherNdDesc(t(x, data), t(indices, index), t(out, data), *counts)
    if op is OP.GATHER_ND1:
        return GatherNd1Desc(t(x, data), t(indices, index), t(out, data), *counts, 0)
    return ScatterNdDesc(t(x, data), t(indices, index), t(out, data), t(x, data), *counts)


def with_tensor(desc: OperatorDesc, field: str, **changes: object) -> OperatorDesc:
    """``desc`` with one tensor field changed (TotalTensorSizeInBytes recomputed unless given)."""
    attr = {"InputTensor": "input_tensor", "IndicesTensor": "indices_tensor"}.get(field) or (
        "updates_tensor" if field == "UpdatesTensor" else "output_tensor"
    )
    old: BufferTensorDesc = getattr(desc, attr)
    kwargs: dict[str, object] = {
        "data_type": old.data_type,
        "sizes": old.sizes,
        "strides": old.strides,
        "flags": old.flags,
        "guaranteed_base_offset_alignment": old.guaranteed_base_offset_alignment,
    }
    kwargs.update(changes)
    return dataclasses.replace(desc, **{attr: BufferTensorDesc(**kwargs)})  # type: ignore[arg-type]


def data_fields(op: OperatorType) -> tuple[str, ...]:
    scatter = op in (OP.SCATTER, OP.SCATTER_ND)
    return ("InputTensor", "UpdatesTensor", "OutputTensor") if scatter else ("InputTensor", "OutputTensor")


def tensor_fields(op: OperatorType) -> tuple[str, ...]:
    return ("InputTensor", "IndicesTensor", *data_fields(op)[1:])


# --- cases ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    fl: FeatureLevel
    desc: OperatorDesc
    expected: frozenset[tuple[str, str]]
    exact: bool = True


def case(
    fl: FeatureLevel,
    op: OperatorType,
    label: str,
    desc: OperatorDesc,
    expected: Iterable[tuple[str, str]] = (),
    *,
    exact: bool = True,
) -> Case:
    expected = frozenset(expected)
    verdict = "fails" if expected else "ok"
    label = label.replace("--", "-neg")
    return Case(f"fl{fl.short}-{NAME[op]}-{label}-{verdict}", fl, desc, expected, exact)


def run(c: Case) -> None:
    got = validate(c.desc, c.fl)
    pairs = {(v.rule, v.field) for v in got}
    if c.exact:
        assert pairs == c.expected, "\n".join(map(str, got))
    else:
        assert c.expected <= pairs, "\n".join(map(str, got))
    for v in got:
        json.dumps(v.value)  # JSON-able
        assert c.fl.dml_name in v.message


def params(cases: list[Case]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("c", cases, ids=[c.id for c in cases])


def available_pairs(levels: Iterable[FeatureLevel] = LEVELS) -> list[tuple[FeatureLevel, OperatorType]]:
    return [(fl, op) for fl in levels for op in OPS if available(op, fl)]


# OPERATOR_UNAVAILABLE ------------------------------------------------------------------------------------

AVAILABILITY = [
    case(fl, op, "available", build(op), [] if available(op, fl) else [("OPERATOR_UNAVAILABLE", "Type")])
    for fl in LEVELS
    for op in OPS
]


@params(AVAILABILITY)
def test_operator_availability(c: Case) -> None:
    run(c)


# DIMENSION_COUNT_UNSUPPORTED, TENSOR_DIMENSION_COUNT_OUT_OF_RANGE -----------------------------------------


def _dimension_case(fl: FeatureLevel, op: OperatorType, d: int) -> Case:
    expected: list[tuple[str, str]] = []
    for field in tensor_fields(op):
        if d not in doc_dimension_counts(fl):
            expected.append(("DIMENSION_COUNT_UNSUPPORTED", f"{field}.DimensionCount"))
        if d > doc_generic_max(fl):
            expected.append(("TENSOR_DIMENSION_COUNT_OUT_OF_RANGE", f"{field}.DimensionCount"))
    return case(fl, op, f"{d}d", build(op, d), expected)


DIMENSIONS = [_dimension_case(fl, op, d) for fl, op in available_pairs() for d in (1, 3, 4, 5, 6, 8, 9)]


@params(DIMENSIONS)
def test_dimension_count_per_level(c: Case) -> None:
    run(c)


# DIMENSION_COUNT_MISMATCH ---------------------------------------------------------------------------------


def _mismatch_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        base = build(op)
        for field in ("IndicesTensor", "OutputTensor"):
            old = base.tensors()[field]
            desc = with_tensor(base, field, sizes=(1, *old.sizes))
            expected = [("DIMENSION_COUNT_MISMATCH", f"{field}.DimensionCount")]
            if fl < FL.FL_3_0:  # 5 is not in the table's "4" (but within DML_TENSOR_DIMENSION_COUNT_MAX)
                expected.append(("DIMENSION_COUNT_UNSUPPORTED", f"{field}.DimensionCount"))
            cases.append(case(fl, op, f"{field}-5d", desc, expected))
        cases.append(case(fl, op, "same-dimension-count", base))
    return cases


@params(_mismatch_cases())
def test_dimension_count_mismatch(c: Case) -> None:
    run(c)


# DATA_TYPE_UNSUPPORTED: the whole support matrix ----------------------------------------------------------


def _data_type_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        for dt in DT:
            ok = dt.name in doc_data_types(op, fl)
            expected = [] if ok else [("DATA_TYPE_UNSUPPORTED", f"{f}.DataType") for f in data_fields(op)]
            cases.append(case(fl, op, f"data-type-{dt.name.lower()}", build(op, data=dt), expected))
            ok = dt.name in doc_index_types(fl)
            expected = [] if ok else [("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType")]
            cases.append(case(fl, op, f"index-type-{dt.name.lower()}", build(op, index=dt), expected))
    return cases


@params(_data_type_cases())
def test_data_type_support_matrix(c: Case) -> None:
    run(c)


# DATA_TYPE_MISMATCH ----------------------------------------------------------------------------------------


def _type_mismatch_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        base = build(op)
        for field in data_fields(op)[1:]:
            desc = with_tensor(base, field, data_type=F16)
            cases.append(
                case(fl, op, f"{field}-float16", desc, [("DATA_TYPE_MISMATCH", f"{field}.DataType")])
            )
        cases.append(case(fl, op, "all-float16", build(op, data=F16)))
    return cases


@params(_type_mismatch_cases())
def test_data_type_mismatch(c: Case) -> None:
    run(c)


# FLAGS_INVALID ---------------------------------------------------------------------------------------------


def _flags_cases() -> list[Case]:
    cases = []
    owned = TensorFlags.OWNED_BY_DML
    for fl, op in available_pairs():
        base = build(op)
        for field in tensor_fields(op):
            desc = with_tensor(base, field, flags=owned)
            bad = [("FLAGS_INVALID", f"{field}.Flags")] if field == "OutputTensor" else []
            cases.append(case(fl, op, f"{field}-owned-by-dml", desc, bad))
        desc = with_tensor(base, "InputTensor", flags=TensorFlags(2))
        cases.append(case(fl, op, "InputTensor-flag-0x2", desc, [("FLAGS_INVALID", "InputTensor.Flags")]))
    return cases


@params(_flags_cases())
def test_flags(c: Case) -> None:
    run(c)


# Buffer tensor rules: SIZE_ZERO, UINT_OUT_OF_RANGE, STRIDES_LENGTH_MISMATCH, TOTAL_TENSOR_SIZE_TOO_SMALL,
# BASE_OFFSET_ALIGNMENT_INVALID ------------------------------------------------------------------------------


def _buffer_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        base = build(op)  # InputTensor {1,1,3,5} FLOAT32: 60 bytes packed
        sizes = base.input_tensor.sizes
        field = "InputTensor"
        cases += [
            case(
                fl,
                op,
                "size-zero",
                with_tensor(base, field, sizes=(0, *sizes[1:])),
                [("SIZE_ZERO", f"{field}.Sizes")],
                exact=False,
            ),
            case(
                fl,
                op,
                "size-negative",
                with_tensor(base, field, sizes=(-1, *sizes[1:])),
                [("UINT_OUT_OF_RANGE", f"{field}.Sizes")],
                exact=False,
            ),
            case(
                fl,
                op,
                "strides-3-for-4-dims",
                with_tensor(base, field, strides=(15, 5, 1)),
                [("STRIDES_LENGTH_MISMATCH", f"{field}.Strides")],
            ),
            case(
                fl,
                op,
                "strides-negative",
                with_tensor(base, field, strides=(15, 15, -5, 1)),
                [("UINT_OUT_OF_RANGE", f"{field}.Strides")],
            ),
            case(fl, op, "strides-packed", with_tensor(base, field, strides=(15, 15, 5, 1))),
            case(fl, op, "strides-broadcast-0", with_tensor(base, field, strides=(0, 0, 0, 1))),
            # Rows padded to 8 elements: (2*8 + 4*1 + 1) * 4 bytes = 84 (DMLCalcBufferTensorSize).
            case(
                fl,
                op,
                "padded-strides-84-bytes",
                with_tensor(base, field, strides=(24, 24, 8, 1), total_tensor_size_in_bytes=84),
            ),
            case(
                fl,
                op,
                "padded-strides-80-bytes",
                with_tensor(base, field, strides=(24, 24, 8, 1), total_tensor_size_in_bytes=80),
                [("TOTAL_TENSOR_SIZE_TOO_SMALL", f"{field}.TotalTensorSizeInBytes")],
            ),
            case(fl, op, "packed-60-bytes", with_tensor(base, field, total_tensor_size_in_bytes=60)),
            case(
                fl,
                op,
                "packed-56-bytes",
                with_tensor(base, field, total_tensor_size_in_bytes=56),
                [("TOTAL_TENSOR_SIZE_TOO_SMALL", f"{field}.TotalTensorSizeInBytes")],
            ),
            case(
                fl, op, "larger-buffer-4096-bytes", with_tensor(base, field, total_tensor_size_in_bytes=4096)
            ),
            case(fl, op, "alignment-0", with_tensor(base, field, guaranteed_base_offset_alignment=0)),
            case(fl, op, "alignment-16", with_tensor(base, field, guaranteed_base_offset_alignment=16)),
            case(fl, op, "alignment-256", with_tensor(base, field, guaranteed_base_offset_alignment=256)),
            case(
                fl,
                op,
                "alignment-8",
                with_tensor(base, field, guaranteed_base_offset_alignment=8),
                [("BASE_OFFSET_ALIGNMENT_INVALID", f"{field}.GuaranteedBaseOffsetAlignment")],
            ),
            case(
                fl,
                op,
                "alignment-48",
                with_tensor(base, field, guaranteed_base_offset_alignment=48),
                [("BASE_OFFSET_ALIGNMENT_INVALID", f"{field}.GuaranteedBaseOffsetAlignment")],
            ),
        ]
        # {1,1,3,5} FLOAT16 is 30 bytes, rounded up to a multiple of 4: 32.
        half = build(op, data=F16)
        cases += [
            case(fl, op, "float16-32-bytes", with_tensor(half, field, total_tensor_size_in_bytes=32)),
            case(
                fl,
                op,
                "float16-30-bytes",
                with_tensor(half, field, total_tensor_size_in_bytes=30),
                [("TOTAL_TENSOR_SIZE_TOO_SMALL", f"{field}.TotalTensorSizeInBytes")],
            ),
        ]
    return cases


@params(_buffer_cases())
def test_buffer_tensor_rules(c: Case) -> None:
    run(c)


# ELEMENT_COUNT_EXCEEDS_MAX ---------------------------------------------------------------------------------


def _huge(op: OperatorType, rows: int, cols: int) -> OperatorDesc:
    """InputTensor {1,1,rows,cols}; every other tensor small except a scatter's OutputTensor (== Input)."""
    x = (1, 1, rows, cols)
    if op is OP.GATHER:
        return GatherDesc(t(x), t((1, 1, 1, 2), U32), t((1, 1, rows, 2)), axis=3, index_dimensions=1)
    if op is OP.GATHER_ELEMENTS:
        return GatherElementsDesc(t(x), t((1, 1, rows, 1), U32), t((1, 1, rows, 1)), axis=3)
    if op is OP.SCATTER:
        return ScatterDesc(t(x), t((1, 1, rows, 1), U32), t((1, 1, rows, 1)), t(x), axis=3)
    # one 1-tuple picks a row: Sizes {cols}
    if op is OP.GATHER_ND:
        return GatherNdDesc(t(x), t((1, 1, 1, 1), U32), t((1, 1, 1, cols)), 2, 1)
    if op is OP.GATHER_ND1:
        return GatherNd1Desc(t(x), t((1, 1, 1, 1), U32), t((1, 1, 1, cols)), 2, 1, 0)
    return ScatterNdDesc(t(x), t((1, 1, 1, 1), U32), t((1, 1, 1, cols)), t(x), 2, 1)


def _element_count_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        over = [("ELEMENT_COUNT_EXCEEDS_MAX", "InputTensor.Sizes")]
        if op in (OP.SCATTER, OP.SCATTER_ND):
            over.append(("ELEMENT_COUNT_EXCEEDS_MAX", "OutputTensor.Sizes"))
        cases.append(case(fl, op, "elements-2^32-1", _huge(op, 65535, 65537)))  # 65535*65537 = 2^32-1
        cases.append(case(fl, op, "elements-2^32", _huge(op, 65536, 65536), over))
    return cases


@params(_element_count_cases())
def test_element_count(c: Case) -> None:
    run(c)


# AXIS_OUT_OF_RANGE ------------------------------------------------------------------------------------------


def _axis_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        if op not in (OP.GATHER, OP.GATHER_ELEMENTS, OP.SCATTER):
            continue
        for d in (4, 5, 8) if fl >= FL.FL_3_0 else (4,):
            base = build(op, d)
            cases.append(case(fl, op, f"{d}d-axis-{d - 1}", base))
            for axis in (d, -1):
                desc: OperatorDesc = dataclasses.replace(base, axis=axis)  # type: ignore[arg-type]
                cases.append(case(fl, op, f"{d}d-axis-{axis}", desc, [("AXIS_OUT_OF_RANGE", "Axis")]))
        # Axis 0 with Sizes built for it (only Indices' dim 0 may differ from Input's).
        if op is OP.GATHER:
            desc = GatherDesc(
                t((1, 1, 3, 5)), t((1, 1, 1, 2), U32), t((2, 1, 3, 5)), axis=0, index_dimensions=1
            )
        elif op is OP.GATHER_ELEMENTS:
            desc = GatherElementsDesc(t((2, 1, 3, 5)), t((3, 1, 3, 5), U32), t((3, 1, 3, 5)), axis=0)
        else:
            desc = ScatterDesc(
                t((2, 1, 3, 5)), t((3, 1, 3, 5), U32), t((3, 1, 3, 5)), t((2, 1, 3, 5)), axis=0
            )
        cases.append(case(fl, op, "4d-axis-0", desc))
    return cases


@params(_axis_cases())
def test_axis(c: Case) -> None:
    run(c)


# INDEX_DIMENSIONS_OUT_OF_RANGE, LEADING_DIMENSIONS_NOT_ONE and OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT (GATHER)


def _gather_cases() -> list[Case]:
    cases = []
    op = OP.GATHER
    for fl in LEVELS:
        x = t((1, 1, 3, 5))
        # IndexDimensions = DimensionCount is allowed (inclusive bound, facts §4):
        # {} + {1,1,1,2} + {1,3,5} -> leading 1s dropped -> {2,1,3,5}
        cases.append(
            case(fl, op, "index-dimensions-4", GatherDesc(x, t((1, 1, 1, 2), U32), t((2, 1, 3, 5)), 0, 4))
        )
        bad = GatherDesc(x, t((1, 1, 1, 2), U32), t((2, 1, 3, 5)), 0, 5)
        cases.append(
            case(fl, op, "index-dimensions-5", bad, [("INDEX_DIMENSIONS_OUT_OF_RANGE", "IndexDimensions")])
        )
        bad = GatherDesc(x, t((1, 1, 1, 2), U32), t((2, 1, 3, 5)), 0, -1)
        cases.append(
            case(fl, op, "index-dimensions--1", bad, [("INDEX_DIMENSIONS_OUT_OF_RANGE", "IndexDimensions")])
        )
        # IndexDimensions 0 (a scalar index) removes the axis: {1,1,3} -> {1,1,1,3}
        cases.append(
            case(fl, op, "index-dimensions-0", GatherDesc(x, t((1, 1, 1, 1), U32), t((1, 1, 1, 3)), 3, 0))
        )
        # IndexDimensions 2 of {1,1,2,3}: {1,1,3} + {2,3} -> {1,3,2,3}
        cases.append(
            case(fl, op, "index-dimensions-2", GatherDesc(x, t((1, 1, 2, 3), U32), t((1, 3, 2, 3)), 3, 2))
        )
        bad = GatherDesc(x, t((2, 1, 1, 2), U32), t((1, 1, 3, 2)), 3, 1)
        cases.append(
            case(
                fl, op, "indices-padding-not-1", bad, [("LEADING_DIMENSIONS_NOT_ONE", "IndicesTensor.Sizes")]
            )
        )
        # {} + {2,3} + {3,4,5}: 5 meaningful dims do not fit into 4
        bad = GatherDesc(t((2, 3, 4, 5)), t((1, 1, 2, 3), U32), t((2, 3, 4, 5)), 0, 2)
        cases.append(
            case(
                fl,
                op,
                "output-rank-5-in-4d",
                bad,
                [("OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT", "OutputTensor.Sizes")],
            )
        )
        bad = GatherDesc(x, t((1, 1, 1, 2), U32), t((1, 1, 3, 3)), 3, 1)
        cases.append(case(fl, op, "output-sizes-wrong", bad, [("SIZES_MISMATCH", "OutputTensor.Sizes")]))
    return cases


@params(_gather_cases())
def test_gather_fields(c: Case) -> None:
    run(c)


# SIZES_MISMATCH for GATHER_ELEMENTS and SCATTER -------------------------------------------------------------


def _elements_cases() -> list[Case]:
    cases = []
    bad: OperatorDesc
    for fl, op in available_pairs():
        x = t((1, 1, 3, 5))
        if op is OP.GATHER_ELEMENTS:
            # Indices longer than Input on Axis is fine: only the other dims must match.
            cases.append(
                case(
                    fl,
                    op,
                    "indices-7-on-axis",
                    GatherElementsDesc(x, t((1, 1, 3, 7), U32), t((1, 1, 3, 7)), 3),
                )
            )
            bad = GatherElementsDesc(x, t((1, 1, 2, 2), U32), t((1, 1, 2, 2)), 3)
            cases.append(
                case(fl, op, "indices-smaller-off-axis", bad, [("SIZES_MISMATCH", "IndicesTensor.Sizes")])
            )
            bad = GatherElementsDesc(x, t((1, 1, 3, 2), U32), t((1, 1, 3, 3)), 3)
            cases.append(case(fl, op, "output-not-indices", bad, [("SIZES_MISMATCH", "OutputTensor.Sizes")]))
        elif op is OP.SCATTER:
            idx = t((1, 1, 3, 2), U32)
            bad = ScatterDesc(x, t((1, 1, 2, 2), U32), t((1, 1, 2, 2)), x, 3)
            cases.append(
                case(fl, op, "indices-smaller-off-axis", bad, [("SIZES_MISMATCH", "IndicesTensor.Sizes")])
            )
            bad = ScatterDesc(x, idx, t((1, 1, 3, 3)), x, 3)
            cases.append(
                case(fl, op, "updates-not-indices", bad, [("SIZES_MISMATCH", "UpdatesTensor.Sizes")])
            )
            bad = ScatterDesc(x, idx, t((1, 1, 3, 2)), t((1, 1, 3, 6)), 3)
            cases.append(case(fl, op, "output-not-input", bad, [("SIZES_MISMATCH", "OutputTensor.Sizes")]))
    return cases


@params(_elements_cases())
def test_elements_sizes(c: Case) -> None:
    run(c)


# GATHER_ND, GATHER_ND1, SCATTER_ND: counts, padding, batch, tuple size, Sizes formulas ----------------------


def _nd(
    op: OperatorType, x: Sequence[int], idx: Sequence[int], out: Sequence[int], ic: int, idc: int, b: int = 0
) -> OperatorDesc:
    """For SCATTER_ND ``out`` is UpdatesTensor.Sizes and OutputTensor is InputTensor."""
    if op is OP.GATHER_ND:
        assert b == 0
        return GatherNdDesc(t(x), t(idx, U32), t(out), ic, idc)
    if op is OP.GATHER_ND1:
        return GatherNd1Desc(t(x), t(idx, U32), t(out), ic, idc, b)
    assert b == 0
    return ScatterNdDesc(t(x), t(idx, U32), t(out), t(x), ic, idc)


def _nd_cases() -> list[Case]:
    cases = []
    for fl, op in available_pairs():
        if op not in (OP.GATHER_ND, OP.GATHER_ND1, OP.SCATTER_ND):
            continue
        sized = "UpdatesTensor" if op is OP.SCATTER_ND else "OutputTensor"
        x = (1, 1, 3, 5)
        # InputDimensionCount = DimensionCount is allowed (inclusive, facts §4; the ScatterND page says ")"):
        # {2} + {1,3,5} = {2,1,3,5}
        cases.append(
            case(fl, op, "input-dimension-count-4", _nd(op, (2, 1, 3, 5), (1, 1, 2, 1), (2, 1, 3, 5), 4, 2))
        )
        for ic in (0, 5):
            bad = _nd(op, x, (1, 1, 2, 1), (1, 1, 2, 5), ic, 2)
            cases.append(
                case(
                    fl,
                    op,
                    f"input-dimension-count-{ic}",
                    bad,
                    [("INPUT_DIMENSION_COUNT_OUT_OF_RANGE", "InputDimensionCount")],
                )
            )
        # IndicesDimensionCount = DimensionCount: {2,1,2} + {5} = {2,1,2,5}
        cases.append(case(fl, op, "indices-dimension-count-4", _nd(op, x, (2, 1, 2, 1), (2, 1, 2, 5), 2, 4)))
        for idc in (0, 5):
            bad = _nd(op, x, (1, 1, 2, 1), (1, 1, 2, 5), 2, idc)
            cases.append(
                case(
                    fl,
                    op,
                    f"indices-dimension-count-{idc}",
                    bad,
                    [("INDICES_DIMENSION_COUNT_OUT_OF_RANGE", "IndicesDimensionCount")],
                )
            )
        bad = _nd(op, (2, 1, 3, 5), (1, 1, 2, 1), (1, 1, 2, 5), 2, 2)
        cases.append(
            case(fl, op, "input-padding-not-1", bad, [("LEADING_DIMENSIONS_NOT_ONE", "InputTensor.Sizes")])
        )
        bad = _nd(op, x, (2, 1, 2, 1), (1, 1, 2, 5), 2, 2)
        cases.append(
            case(
                fl, op, "indices-padding-not-1", bad, [("LEADING_DIMENSIONS_NOT_ONE", "IndicesTensor.Sizes")]
            )
        )
        # Tuple size 2 = InputDimensionCount: whole elements, {2} + {} = {1,1,1,2}
        cases.append(case(fl, op, "tuple-size-2", _nd(op, x, (1, 1, 2, 2), (1, 1, 1, 2), 2, 2)))
        bad = _nd(op, x, (1, 1, 2, 3), (1, 1, 1, 2), 2, 2)
        cases.append(
            case(fl, op, "tuple-size-3", bad, [("INDEX_TUPLE_SIZE_OUT_OF_RANGE", "IndicesTensor.Sizes")])
        )
        bad = _nd(op, (2, 3, 4, 5), (2, 3, 4, 1), (2, 3, 4, 5), 4, 4)
        cases.append(
            case(
                fl,
                op,
                "output-rank-6-in-4d",
                bad,
                [("OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT", f"{sized}.Sizes")],
            )
        )
        bad = _nd(op, x, (1, 1, 2, 1), (1, 1, 2, 3), 2, 2)
        cases.append(case(fl, op, f"{sized}-sizes-wrong", bad, [("SIZES_MISMATCH", f"{sized}.Sizes")]))
        if op is OP.SCATTER_ND:
            bad = ScatterNdDesc(t(x), t((1, 1, 2, 1), U32), t((1, 1, 2, 5)), t((1, 1, 3, 6)), 2, 2)
            cases.append(case(fl, op, "output-not-input", bad, [("SIZES_MISMATCH", "OutputTensor.Sizes")]))
        if op is OP.GATHER_ND1:
            # Input {2,3} batches; Indices {2,3,1}: per batch a 1-tuple into the last dim -> {2,3}.
            xb = (1, 2, 3, 5)
            cases.append(case(fl, op, "batch-2", _nd(op, xb, (1, 2, 3, 1), (1, 1, 2, 3), 3, 3, 2)))
            cases.append(case(fl, op, "batch-0", _nd(op, xb, (1, 2, 3, 1), (2, 3, 3, 5), 3, 3, 0)))
            for b in (3, -1):  # above min(InputDimensionCount 3, IndicesDimensionCount 3 - 1) = 2; negative
                bad = _nd(op, xb, (1, 2, 3, 1), (1, 1, 2, 3), 3, 3, b)
                cases.append(
                    case(
                        fl,
                        op,
                        f"batch-{b}",
                        bad,
                        [("BATCH_DIMENSION_COUNT_OUT_OF_RANGE", "BatchDimensionCount")],
                    )
                )
            bad = _nd(op, xb, (1, 2, 4, 1), (1, 1, 2, 4), 3, 3, 2)
            cases.append(
                case(fl, op, "batch-sizes-2x4-vs-2x3", bad, [("BATCH_SIZES_MISMATCH", "IndicesTensor.Sizes")])
            )
            # With 1 batch dim the tuple size is at most InputDimensionCount - 1.
            cases.append(case(fl, op, "batch-1-tuple-1", _nd(op, x, (1, 1, 3, 1), (1, 1, 1, 3), 2, 2, 1)))
            bad = _nd(op, x, (1, 1, 3, 2), (1, 1, 1, 3), 2, 2, 1)
            cases.append(
                case(
                    fl, op, "batch-1-tuple-2", bad, [("INDEX_TUPLE_SIZE_OUT_OF_RANGE", "IndicesTensor.Sizes")]
                )
            )
    return cases


@params(_nd_cases())
def test_nd_fields(c: Case) -> None:
    run(c)


# Upward closure: a descriptor valid at some level stays valid at every later one ----------------------------


@settings(max_examples=150, deadline=None)
@given(
    op=st.sampled_from(OPS),
    d=st.integers(1, 9),
    data=st.sampled_from(list(DT)),
    index=st.sampled_from(list(DT)),
)
def test_validity_is_upward_closed(op: OperatorType, d: int, data: DataType, index: DataType) -> None:
    desc = build(op, d, data, index)
    valid = [not validate(desc, fl) for fl in sorted(FL)]
    first = min_feature_level(desc)
    if first is None:
        assert not any(valid)
    else:
        assert valid == [fl >= first for fl in sorted(FL)]
        # ... and the documented level is the max of the per-aspect levels of the tables.
        needed = max(
            INTRODUCED[op],
            FL.FL_1_0 if d == 4 else FL.FL_3_0,
            FL.FL_4_1 if data.is_64bit else FL.FL_2_1 if data.name not in _FLOAT else FL.FL_1_0,
            FL.FL_1_0 if index is U32 else FL.FL_3_0,
        )
        assert first == needed


def test_every_rule_code_has_a_failing_case() -> None:
    from dmlshim.dml.validate import RULES

    cases = [
        *AVAILABILITY,
        *DIMENSIONS,
        *_mismatch_cases(),
        *_data_type_cases(),
        *_type_mismatch_cases(),
        *_flags_cases(),
        *_buffer_cases(),
        *_element_count_cases(),
        *_axis_cases(),
        *_gather_cases(),
        *_elements_cases(),
        *_nd_cases(),
    ]
    covered = {rule for c in cases for rule, _ in c.expected}
    assert covered == set(RULES)
