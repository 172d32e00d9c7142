"""Binding forms: strided windows of larger buffers, broadcast strides, raw byte buffers, dtype handling.

Numpy slicing builds the *view* the Strides describe; the expected values still come from onnxruntime,
run on that sliced array.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import pytest

from dmlshim.dml import BufferTensorDesc, DataType, OperatorDesc
from dmlshim.errors import BadInputError
from dmlshim.kernels import execute
from tests.test_kernels_support import (
    DATA_DTYPES,
    assert_same,
    gather_desc,
    gather_elements_desc,
    gather_nd_desc,
    ort,
    random_data,
    random_indices,
    scatter_desc,
    scatter_nd_desc,
    short,
)


def _window(
    rng: np.random.Generator, array: np.ndarray, sizes: tuple[int, ...]
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Embed ``array`` at a random place inside a larger random buffer.

    Returns:
        A 1-D view of the buffer starting at the window's first element, and the element Strides (for the
        right-aligned ``sizes``) that describe the window inside it.
    """
    shape = array.shape
    big_shape = tuple(s + int(rng.integers(0, 3)) + (i == len(shape) - 1) for i, s in enumerate(shape))
    big = random_data(rng, big_shape, array.dtype)
    origin = tuple(int(rng.integers(0, b - s + 1)) for b, s in zip(big_shape, shape, strict=True))
    big[tuple(slice(o, o + s) for o, s in zip(origin, shape, strict=True))] = array
    packed = [math.prod(big_shape[i + 1 :]) for i in range(len(big_shape))]
    start = sum(o * p for o, p in zip(origin, packed, strict=True))
    pad = len(sizes) - len(shape)
    strides = (7,) * pad + tuple(packed)  # a size-1 dimension's stride is never used
    return big.reshape(-1)[start:], strides


def _strided(desc: OperatorDesc, name: str, strides: tuple[int, ...]) -> OperatorDesc:
    field = {
        "InputTensor": "input_tensor",
        "IndicesTensor": "indices_tensor",
        "UpdatesTensor": "updates_tensor",
    }
    old: BufferTensorDesc = getattr(desc, field[name])
    new = BufferTensorDesc(old.data_type, old.sizes, strides)
    return dataclasses.replace(desc, **{field[name]: new})  # type: ignore[type-var]


def _bind_windows(
    rng: np.random.Generator, desc: OperatorDesc, arrays: dict[str, np.ndarray]
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    bound = {}
    for name, array in arrays.items():
        flat, strides = _window(rng, array, desc.tensors()[name].sizes)
        desc = _strided(desc, name, strides)
        bound[name] = flat
    return desc, bound


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"s{s}")
def test_strided_windows_gather(seed: int) -> None:
    rng = np.random.default_rng(8000 + seed)
    data = random_data(rng, (3, 5, 4), np.dtype(np.float32))
    indices = random_indices(rng, (2, 3), 5, np.dtype(np.int64))
    desc, bound = _bind_windows(
        rng, gather_desc(data, indices, 1), {"InputTensor": data, "IndicesTensor": indices}
    )
    assert not desc.input_tensor.is_packed
    result = execute(desc, bound)
    assert_same(desc, result.output, ort("Gather", {"data": data, "indices": indices}, {"axis": 1}))


@pytest.mark.parametrize("axis", [0, 1, 2], ids=lambda a: f"axis{a}")
def test_strided_windows_gather_elements(axis: int) -> None:
    rng = np.random.default_rng(8100 + axis)
    data = random_data(rng, (4, 6, 5), np.dtype(np.int16))
    idx_shape = list(data.shape)
    idx_shape[axis] = 3
    indices = random_indices(rng, idx_shape, data.shape[axis], np.dtype(np.int32))
    desc, bound = _bind_windows(
        rng, gather_elements_desc(data, indices, axis), {"InputTensor": data, "IndicesTensor": indices}
    )
    result = execute(desc, bound)
    expected = ort("GatherElements", {"data": data, "indices": indices}, {"axis": axis})
    assert_same(desc, result.output, expected)


@pytest.mark.parametrize("batch", [0, 1], ids=lambda b: f"batch{b}")
def test_strided_windows_gather_nd(batch: int) -> None:
    rng = np.random.default_rng(8200 + batch)
    data = random_data(rng, (3, 4, 6), np.dtype(np.uint16))
    indices = random_indices(rng, (3, 5, 1), 4 if batch else 3, np.dtype(np.int64))
    desc, bound = _bind_windows(
        rng, gather_nd_desc(data, indices, batch), {"InputTensor": data, "IndicesTensor": indices}
    )
    result = execute(desc, bound)
    expected = ort("GatherND", {"data": data, "indices": indices}, {"batch_dims": batch})
    assert_same(desc, result.output, expected)


def test_strided_windows_scatter_elements() -> None:
    rng = np.random.default_rng(8300)
    data = random_data(rng, (5, 6), np.dtype(np.float64))
    indices = np.argsort(rng.random((5, 6)), axis=0)[:3].astype(np.int64)
    updates = random_data(rng, indices.shape, np.dtype(np.float64))
    arrays = {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates}
    desc, bound = _bind_windows(rng, scatter_desc(data, indices, 0), arrays)
    before = {k: v.copy() for k, v in bound.items()}
    result = execute(desc, bound)
    expected = ort("ScatterElements", {"data": data, "indices": indices, "updates": updates}, {"axis": 0})
    assert_same(desc, result.output, expected)
    for name, flat in bound.items():
        np.testing.assert_array_equal(flat, before[name], strict=True)


def test_strided_windows_scatter_nd() -> None:
    rng = np.random.default_rng(8400)
    data = random_data(rng, (6, 3, 4), np.dtype(np.int8))
    indices = np.array([[[0, 2], [5, 1]], [[3, 0], [-1, -2]]], np.int64)
    updates = random_data(rng, (2, 2, 4), np.dtype(np.int8))
    arrays = {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates}
    desc, bound = _bind_windows(rng, scatter_nd_desc(data, indices), arrays)
    result = execute(desc, bound)
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": indices, "updates": updates}))


def test_broadcast_stride_zero_and_non_contiguous_buffer() -> None:
    # Strides {0, 2}: every row reads the same elements, every other element of the bound buffer.
    rng = np.random.default_rng(8500)
    row = random_data(rng, (5,), np.dtype(np.float32))
    buffer = np.empty(20, np.float32)
    buffer[::4] = row  # the caller binds buffer[::2], whose every other element is the row
    data = np.broadcast_to(row, (3, 5)).copy()
    indices = np.array([[4, 0], [1, 1], [-1, 2]], np.int32)
    desc = gather_elements_desc(data, indices, 1)
    desc = _strided(desc, "InputTensor", (0, 2))
    result = execute(desc, {"InputTensor": buffer[::2], "IndicesTensor": indices})
    expected = ort("GatherElements", {"data": data, "indices": indices}, {"axis": 1})
    assert_same(desc, result.output, expected)


def test_raw_byte_buffers_are_reinterpreted() -> None:
    rng = np.random.default_rng(8600)
    data = random_data(rng, (4, 3), np.dtype(np.float32))
    indices = random_indices(rng, (2, 3), 4, np.dtype(np.int64))
    desc = gather_elements_desc(data, indices, 0)
    raw_data = np.concatenate([data.reshape(-1).view(np.uint8), np.zeros(5, np.uint8)])  # longer is fine
    raw_indices = indices.reshape(-1).view(np.int32)  # int64 indices bound as an int32 buffer
    result = execute(desc, {"InputTensor": raw_data, "IndicesTensor": raw_indices})
    assert_same(desc, result.output, ort("GatherElements", {"data": data, "indices": indices}, {"axis": 0}))

    with pytest.raises(BadInputError, match="InputTensor buffer holds 47 bytes"):
        execute(desc, {"InputTensor": raw_data[:47], "IndicesTensor": indices})


def test_flat_onnx_shaped_array_and_bool_and_layouts() -> None:
    # A 1-D array bound to Sizes {1,1,6} is a packed buffer; bool binds to UINT8; Fortran order and
    # big-endian arrays are accepted (copied/converted), never misread.
    data = np.array([True, False, True, True, False, False])
    indices = np.array([5, 0, -2], np.int64)
    desc = gather_desc(data.view(np.uint8), indices, 0)
    desc = dataclasses.replace(
        desc,
        input_tensor=BufferTensorDesc(DataType.UINT8, (1, 6)),
        indices_tensor=BufferTensorDesc(DataType.INT64, (1, 3)),
        output_tensor=BufferTensorDesc(DataType.UINT8, (1, 3)),
        axis=1,
    )
    result = execute(desc, {"InputTensor": data, "IndicesTensor": indices})
    expected = ort("Gather", {"data": data, "indices": indices}).view(np.uint8)
    np.testing.assert_array_equal(result.output.reshape(-1), expected, strict=True)

    rng = np.random.default_rng(8700)
    matrix = np.asfortranarray(random_data(rng, (4, 5), np.dtype(np.int32)))
    idx = np.asfortranarray(random_indices(rng, (4, 2), 5, np.dtype(np.int32)))
    desc2 = gather_elements_desc(matrix, idx, 1)
    for m in (matrix, matrix.astype(">i4")):
        result = execute(desc2, {"InputTensor": m, "IndicesTensor": idx.astype(">i4")})
        expected = ort("GatherElements", {"data": np.ascontiguousarray(matrix), "indices": idx}, {"axis": 1})
        assert_same(desc2, result.output, expected)


@pytest.mark.parametrize(
    ("array", "match"),
    [
        pytest.param(np.zeros((3, 4), np.float32), "must be shaped like its Sizes", id="wrong-shape"),
        pytest.param(np.zeros((4, 3), np.float64), "must be shaped like its Sizes", id="wrong-dtype-2d"),
        pytest.param(np.zeros(11, np.float32), "holds 11 elements", id="short-buffer"),
        pytest.param([0.0] * 12, "expected a numpy array", id="list"),
        pytest.param(np.zeros(12, object), "cannot be reinterpreted", id="object"),
    ],
)
def test_unusable_arrays_are_bad_input(array: object, match: str) -> None:
    desc = gather_elements_desc(np.zeros((4, 3), np.float32), np.zeros((2, 3), np.int64), 0)
    with pytest.raises(BadInputError, match=match) as info:
        execute(desc, {"InputTensor": array, "IndicesTensor": np.zeros((2, 3), np.int64)})  # type: ignore[dict-item]
    assert info.value.tensor == "InputTensor"
    assert info.value.op_type == "DML_OPERATOR_GATHER_ELEMENTS"


def _op_case(
    op: str, rng: np.random.Generator, dtype: np.dtype
) -> tuple[OperatorDesc, dict, str, dict, dict]:
    """A small random case of ``op``: (descriptor, DML arrays, ONNX op, ONNX feeds, ONNX attrs)."""
    data = random_data(rng, (3, 4, 5), dtype)
    if op == "Gather":
        idx = random_indices(rng, (2, 3), 4, np.dtype(np.int32))
        return (
            gather_desc(data, idx, 1),
            {"InputTensor": data, "IndicesTensor": idx},
            op,
            {
                "data": data,
                "indices": idx,
            },
            {"axis": 1},
        )
    if op == "GatherElements":
        idx = random_indices(rng, (3, 4, 2), 5, np.dtype(np.int64))
        return (
            gather_elements_desc(data, idx, 2),
            {"InputTensor": data, "IndicesTensor": idx},
            op,
            {
                "data": data,
                "indices": idx,
            },
            {"axis": 2},
        )
    if op == "GatherND":
        idx = random_indices(rng, (3, 2, 1), 4, np.dtype(np.int64))
        return (
            gather_nd_desc(data, idx, 1),
            {"InputTensor": data, "IndicesTensor": idx},
            op,
            {
                "data": data,
                "indices": idx,
            },
            {"batch_dims": 1},
        )
    if op == "ScatterElements":
        idx = np.argsort(rng.random((3, 4, 5)), axis=0)[:2].astype(np.int64) - 3
        upd = random_data(rng, idx.shape, dtype)
        arrays = {"InputTensor": data, "IndicesTensor": idx, "UpdatesTensor": upd}
        return (
            scatter_desc(data, idx, 0),
            arrays,
            op,
            {"data": data, "indices": idx, "updates": upd},
            {"axis": 0},
        )
    rows = rng.choice(12, size=5, replace=False)
    idx = np.stack(np.unravel_index(rows, (3, 4)), axis=-1).astype(np.int64)
    upd = random_data(rng, (5, 5), dtype)
    arrays = {"InputTensor": data, "IndicesTensor": idx, "UpdatesTensor": upd}
    return scatter_nd_desc(data, idx), arrays, op, {"data": data, "indices": idx, "updates": upd}, {}


@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=short)
@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"])
def test_strided_windows_every_op_and_type(op: str, dtype: np.dtype) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{op}-{dtype.name}".encode()))
    desc, arrays, onnx_op, feeds, attrs = _op_case(op, rng, dtype)
    desc, bound = _bind_windows(rng, desc, arrays)
    result = execute(desc, bound)
    assert_same(desc, result.output, ort(onnx_op, feeds, attrs))
