"""DML_OPERATOR_GATHER_ND / GATHER_ND1 kernels vs onnxruntime's GatherND (batch_dims 0 to 3)."""

from __future__ import annotations

import numpy as np
import pytest

from dmlshim.dml import BufferTensorDesc, DataType, GatherNdDesc
from dmlshim.kernels import execute
from tests.test_kernels_support import (
    assert_same,
    case_id,
    gather_nd_desc,
    onnx_indices,
    ort,
    random_data,
    random_indices,
    random_shape,
    run_packed,
    type_cases,
)


def _random_case(rng: np.random.Generator, dtype: np.dtype, itype: np.dtype, batch: int) -> tuple:
    while True:
        r = int(rng.integers(batch + 1, 9))
        t = int(rng.integers(1, r - batch + 1))
        q = int(rng.integers(batch + 1, 9))
        if (q - 1) + (r - batch - t) <= 8:
            break
    data = random_data(rng, random_shape(rng, r, 1024), dtype)
    middle = random_shape(rng, q - 1 - batch, 32)
    idx_shape = data.shape[:batch] + middle + (t,)
    indices = random_indices(rng, idx_shape, data.shape[batch : batch + t], itype)
    return data, indices


@pytest.mark.parametrize("batch", [0, 1, 2, 3], ids=lambda b: f"batch{b}")
@pytest.mark.parametrize("case", type_cases(44), ids=case_id)
def test_random_gather_nd1_matches_onnxruntime(case: tuple, batch: int) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(3000 + 100 * batch + seed)
    data, indices = _random_case(rng, dtype, itype, batch)
    desc = gather_nd_desc(data, indices, batch)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})

    # ONNX GatherND takes int64 indices only: the same values, cast.
    inputs = {"data": data, "indices": onnx_indices(indices, int64_only=True)}
    assert_same(desc, result.output, ort("GatherND", inputs, {"batch_dims": batch}))


@pytest.mark.parametrize("case", type_cases(22), ids=case_id)
def test_random_gather_nd_matches_onnxruntime(case: tuple) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(3500 + seed)
    data, indices = _random_case(rng, dtype, itype, 0)
    desc = gather_nd_desc(data, indices, 0, nd1=False)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    inputs = {"data": data, "indices": onnx_indices(indices, int64_only=True)}
    assert_same(desc, result.output, ort("GatherND", inputs))


def test_seed_examples() -> None:
    data = np.array([[0, 1], [2, 3]], np.float32)
    indices = np.array([[1], [0]], np.uint32)
    out = run_packed(
        gather_nd_desc(data, indices, 0, nd1=False), {"InputTensor": data, "IndicesTensor": indices}
    )
    np.testing.assert_array_equal(out.output, np.array([[2, 3], [0, 1]], np.float32), strict=True)

    # Example 2 as the page writes it: DimensionCount 4, InputDimensionCount 3, IndicesDimensionCount 2.
    desc = GatherNdDesc(
        BufferTensorDesc(DataType.FLOAT32, (1, 2, 2, 2)),
        BufferTensorDesc(DataType.UINT32, (1, 1, 2, 2)),
        BufferTensorDesc(DataType.FLOAT32, (1, 1, 2, 2)),
        input_dimension_count=3,
        indices_dimension_count=2,
    )
    inputs = {
        "InputTensor": np.arange(8, dtype=np.float32),
        "IndicesTensor": np.array([0, 1, 1, 0], np.uint32),
    }
    out = execute(desc, inputs)
    np.testing.assert_array_equal(
        out.output, np.array([2, 3, 4, 5], np.float32).reshape(1, 1, 2, 2), strict=True
    )


def test_large_blocks_and_scalar_output() -> None:
    rng = np.random.default_rng(5)
    data = random_data(rng, (4, 30, 200), np.dtype(np.int32))
    indices = random_indices(rng, (4, 9, 1), 30, np.dtype(np.int64))
    desc = gather_nd_desc(data, indices, 1)
    out = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    assert_same(desc, out.output, ort("GatherND", {"data": data, "indices": indices}, {"batch_dims": 1}))

    # A full tuple on a 1-D index tensor: the ONNX output is a scalar, DirectML's is Sizes {1,1}.
    indices = np.array([3, -7, 199], np.int64)
    desc = gather_nd_desc(data, indices, 0)
    out = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    assert_same(desc, out.output, ort("GatherND", {"data": data, "indices": indices}))
