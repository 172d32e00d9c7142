"""Index policy and structural errors: out-of-range, negative indices, clamp mode, bad descriptors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from dmlshim.dml import BufferTensorDesc, DataType, FeatureLevel, OperatorDesc
from dmlshim.errors import IndexOutOfRangeError, InvalidDescriptorError
from dmlshim.kernels import IndexMode, KernelOptions, execute
from tests.test_kernels_support import (
    assert_same,
    gather_desc,
    gather_elements_desc,
    gather_nd_desc,
    onnx_indices,
    ort,
    random_data,
    run_packed,
    scatter_desc,
    scatter_nd_desc,
)

Builder = Callable[[np.ndarray, np.ndarray], OperatorDesc]

# op label -> (ONNX op, descriptor builder, ONNX attrs, needs updates of this shape)
OPS: dict[str, tuple[str, Builder, dict, bool]] = {
    "gather": ("Gather", lambda d, i: gather_desc(d, i, 1), {"axis": 1}, False),
    "gather_elements": ("GatherElements", lambda d, i: gather_elements_desc(d, i, 0), {"axis": 0}, False),
    "gather_nd": ("GatherND", lambda d, i: gather_nd_desc(d, i, 0), {}, False),
    "gather_nd_batch": ("GatherND", lambda d, i: gather_nd_desc(d, i, 1), {"batch_dims": 1}, False),
    "scatter": ("ScatterElements", lambda d, i: scatter_desc(d, i, 0), {"axis": 0}, True),
    "scatter_nd": ("ScatterND", lambda d, i: scatter_nd_desc(d, i), {}, True),
}


def _updates_shape(op: str, data: np.ndarray, indices: np.ndarray) -> tuple:
    if op == "scatter_nd":
        return indices.shape[:-1] + data.shape[indices.shape[-1] :]
    return indices.shape


def _bind(desc: OperatorDesc, data: np.ndarray, indices: np.ndarray, updates: np.ndarray | None) -> dict:
    bound = {"InputTensor": data, "IndicesTensor": indices}
    if updates is not None:
        bound["UpdatesTensor"] = updates
    return {k: v.reshape(desc.tensors()[k].sizes) for k, v in bound.items()}


# (op, data shape, ONNX indices, ONNX position of the bad value, bad value, addressed size)
OUT_OF_RANGE = [
    ("gather", (3, 4), [[1, 2], [3, 0]], (0, 0), 4, 4),
    ("gather", (3, 4), [[1, 2], [3, 0]], (1, 1), -5, 4),
    ("gather_elements", (3, 4), [[0, 1, 2, 0], [1, 1, 1, 1]], (0, 0), 3, 3),
    ("gather_elements", (3, 4), [[0, 1, 2, 0], [1, 1, 1, 1]], (1, 3), -4, 3),
    ("gather_nd", (3, 4), [[0, 1], [2, 3]], (0, 0), -4, 3),
    ("gather_nd", (3, 4), [[0, 1], [2, 3]], (1, 1), 4, 4),
    ("gather_nd_batch", (2, 3, 4), [[[0], [2]], [[1], [1]]], (0, 0, 0), 3, 3),
    ("gather_nd_batch", (2, 3, 4), [[[0], [2]], [[1], [1]]], (1, 1, 0), -4, 3),
    ("scatter", (3, 4), [[0, 1, 2, 0], [1, 2, 0, 1]], (0, 0), 3, 3),
    ("scatter", (3, 4), [[0, 1, 2, 0], [1, 2, 0, 1]], (1, 3), -4, 3),
    ("scatter_nd", (3, 4), [[0], [2]], (0, 0), 3, 3),
    ("scatter_nd", (3, 4), [[0], [2]], (1, 0), -4, 3),
]


@pytest.mark.parametrize(
    ("op", "shape", "indices", "pos", "value", "size"),
    OUT_OF_RANGE,
    ids=[f"{c[0]}-{'first' if not any(c[3]) else 'last'}-{c[4]}" for c in OUT_OF_RANGE],
)
@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_out_of_range_is_an_error_naming_node_position_and_value(
    op: str, shape: tuple, indices: list, pos: tuple, value: int, size: int, itype: type
) -> None:
    onnx_op, build, attrs, scatter = OPS[op]
    rng = np.random.default_rng(1)
    data = random_data(rng, shape, np.dtype(np.float32))
    idx = np.array(indices, itype)
    idx[pos] = value
    updates = random_data(rng, _updates_shape(op, data, idx), np.dtype(np.float32)) if scatter else None
    desc = build(data, idx)

    with pytest.raises(IndexOutOfRangeError) as info:
        execute(desc, _bind(desc, data, idx, updates), KernelOptions(node="node_7"))

    err = info.value
    dml_pos = (0,) * (desc.indices_tensor.dimension_count - idx.ndim) + pos
    assert err.node == "node_7"
    assert err.op_type == desc.operator_type.dml_name
    assert err.tensor == "IndicesTensor"
    assert err.value == value
    assert err.position == dml_pos  # type: ignore[attr-defined]
    assert err.valid_range == (-size, size - 1)  # type: ignore[attr-defined]
    text = str(err)
    for piece in (
        "node_7",
        desc.operator_type.dml_name,
        f"IndicesTensor{list(dml_pos)} = {value}",
        f"[{-size}, {size - 1}]",
        "Rule:",
    ):
        assert piece in text
    # The ONNX reference implementation rejects the same index.
    feeds = {"data": data, "indices": onnx_indices(idx, int64_only=op.endswith(("nd", "batch")))}
    if updates is not None:
        feeds["updates"] = updates
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime raises its own exception types
        ort(onnx_op, feeds, attrs)


@pytest.mark.parametrize(
    ("itype", "value"),
    [
        pytest.param(np.uint32, 0xFFFFFFFE, id="u32-max-minus-1"),
        pytest.param(np.uint64, 2**64 - 1, id="u64-max"),
        pytest.param(np.uint64, 2**63, id="u64-above-int64"),
        pytest.param(np.int32, 2**31 - 1, id="i32-max"),
        pytest.param(np.int64, -(2**63), id="i64-min"),
    ],
)
@pytest.mark.parametrize("op", ["gather_elements", "scatter_nd"])
def test_extreme_index_values(op: str, itype: type, value: int) -> None:
    _, build, _, scatter = OPS[op]
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    idx = np.array([[0, 1, 2, 0]] if op == "gather_elements" else [[1], [0]], itype)
    idx.reshape(-1)[-1] = value
    updates = np.full(_updates_shape(op, data, idx), -1, np.int32) if scatter else None
    desc = build(data, idx)
    bound = _bind(desc, data, idx, updates)

    with pytest.raises(IndexOutOfRangeError) as info:
        execute(desc, bound)
    assert info.value.value == value  # reported exactly, no overflow
    signed = np.dtype(itype).kind == "i"
    assert info.value.valid_range == ((-3, 2) if signed else (0, 2))  # type: ignore[attr-defined]

    # Clamped: huge values (unsigned ones never wrap to negatives) take the last element, -2**63 the first.
    clamped = execute(desc, bound, KernelOptions(index_mode=IndexMode.CLAMP)).output
    target = 0 if value < 0 else 2
    if op == "gather_elements":
        assert clamped.reshape(-1)[-1] == data[target, 3]
    else:
        expected = data.copy()
        expected[1] = -1
        expected[target] = -1
        np.testing.assert_array_equal(clamped.reshape(3, 4), expected)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"s{s}")
def test_clamp_mode_matches_onnxruntime_on_preclamped_indices(op: str, seed: int) -> None:
    onnx_op, build, attrs, scatter = OPS[op]
    rng = np.random.default_rng(9000 + seed)
    data = random_data(rng, (4, 5, 3), np.dtype(np.float16))
    if op == "gather":
        idx, dims = rng.integers(-12, 12, size=(3, 2)), 5
    elif op in ("gather_elements", "scatter"):
        idx, dims = rng.integers(-10, 10, size=(2, 5, 3)), 4
    elif op == "gather_nd_batch":
        idx, dims = rng.integers(-12, 12, size=(4, 6, 2)), np.array([5, 3])
    else:
        idx, dims = rng.integers(-10, 10, size=(3, 2)), np.array([4, 5])
    if op == "scatter":  # keep each column's targets distinct after clamping: ORT and DML then agree
        idx = np.stack([rng.permutation([-6, 1, 9, 5])[:2] for _ in range(15)], axis=1).reshape(2, 5, 3)
    idx = idx.astype(np.int64)
    # Out-of-range values clamp into [0, size-1]; in-range negatives are left for onnxruntime to wrap.
    pre = np.where(idx < -dims, 0, np.minimum(idx, dims - 1))
    updates = random_data(rng, _updates_shape(op, data, idx), data.dtype) if scatter else None
    desc = build(data, idx)

    result = execute(desc, _bind(desc, data, idx, updates), KernelOptions(index_mode=IndexMode.CLAMP))

    feeds = {"data": data, "indices": pre}
    if updates is not None:
        feeds["updates"] = updates
    assert_same(desc, result.output, ort(onnx_op, feeds, attrs))


@pytest.mark.parametrize("mode", list(IndexMode), ids=lambda m: m.value)
@pytest.mark.parametrize("op", list(OPS))
def test_negative_indices_need_fl_3_0_and_a_signed_type(op: str, mode: IndexMode) -> None:
    onnx_op, build, attrs, scatter = OPS[op]
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = {
        "gather": [[-1, 0]],
        "gather_elements": [[[0, -1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]]],
        "gather_nd": [[-1, 0]],
        "gather_nd_batch": [[[-1]], [[2]]],
        "scatter": [[[0, 1, 0, 1], [1, 0, 1, 0], [-1, 0, 0, 0]]],
        "scatter_nd": [[-2, 1]],
    }[op]
    indices = np.array(idx, np.int32)
    updates = np.ones(_updates_shape(op, data, indices), np.float32) if scatter else None
    desc = build(data, indices)
    bound = _bind(desc, data, indices, updates)

    with pytest.raises(IndexOutOfRangeError, match="DML_FEATURE_LEVEL_3_0") as info:
        execute(desc, bound, KernelOptions(feature_level=FeatureLevel.FL_2_1, index_mode=mode))
    assert "signed" in str(info.value)
    assert info.value.value < 0

    result = execute(desc, bound, KernelOptions(feature_level=FeatureLevel.FL_3_0, index_mode=mode))
    feeds = {"data": data, "indices": onnx_indices(indices, int64_only=op.endswith(("nd", "batch")))}
    if updates is not None:
        feeds["updates"] = updates
    assert_same(desc, result.output, ort(onnx_op, feeds, attrs))


def test_unsigned_indices_below_fl_3_0_are_fine_and_never_wrap() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    indices = np.array([[2, 0, 1], [1, 1, 0]], np.uint32)
    desc = gather_elements_desc(data, indices, 1)
    out = run_packed(
        desc,
        {"InputTensor": data, "IndicesTensor": indices},
        KernelOptions(feature_level=FeatureLevel.FL_2_1),
    )
    expected = ort("GatherElements", {"data": data, "indices": indices.astype(np.int64)}, {"axis": 1})
    assert_same(desc, out.output, expected)
    wrapped = indices.copy()
    wrapped[0, 0] = np.uint32(2**32 - 1)  # -1 as int32, but an unsigned index is never negative
    with pytest.raises(IndexOutOfRangeError, match="4294967295"):
        run_packed(desc, {"InputTensor": data, "IndicesTensor": wrapped})


@pytest.mark.parametrize("itype", [np.int32, np.int64], ids=["i32", "i64"])
def test_gathers_leave_callers_arrays_untouched(itype: type) -> None:
    # Negative indices are wrapped in a private int64 copy, even when the caller's array is int64 already.
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    cases = {
        "gather": np.array([[-1, -5], [0, 4]], itype),
        "gather_elements": np.array([[-1, -4, 0, 1, 2]], itype),
        "gather_nd": np.array([[-1, -5], [0, 4]], itype),
    }
    for op, indices in cases.items():
        desc = OPS[op][1](data, indices)
        bound = _bind(desc, data, indices, None)
        before = {k: v.copy() for k, v in bound.items()}
        execute(desc, bound)
        for name, array in bound.items():
            np.testing.assert_array_equal(array, before[name], strict=True, err_msg=f"{op} {name}")


def _desc() -> OperatorDesc:
    return gather_elements_desc(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.int64), 0)


def _inputs() -> dict[str, np.ndarray]:
    return {"InputTensor": np.zeros((3, 4), np.float32), "IndicesTensor": np.zeros((2, 4), np.int64)}


def _replace(**changes: object) -> Callable[[], OperatorDesc]:
    return lambda: dataclasses.replace(_desc(), **changes)  # type: ignore[type-var]


F32, I64 = DataType.FLOAT32, DataType.INT64
STRUCTURAL = [
    pytest.param(
        _desc,
        {"Input": np.zeros((3, 4), np.float32), "IndicesTensor": np.zeros((2, 4), np.int64)},
        "unknown binding name",
        id="binding-name",
    ),
    pytest.param(_desc, {"InputTensor": np.zeros((3, 4), np.float32)}, "not bound", id="missing"),
    pytest.param(
        _replace(indices_tensor=BufferTensorDesc(I64, (1, 2, 4))),
        None,
        "DimensionCount",
        id="dimension-count",
    ),
    pytest.param(
        _replace(output_tensor=BufferTensorDesc(F32, (3, 4))), None, "OutputTensor.Sizes", id="output-sizes"
    ),
    pytest.param(
        _replace(output_tensor=BufferTensorDesc(DataType.FLOAT16, (2, 4))),
        None,
        "OutputTensor.DataType",
        id="output-type",
    ),
    pytest.param(_replace(axis=2), None, "Axis 2", id="axis"),
    pytest.param(
        _replace(indices_tensor=BufferTensorDesc(DataType.FLOAT32, (2, 4))),
        None,
        "not an index type",
        id="float-indices",
    ),
    pytest.param(
        _replace(indices_tensor=BufferTensorDesc(I64, (2, 3)), output_tensor=BufferTensorDesc(F32, (2, 3))),
        None,
        "except Axis",
        id="non-axis-dims",
    ),
    pytest.param(
        _replace(input_tensor=BufferTensorDesc(F32, (3, 4), (4,))), None, "Strides has 1", id="strides-length"
    ),
]


@pytest.mark.parametrize(("make", "inputs", "match"), STRUCTURAL)
def test_structural_problems_are_invalid_descriptor_errors(
    make: Callable[[], OperatorDesc], inputs: dict | None, match: str
) -> None:
    desc = make()
    bound = (
        inputs
        if inputs is not None
        else {
            k: np.zeros(desc.tensors()[k].sizes, desc.tensors()[k].data_type.numpy_dtype)
            if desc.tensors()[k].data_type.is_integer or k == "InputTensor"
            else np.zeros(desc.tensors()[k].sizes, np.float32)
            for k in desc.INPUT_TENSOR_FIELDS
        }
    )
    with pytest.raises(InvalidDescriptorError, match=match) as info:
        execute(desc, bound, KernelOptions(node="bad_node"))
    assert info.value.op_type == "DML_OPERATOR_GATHER_ELEMENTS"
    assert info.value.node == "bad_node"


@pytest.mark.parametrize(
    ("desc", "match"),
    [
        pytest.param(
            dataclasses.replace(
                gather_desc(np.zeros((3, 4), np.float32), np.zeros(2, np.int64), 0),
                indices_tensor=BufferTensorDesc(I64, (2, 1)),
                index_dimensions=1,
            ),
            "leading ones must be 1",
            id="gather-index-padding",
        ),
        pytest.param(
            gather_nd_desc(np.zeros((3, 4), np.float32), np.zeros((2, 1), np.int64), 0).__class__(
                BufferTensorDesc(F32, (2, 3, 4)),
                BufferTensorDesc(I64, (3, 5, 1)),
                BufferTensorDesc(F32, (3, 5, 4)),
                input_dimension_count=3,
                indices_dimension_count=3,
                batch_dimension_count=1,
            ),
            "batch dimensions",
            id="nd-batch-mismatch",
        ),
        pytest.param(
            gather_nd_desc(np.zeros((3, 4), np.float32), np.zeros((2, 1), np.int64), 0).__class__(
                BufferTensorDesc(F32, (3, 4)),
                BufferTensorDesc(I64, (2, 3)),
                BufferTensorDesc(F32, (2, 1)),
                input_dimension_count=2,
                indices_dimension_count=2,
                batch_dimension_count=0,
            ),
            "tuple size 3",
            id="nd-tuple-too-long",
        ),
        pytest.param(
            scatter_nd_desc(np.zeros((3, 4), np.float32), np.zeros((2, 1), np.int64)).__class__(
                BufferTensorDesc(F32, (3, 4)),
                BufferTensorDesc(I64, (2, 1)),
                BufferTensorDesc(F32, (2, 3)),
                BufferTensorDesc(F32, (3, 4)),
                input_dimension_count=2,
                indices_dimension_count=2,
            ),
            "UpdatesTensor.Sizes",
            id="scatter-nd-updates",
        ),
        pytest.param(
            dataclasses.replace(
                gather_elements_desc(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.int64), 0),
                input_tensor=BufferTensorDesc(DataType.UINT4, (3, 4)),
                output_tensor=BufferTensorDesc(DataType.UINT4, (2, 4)),
            ),
            "cannot be executed",
            id="uint4",
        ),
    ],
)
def test_more_structural_problems(desc: OperatorDesc, match: str) -> None:
    tensors = desc.tensors()
    bound = {
        k: np.zeros(tensors[k].sizes, np.int64 if k == "IndicesTensor" else np.float32)
        for k in desc.INPUT_TENSOR_FIELDS
    }
    with pytest.raises(InvalidDescriptorError, match=match):
        execute(desc, bound)


def test_unknown_descriptor_type() -> None:
    with pytest.raises(InvalidDescriptorError, match="no kernel"):
        execute(object(), {})  # type: ignore[arg-type]


@pytest.mark.parametrize("op", list(OPS))
def test_empty_tensors_do_not_crash(op: str) -> None:
    # DirectML forbids size-0 dimensions; the kernels still return the empty (or identity) result.
    _, build, _, scatter = OPS[op]
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = {
        "gather": np.zeros((0, 2), np.int64),
        "gather_elements": np.zeros((0, 3, 4), np.int64),
        "gather_nd": np.zeros((0, 2), np.int64),
        "gather_nd_batch": np.zeros((2, 0, 1), np.int64),
        "scatter": np.zeros((0, 3, 4), np.int64),
        "scatter_nd": np.zeros((0, 2), np.int64),
    }[op]
    updates = np.zeros(_updates_shape(op, data, idx), np.float32) if scatter else None
    desc = build(data, idx)
    out = execute(desc, _bind(desc, data, idx, updates)).output
    assert out.shape == desc.output_tensor.sizes
    if scatter:
        np.testing.assert_array_equal(out.reshape(data.shape), data)
    else:
        assert out.size == 0
