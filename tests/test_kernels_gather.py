"""DML_OPERATOR_GATHER kernel vs onnxruntime's Gather on random shapes, types, axes and index ranks."""

from __future__ import annotations

import numpy as np
import pytest

from dmlshim.dml import BufferTensorDesc, DataType, GatherDesc
from dmlshim.kernels import execute
from tests.test_kernels_support import (
    assert_same,
    case_id,
    gather_desc,
    onnx_indices,
    ort,
    random_data,
    random_indices,
    random_shape,
    run_packed,
    type_cases,
)


@pytest.mark.parametrize("case", type_cases(88), ids=case_id)
def test_random_gather_matches_onnxruntime(case: tuple) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(1000 + seed)
    q = int(rng.integers(0, 4))  # 0: a scalar index
    r = int(rng.integers(1, 9 - max(q - 1, 0)))  # keeps D = r + q - 1 within 8
    data = random_data(rng, random_shape(rng, r), dtype)
    axis = int(rng.integers(-r, r))
    indices = random_indices(rng, random_shape(rng, q, 64), data.shape[axis], itype)
    desc = gather_desc(data, indices, axis)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})

    expected = ort("Gather", {"data": data, "indices": onnx_indices(indices)}, {"axis": axis})
    assert_same(desc, result.output, expected)
    assert result.duplicate_indices == 0


@pytest.mark.parametrize(
    ("indices", "axis"),
    [
        pytest.param(np.array(2, np.int64), 1, id="scalar"),
        pytest.param(np.array(-1, np.int32), 0, id="scalar-negative"),
        pytest.param(np.array([3, 0, 3, -4], np.int64), 1, id="1d-repeated"),
        pytest.param(np.array([[1, 0], [0, -1], [1, 1]], np.int32), 0, id="2d-axis0"),
        pytest.param(np.array([[[0, 2]], [[1, 3]]], np.int64), -1, id="3d-last-axis"),
    ],
)
def test_index_ranks(indices: np.ndarray, axis: int) -> None:
    data = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    desc = gather_desc(data, indices, axis)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    assert_same(desc, result.output, ort("Gather", {"data": data, "indices": indices}, {"axis": axis}))


def test_wider_dimension_count_than_needed() -> None:
    # DirectML accepts any DimensionCount as long as the padding dims are 1s (here 6 > r + q - 1 = 3).
    rng = np.random.default_rng(7)
    data = random_data(rng, (3, 5), np.dtype(np.int16))
    indices = np.array([[4, 0], [2, 2]], np.int64)
    d = 6
    desc = GatherDesc(
        BufferTensorDesc(DataType.INT16, (1, 1, 1, 1, 3, 5)),
        BufferTensorDesc(DataType.INT64, (1, 1, 1, 1, 2, 2)),
        BufferTensorDesc(DataType.INT16, (1, 1, 1, 3, 2, 2)),
        axis=d - 1,
        index_dimensions=2,
    )
    out = execute(
        desc, {"InputTensor": data.reshape(desc.input_tensor.sizes), "IndicesTensor": indices.reshape(-1)}
    )
    expected = ort("Gather", {"data": data, "indices": indices}, {"axis": 1})
    np.testing.assert_array_equal(out.output.reshape(expected.shape), expected, strict=True)


def test_large_block_gather_uses_whole_rows() -> None:
    rng = np.random.default_rng(3)
    data = random_data(rng, (50, 300), np.dtype(np.float64))
    indices = rng.integers(-50, 50, size=(7, 9)).astype(np.int32)
    desc = gather_desc(data, indices, 0)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    assert_same(desc, result.output, ort("Gather", {"data": data, "indices": indices}, {"axis": 0}))
