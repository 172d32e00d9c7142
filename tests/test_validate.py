"""``dmlshim.dml.validate``: the seeds' examples, min_feature_level, several problems at once, check().

Expected outcomes come from the reference pages (../shared/seeds) and docs/directml-facts.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest

from dmlshim.dml import (
    BufferTensorDesc,
    DataType,
    FeatureLevel,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
    TensorFlags,
)
from dmlshim.dml.validate import RULES, Violation, check, min_feature_level, validate
from dmlshim.errors import DmlShimError, InvalidDescriptorError

FL = FeatureLevel
DT = DataType
F32, F16, U32 = DT.FLOAT32, DT.FLOAT16, DT.UINT32


def t(sizes: Sequence[int], dt: DataType = F32, **kwargs: object) -> BufferTensorDesc:
    return BufferTensorDesc(dt, tuple(sizes), **kwargs)  # type: ignore[arg-type]


def pairs(desc: OperatorDesc, fl: FeatureLevel) -> set[tuple[str, str]]:
    return {(v.rule, v.field) for v in validate(desc, fl)}


def unsupported_dims(*fields: str) -> set[tuple[str, str]]:
    return {("DIMENSION_COUNT_UNSUPPORTED", f"{f}.DimensionCount") for f in fields}


# --- the seeds' examples ------------------------------------------------------------------------------------

GE_FIELDS = ("InputTensor", "IndicesTensor", "OutputTensor")
SC_FIELDS = ("InputTensor", "IndicesTensor", "UpdatesTensor", "OutputTensor")

# dml_gather_elements.md: Axis 0, Input {3,3}, Indices {2,3} UINT32, Output {2,3} (FLOAT32 meant, facts §4).
GE_2D = GatherElementsDesc(t((3, 3)), t((2, 3), U32), t((2, 3)), axis=0)
GE_4D = GatherElementsDesc(t((1, 1, 3, 3)), t((1, 1, 2, 3), U32), t((1, 1, 2, 3)), axis=2)
GE_AS_PRINTED = dataclasses.replace(GE_2D, output_tensor=t((2, 3), U32))

# dml_gather_nd.md example 1 (2-D), example 2 (4-D) and the Sizes example ({3,4,5,6,7} -> {1,1,2,6,7}).
GND_EX1 = GatherNdDesc(t((2, 2)), t((2, 1), U32), t((2, 2)), 2, 2)
GND_EX1_4D = GatherNdDesc(t((1, 1, 2, 2)), t((1, 1, 2, 1), U32), t((1, 1, 2, 2)), 2, 2)
GND_EX2 = GatherNdDesc(t((1, 2, 2, 2)), t((1, 1, 2, 2), U32), t((1, 1, 2, 2)), 3, 2)
GND_SIZES = GatherNdDesc(t((3, 4, 5, 6, 7)), t((1, 1, 1, 2, 3), U32), t((1, 1, 2, 6, 7)), 5, 3)
GND1_SIZES = GatherNd1Desc(t((3, 4, 5, 6, 7)), t((1, 1, 1, 2, 3), U32), t((1, 1, 2, 6, 7)), 5, 3, 0)

# dml_scatter_elements.md example 1 (1-D) and example 2 (Input {3,3} meant; the page prints {2,3}).
SC_EX1 = ScatterDesc(t((5,)), t((4,), U32), t((4,)), t((5,)), axis=0)
SC_EX1_4D = ScatterDesc(t((1, 1, 1, 5)), t((1, 1, 1, 4), U32), t((1, 1, 1, 4)), t((1, 1, 1, 5)), axis=3)
SC_EX2 = ScatterDesc(t((3, 3)), t((2, 3), U32), t((2, 3)), t((3, 3)), axis=0)
SC_EX2_AS_PRINTED = dataclasses.replace(SC_EX2, input_tensor=t((2, 3)))

# dml_scatter_nd.md: Input {8}, Indices {4,1}, Updates {4}; padded to one DimensionCount (facts §4).
SND = ScatterNdDesc(t((1, 8)), t((4, 1), U32), t((1, 4)), t((1, 8)), 1, 2)
SND_4D = ScatterNdDesc(t((1, 1, 1, 8)), t((1, 1, 4, 1), U32), t((1, 1, 1, 4)), t((1, 1, 1, 8)), 1, 2)
SND_FLOAT_INDICES = dataclasses.replace(SND, indices_tensor=t((4, 1), F32))
SND_AS_PRINTED = ScatterNdDesc(t((8,)), t((4, 1), F32), t((4,)), t((8,)), 1, 2)

SEED_CASES = [
    ("fl2_1-GATHER_ELEMENTS-seed-right-aligned-4d-ok", GE_4D, FL.FL_2_1, set()),
    ("fl3_0-GATHER_ELEMENTS-seed-2d-ok", GE_2D, FL.FL_3_0, set()),
    ("fl4_1-GATHER_ELEMENTS-seed-2d-ok", GE_2D, FL.FL_4_1, set()),
    ("fl2_1-GATHER_ELEMENTS-seed-2d-fails", GE_2D, FL.FL_2_1, unsupported_dims(*GE_FIELDS)),
    ("fl1_0-GATHER_ELEMENTS-seed-fails", GE_4D, FL.FL_1_0, {("OPERATOR_UNAVAILABLE", "Type")}),
    (
        "fl3_0-GATHER_ELEMENTS-seed-uint32-output-typo-fails",
        GE_AS_PRINTED,
        FL.FL_3_0,
        {("DATA_TYPE_MISMATCH", "OutputTensor.DataType")},
    ),
    ("fl3_0-GATHER_ND-seed-example-1-ok", GND_EX1, FL.FL_3_0, set()),
    ("fl2_1-GATHER_ND-seed-example-1-right-aligned-ok", GND_EX1_4D, FL.FL_2_1, set()),
    ("fl2_1-GATHER_ND-seed-example-2-ok", GND_EX2, FL.FL_2_1, set()),
    ("fl3_0-GATHER_ND-seed-sizes-example-ok", GND_SIZES, FL.FL_3_0, set()),
    ("fl3_0-GATHER_ND1-seed-sizes-example-ok", GND1_SIZES, FL.FL_3_0, set()),
    ("fl2_1-GATHER_ND-seed-sizes-example-5d-fails", GND_SIZES, FL.FL_2_1, unsupported_dims(*GE_FIELDS)),
    ("fl3_0-SCATTER-seed-example-1-ok", SC_EX1, FL.FL_3_0, set()),
    ("fl1_0-SCATTER-seed-example-1-right-aligned-ok", SC_EX1_4D, FL.FL_1_0, set()),
    ("fl1_0-SCATTER-seed-example-1-1d-fails", SC_EX1, FL.FL_1_0, unsupported_dims(*SC_FIELDS)),
    ("fl3_0-SCATTER-seed-example-2-ok", SC_EX2, FL.FL_3_0, set()),
    (
        "fl3_0-SCATTER-seed-example-2-input-2x3-typo-fails",
        SC_EX2_AS_PRINTED,
        FL.FL_3_0,
        {("SIZES_MISMATCH", "OutputTensor.Sizes")},
    ),
    ("fl3_0-SCATTER_ND-seed-uint32-indices-ok", SND, FL.FL_3_0, set()),
    ("fl2_1-SCATTER_ND-seed-right-aligned-4d-ok", SND_4D, FL.FL_2_1, set()),
    (
        "fl3_0-SCATTER_ND-seed-float32-indices-typo-fails",
        SND_FLOAT_INDICES,
        FL.FL_3_0,
        {("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType")},
    ),
    (
        "fl3_0-SCATTER_ND-seed-as-printed-fails",
        SND_AS_PRINTED,
        FL.FL_3_0,
        {
            ("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType"),
            ("DIMENSION_COUNT_MISMATCH", "IndicesTensor.DimensionCount"),
        },
    ),
]


@pytest.mark.parametrize(
    ("desc", "fl", "expected"), [c[1:] for c in SEED_CASES], ids=[c[0] for c in SEED_CASES]
)
def test_seed_examples(desc: OperatorDesc, fl: FeatureLevel, expected: set[tuple[str, str]]) -> None:
    assert pairs(desc, fl) == expected


def test_seed_float32_indices_violation_names_field_and_value() -> None:
    (v,) = validate(SND_FLOAT_INDICES, FL.FL_3_0)
    assert v == Violation(v.rule, "IndicesTensor.DataType", v.message, "DML_TENSOR_DATA_TYPE_FLOAT32")
    assert v.rule == "DATA_TYPE_UNSUPPORTED"
    assert "DML_FEATURE_LEVEL_3_0" in v.message and "INT64" in v.message


# --- min_feature_level --------------------------------------------------------------------------------------

X4 = (1, 1, 3, 5)


def gather(data: DataType = F32, index: DataType = U32, d: int = 4) -> GatherDesc:
    x = (1,) * (d - 2) + (3, 5)
    return GatherDesc(t(x, data), t((1,) * (d - 1) + (2,), index), t((*x[:-1], 2), data), d - 1, 1)


def scatter(data: DataType = F32, index: DataType = U32) -> ScatterDesc:
    return ScatterDesc(t(X4, data), t((1, 1, 3, 2), index), t((1, 1, 3, 2), data), t(X4, data), 3)


MIN_LEVEL_CASES = [
    ("GATHER-float32", gather(), FL.FL_1_0),
    ("GATHER-float16", gather(F16), FL.FL_1_0),
    ("GATHER-int32", gather(DT.INT32), FL.FL_2_1),
    ("GATHER-int64-data", gather(DT.INT64), FL.FL_4_1),
    ("GATHER-float64-data", gather(DT.FLOAT64), FL.FL_4_1),
    ("GATHER-int64-indices", gather(index=DT.INT64), FL.FL_3_0),
    ("GATHER-3d", gather(d=3), FL.FL_3_0),
    ("GATHER-9d", gather(d=9), None),
    ("GATHER-uint4-data", gather(DT.UINT4), None),
    ("GATHER-unknown-data", gather(DT.UNKNOWN), None),
    ("GATHER-int16-indices", gather(index=DT.INT16), None),
    ("SCATTER-float32-uint32", scatter(), FL.FL_1_0),
    ("SCATTER-int8", scatter(DT.INT8), FL.FL_2_1),
    ("SCATTER-uint64-data", scatter(DT.UINT64), FL.FL_4_1),
    ("SCATTER-int32-indices", scatter(index=DT.INT32), FL.FL_3_0),
    ("GATHER_ELEMENTS-4d", GE_4D, FL.FL_2_1),
    ("GATHER_ELEMENTS-2d", GE_2D, FL.FL_3_0),
    (
        "GATHER_ELEMENTS-5d",
        GatherElementsDesc(t((1, 1, 1, 3, 3)), t((1, 1, 1, 2, 3), U32), t((1, 1, 1, 2, 3)), axis=3),
        FL.FL_3_0,
    ),
    ("GATHER_ND-4d", GND_EX2, FL.FL_2_1),
    (
        "GATHER_ND1-4d",
        GatherNd1Desc(t((1, 2, 2, 2)), t((1, 1, 2, 2), U32), t((1, 1, 2, 2)), 3, 2, 0),
        FL.FL_3_0,
    ),
    ("SCATTER_ND-4d", SND_4D, FL.FL_2_1),
    ("SCATTER_ND-float32-indices", SND_FLOAT_INDICES, None),
    ("GATHER_ELEMENTS-typo-output", GE_AS_PRINTED, None),
]


@pytest.mark.parametrize(
    ("desc", "level"), [c[1:] for c in MIN_LEVEL_CASES], ids=[c[0] for c in MIN_LEVEL_CASES]
)
def test_min_feature_level(desc: OperatorDesc, level: FeatureLevel | None) -> None:
    assert min_feature_level(desc) == level


# --- several problems at once -------------------------------------------------------------------------------


def test_every_violation_is_reported() -> None:
    # FL 1_0 SCATTER: INT8 data (floats only), INT64 indices (UINT32 only), Output FLOAT16 (not Input's type)
    # and OWNED_BY_DML (input tensors only), Axis 4 of 4 dims, and a too small Updates buffer.
    desc = ScatterDesc(
        t(X4, DT.INT8),
        t((1, 1, 3, 2), DT.INT64),
        t((1, 1, 3, 2), DT.INT8, total_tensor_size_in_bytes=4),
        t(X4, F16, flags=TensorFlags.OWNED_BY_DML),
        axis=4,
    )
    got = validate(desc, FL.FL_1_0)
    assert {(v.rule, v.field) for v in got} == {
        ("DATA_TYPE_UNSUPPORTED", "InputTensor.DataType"),
        ("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType"),
        ("DATA_TYPE_UNSUPPORTED", "UpdatesTensor.DataType"),
        ("DATA_TYPE_MISMATCH", "OutputTensor.DataType"),
        ("FLAGS_INVALID", "OutputTensor.Flags"),
        ("AXIS_OUT_OF_RANGE", "Axis"),
        ("TOTAL_TENSOR_SIZE_TOO_SMALL", "UpdatesTensor.TotalTensorSizeInBytes"),
    }
    values = {(v.rule, v.field): v.value for v in got}
    assert values["AXIS_OUT_OF_RANGE", "Axis"] == 4
    assert values["DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType"] == "DML_TENSOR_DATA_TYPE_INT64"
    assert values["TOTAL_TENSOR_SIZE_TOO_SMALL", "UpdatesTensor.TotalTensorSizeInBytes"] == 4
    assert len(got) == 7
    # At FL 2_1 INT8 data is fine; at FL 3_0 INT64 indices too; the rest is level-independent.
    assert {v.rule for v in validate(desc, FL.FL_3_0)} == {
        "DATA_TYPE_MISMATCH",
        "FLAGS_INVALID",
        "AXIS_OUT_OF_RANGE",
        "TOTAL_TENSOR_SIZE_TOO_SMALL",
    }


def test_unavailable_operator_still_reports_level_independent_rules() -> None:
    desc = dataclasses.replace(GND1_SIZES, batch_dimension_count=7)
    assert pairs(desc, FL.FL_2_1) == {
        ("OPERATOR_UNAVAILABLE", "Type"),
        ("BATCH_DIMENSION_COUNT_OUT_OF_RANGE", "BatchDimensionCount"),
    }


def test_validate_is_deterministic_and_ordered() -> None:
    desc = dataclasses.replace(SC_EX2_AS_PRINTED, axis=9)
    first = validate(desc, FL.FL_1_0)
    assert first == validate(desc, FL.FL_1_0)
    assert first[0].rule == "DIMENSION_COUNT_UNSUPPORTED"  # tensor rules before field rules
    assert first[-1].rule == "AXIS_OUT_OF_RANGE"


def test_feature_level_may_be_an_int() -> None:
    assert validate(GE_2D, 0x3000) == ()  # type: ignore[arg-type]


def test_non_descriptor_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate(object(), FL.FL_3_0)  # type: ignore[arg-type]


# --- Violation and check() ----------------------------------------------------------------------------------


def test_violation_is_frozen_and_json_ready() -> None:
    got = validate(SC_EX2_AS_PRINTED, FL.FL_1_0)
    assert got
    for v in got:
        assert v.rule in RULES
        assert json.loads(json.dumps(v.as_dict())) == v.as_dict()
        assert str(v).startswith(f"[{v.rule}] {v.field}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].rule = "X"  # type: ignore[misc]


def test_check_passes_valid_descriptors() -> None:
    check(GE_4D, FL.FL_2_1)  # does not raise


def test_check_raises_with_every_violation() -> None:
    desc = dataclasses.replace(SND_AS_PRINTED, input_dimension_count=0)
    expected = validate(desc, FL.FL_2_1)
    assert len(expected) > 3
    with pytest.raises(InvalidDescriptorError) as info:
        check(desc, FL.FL_2_1, node="scatter_nd_0", op_type="ScatterND")
    err = info.value
    assert isinstance(err, DmlShimError)
    assert err.violations == expected
    assert err.node == "scatter_nd_0"
    assert err.op_type == "ScatterND"
    assert err.rule == expected[0].rule
    text = str(err)
    assert "scatter_nd_0" in text and "DML_FEATURE_LEVEL_2_1" in text
    for v in expected:
        assert v.rule in text and v.field in text


def test_check_defaults_op_type_to_the_directml_name() -> None:
    with pytest.raises(InvalidDescriptorError) as info:
        check(GND1_SIZES, FL.FL_2_1)
    assert info.value.op_type == "DML_OPERATOR_GATHER_ND1"
    assert info.value.node is None
    assert [v.rule for v in info.value.violations] == ["OPERATOR_UNAVAILABLE"]
