"""DirectML's JSON form of descriptors: round trips, every accepted spelling, and errors naming JSON paths."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlshim.dml.enums import DataType, TensorFlags
from dmlshim.dml.json_form import (
    JsonFormError,
    operator_from_json,
    operator_to_json,
    tensor_from_json,
    tensor_to_json,
)
from dmlshim.dml.operators import (
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
)
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.errors import BadInputError

F32 = DataType.FLOAT32


def t(
    sizes: tuple[int, ...], data_type: DataType = F32, strides: tuple[int, ...] | None = None
) -> BufferTensorDesc:
    return BufferTensorDesc(data_type, sizes, strides)


DESCS: list[OperatorDesc] = [
    GatherDesc(t((1, 3, 4)), t((1, 1, 2), DataType.INT64), t((1, 2, 4)), axis=1, index_dimensions=1),
    GatherElementsDesc(t((3, 3), DataType.INT8), t((2, 3), DataType.INT32), t((2, 3), DataType.INT8), axis=0),
    GatherNdDesc(t((1, 1, 2, 2)), t((1, 1, 2, 1), DataType.UINT32), t((1, 1, 2, 2)), 2, 2),
    GatherNd1Desc(
        t((2, 3, 4), DataType.FLOAT16), t((2, 1, 1), DataType.INT64), t((1, 2, 4), DataType.FLOAT16), 3, 3, 1
    ),
    ScatterDesc(t((1, 1, 1, 5)), t((1, 1, 1, 4), DataType.UINT32), t((1, 1, 1, 4)), t((1, 1, 1, 5)), axis=3),
    ScatterNdDesc(
        t((3, 4), DataType.UINT64, strides=(1, 3)),
        t((2, 1), DataType.INT32),
        t((2, 4), DataType.UINT64),
        t((3, 4), DataType.UINT64),
        2,
        2,
    ),
]


def _dump_load(obj: Any) -> Any:
    return json.loads(json.dumps(obj, allow_nan=False))


@pytest.mark.parametrize("desc", DESCS, ids=lambda d: d.operator_type.dml_name)
def test_round_trip_every_operator_type(desc: OperatorDesc) -> None:
    obj = _dump_load(operator_to_json(desc))
    assert operator_from_json(obj) == desc


def test_canonical_form() -> None:
    obj = operator_to_json(DESCS[2])
    assert obj == {
        "type": "DML_OPERATOR_GATHER_ND",
        "desc": {
            "InputTensor": {
                "DataType": "DML_TENSOR_DATA_TYPE_FLOAT32",
                "Sizes": [1, 1, 2, 2],
                "Flags": "NONE",
                "DimensionCount": 4,
                "TotalTensorSizeInBytes": 16,
            },
            "IndicesTensor": {
                "DataType": "DML_TENSOR_DATA_TYPE_UINT32",
                "Sizes": [1, 1, 2, 1],
                "Flags": "NONE",
                "DimensionCount": 4,
                "TotalTensorSizeInBytes": 8,
            },
            "OutputTensor": {
                "DataType": "DML_TENSOR_DATA_TYPE_FLOAT32",
                "Sizes": [1, 1, 2, 2],
                "Flags": "NONE",
                "DimensionCount": 4,
                "TotalTensorSizeInBytes": 16,
            },
            "InputDimensionCount": 2,
            "IndicesDimensionCount": 2,
        },
    }
    assert list(obj["desc"]) == ["InputTensor", "IndicesTensor", "OutputTensor", *GatherNdDesc.UINT_FIELDS]


def test_scatter_elements_is_read_but_always_written_as_scatter() -> None:
    desc = DESCS[4]
    assert operator_to_json(desc)["type"] == "DML_OPERATOR_SCATTER"
    for name in ("DML_OPERATOR_SCATTER_ELEMENTS", "SCATTER_ELEMENTS", "DML_OPERATOR_SCATTER", "SCATTER"):
        obj = operator_to_json(desc)
        obj["type"] = name
        assert operator_from_json(obj) == desc


def test_short_type_names_and_minimal_tensors() -> None:
    obj = {
        "type": "GATHER_ND1",
        "desc": {
            "InputTensor": {"DataType": "FLOAT16", "Sizes": [2, 3, 4]},
            "IndicesTensor": {"DataType": "DML_TENSOR_DATA_TYPE_INT64", "Sizes": [2, 1, 1]},
            "OutputTensor": {"DataType": "FLOAT16", "Sizes": [1, 2, 4], "Strides": None},
            "InputDimensionCount": 3,
            "IndicesDimensionCount": 3,
            "BatchDimensionCount": 1,
        },
    }
    assert operator_from_json(obj) == DESCS[3]


def test_strides_written_only_when_not_packed() -> None:
    assert "Strides" not in tensor_to_json(t((2, 3)))
    assert "Strides" not in tensor_to_json(t((2, 3), strides=(3, 1)))
    strided = tensor_to_json(t((2, 3), strides=(1, 2)))
    assert strided["Strides"] == [1, 2]
    assert strided["TotalTensorSizeInBytes"] == 24
    assert tensor_from_json(strided) == t((2, 3), strides=(1, 2))


def test_tensor_forms_dxdispatch_accepts() -> None:
    base = t((2, 3), DataType.UINT8)
    assert tensor_from_json({"DataType": "UINT8", "Sizes": [2, 3], "Strides": []}) == base
    wrapped = {"Type": "DML_TENSOR_TYPE_BUFFER", "Desc": {"DataType": "UINT8", "Sizes": [2, 3]}}
    assert tensor_from_json(wrapped) == base
    assert tensor_from_json({"Desc": {"DataType": "UINT8", "Sizes": [2, 3]}}) == base
    # TotalTensorSizeInBytes 0 means "compute it", as in DxDispatch.
    assert tensor_from_json({"DataType": "UINT8", "Sizes": [2, 3], "TotalTensorSizeInBytes": 0}) == base
    owned = tensor_from_json({"DataType": "UINT8", "Sizes": [2, 3], "Flags": "DML_TENSOR_FLAG_OWNED_BY_DML"})
    assert owned.flags == TensorFlags.OWNED_BY_DML
    assert tensor_from_json({"DataType": "UINT8", "Sizes": [2, 3], "Flags": ["OWNED_BY_DML"]}) == owned


def test_explicit_total_size_and_alignment_round_trip() -> None:
    tensor = BufferTensorDesc(F32, (3,), None, TensorFlags.NONE, 64, 16)
    obj = tensor_to_json(tensor)
    assert obj["TotalTensorSizeInBytes"] == 64
    assert obj["GuaranteedBaseOffsetAlignment"] == 16
    assert tensor_from_json(obj) == tensor


def test_uint_fields_are_plain_ints() -> None:
    text = json.dumps(operator_to_json(DESCS[0]))
    assert '"Axis": 1' in text
    assert '"IndexDimensions": 1' in text


def _good() -> dict[str, Any]:
    return operator_to_json(DESCS[4])


def _set(obj: dict[str, Any], keys: list[Any], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target: Any = obj
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return obj


def _delete(obj: dict[str, Any], keys: list[Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target: Any = obj
    for key in keys[:-1]:
        target = target[key]
    del target[keys[-1]]
    return obj


ERROR_CASES = [
    (
        "float_size",
        _set(_good(), ["desc", "IndicesTensor", "Sizes", 2], 2.0),
        ".desc.IndicesTensor.Sizes[2]",
        "2.0",
    ),
    (
        "negative_size",
        _set(_good(), ["desc", "InputTensor", "Sizes", 0], -1),
        ".desc.InputTensor.Sizes[0]",
        "-1",
    ),
    (
        "huge_size",
        _set(_good(), ["desc", "InputTensor", "Sizes", 0], 2**32),
        ".desc.InputTensor.Sizes[0]",
        "4294967296",
    ),
    ("string_axis", _set(_good(), ["desc", "Axis"], "3"), ".desc.Axis", "'3'"),
    ("float_axis", _set(_good(), ["desc", "Axis"], 3.0), ".desc.Axis", "3.0"),
    ("negative_axis", _set(_good(), ["desc", "Axis"], -1), ".desc.Axis", "-1"),
    ("bool_axis", _set(_good(), ["desc", "Axis"], True), ".desc.Axis", "true"),
    (
        "unknown_tensor_key",
        _set(_good(), ["desc", "InputTensor", "Stride"], [1]),
        ".desc.InputTensor.Stride",
        "Stride",
    ),
    ("unknown_desc_key", _set(_good(), ["desc", "Axes"], 1), ".desc.Axes", "Axes"),
    ("unknown_top_key", _set(_good(), ["bindings"], {}), ".bindings", "bindings"),
    ("missing_uint", _delete(_good(), ["desc", "Axis"]), ".desc.Axis", "missing"),
    ("missing_tensor", _delete(_good(), ["desc", "UpdatesTensor"]), ".desc.UpdatesTensor", "missing"),
    (
        "missing_data_type",
        _delete(_good(), ["desc", "OutputTensor", "DataType"]),
        ".desc.OutputTensor.DataType",
        "missing",
    ),
    ("missing_desc", _delete(_good(), ["desc"]), ".desc", "missing"),
    (
        "unknown_data_type",
        _set(_good(), ["desc", "InputTensor", "DataType"], "FLOAT128"),
        ".desc.InputTensor.DataType",
        "FLOAT128",
    ),
    (
        "lowercase_data_type",
        _set(_good(), ["desc", "InputTensor", "DataType"], "float32"),
        ".desc.InputTensor.DataType",
        "float32",
    ),
    (
        "unknown_type",
        _set(_good(), ["type"], "DML_OPERATOR_CONVOLUTION"),
        ".type",
        "DML_OPERATOR_CONVOLUTION",
    ),
    ("identity_type", _set(_good(), ["type"], "DML_OPERATOR_ELEMENT_WISE_IDENTITY"), ".type", "IDENTITY"),
    ("numeric_type", _set(_good(), ["type"], 94), ".type", "94"),
    (
        "dimension_count",
        _set(_good(), ["desc", "InputTensor", "DimensionCount"], 3),
        ".desc.InputTensor.DimensionCount",
        "3",
    ),
    (
        "strides_length",
        _set(_good(), ["desc", "InputTensor", "Strides"], [1, 1]),
        ".desc.InputTensor.Strides",
        "[1, 1]",
    ),
    (
        "bad_flags",
        _set(_good(), ["desc", "InputTensor", "Flags"], "BOGUS"),
        ".desc.InputTensor.Flags",
        "BOGUS",
    ),
    ("tensor_not_object", _set(_good(), ["desc", "InputTensor"], [1, 2]), ".desc.InputTensor", "array"),
    (
        "sizes_not_list",
        _set(_good(), ["desc", "InputTensor", "Sizes"], "1,1,1,5"),
        ".desc.InputTensor.Sizes",
        "1,1,1,5",
    ),
    (
        "texture_tensor",
        _set(_good(), ["desc", "InputTensor"], {"Type": "DML_TENSOR_TYPE_INVALID", "Desc": {}}),
        ".desc.InputTensor.Type",
        "INVALID",
    ),
    ("bad_execution_flag", _set(_good(), ["executionFlags"], "FAST"), ".executionFlags", "FAST"),
]


@pytest.mark.parametrize(
    ("obj", "where", "shown"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_errors_name_the_json_path_and_value(obj: dict[str, Any], where: str, shown: str) -> None:
    path = "$.dispatchables.op"
    with pytest.raises(JsonFormError) as info:
        operator_from_json(obj, path=path)
    err = info.value
    assert isinstance(err, BadInputError)
    assert err.json_path == path + where
    assert str(err).startswith(path + where + ": ")
    assert shown in str(err)


def test_execution_flags_are_accepted() -> None:
    obj = _set(_good(), ["executionFlags"], "DISABLE_META_COMMANDS")
    assert operator_from_json(obj) == DESCS[4]


def test_not_an_object() -> None:
    with pytest.raises(JsonFormError, match=r"^\$: expected a JSON object, got an array of 0"):
        operator_from_json([])


_DATA_TYPES = [d for d in DataType if d not in (DataType.UNKNOWN, DataType.UINT4, DataType.INT4)]


@st.composite
def tensors(draw: st.DrawFn) -> BufferTensorDesc:
    sizes = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=8)))
    strides = draw(
        st.none() | st.lists(st.integers(0, 50), min_size=len(sizes), max_size=len(sizes)).map(tuple)
    )
    data_type = draw(st.sampled_from(_DATA_TYPES))
    flags = draw(st.sampled_from(list(TensorFlags)))
    base = BufferTensorDesc(data_type, sizes, strides, flags)
    extra = draw(st.sampled_from([0, 0, 4, 64]))
    alignment = draw(st.sampled_from([0, 16, 256]))
    return BufferTensorDesc(
        data_type, sizes, strides, flags, base.total_tensor_size_in_bytes + extra, alignment
    )


@settings(max_examples=200, deadline=None)
@given(tensors())
def test_tensor_round_trip_property(tensor: BufferTensorDesc) -> None:
    back = tensor_from_json(_dump_load(tensor_to_json(tensor)))
    assert back.sizes == tensor.sizes
    assert back.data_type == tensor.data_type
    assert back.flags == tensor.flags
    assert back.total_tensor_size_in_bytes == tensor.total_tensor_size_in_bytes
    assert back.guaranteed_base_offset_alignment == tensor.guaranteed_base_offset_alignment
    # Packed strides are dropped on the way out (DirectML treats them as null); others are kept.
    assert back.strides == (None if tensor.is_packed else tensor.strides)
