"""DML_OPERATOR_GATHER_ELEMENTS kernel vs onnxruntime's GatherElements."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_kernels_support import (
    assert_same,
    case_id,
    gather_elements_desc,
    onnx_indices,
    ort,
    random_data,
    random_indices,
    random_shape,
    run_packed,
    type_cases,
)


def _case(rng: np.random.Generator, rank: int, dtype: np.dtype, itype: np.dtype, axis: int) -> None:
    data = random_data(rng, random_shape(rng, rank), dtype)
    idx_shape = list(data.shape)
    idx_shape[axis] = int(rng.integers(1, 6))  # DirectML: indices differ from data only on Axis
    indices = random_indices(rng, idx_shape, data.shape[axis], itype)
    desc = gather_elements_desc(data, indices, axis)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})

    expected = ort("GatherElements", {"data": data, "indices": onnx_indices(indices)}, {"axis": axis})
    assert_same(desc, result.output, expected)


@pytest.mark.parametrize("case", type_cases(88), ids=case_id)
def test_random_gather_elements_matches_onnxruntime(case: tuple) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(2000 + seed)
    rank = int(rng.integers(1, 9))
    _case(rng, rank, dtype, itype, int(rng.integers(-rank, rank)))


@pytest.mark.parametrize("axis", [0, 1, 2, -1], ids=lambda a: f"axis{a}")
def test_every_axis_of_a_larger_tensor(axis: int) -> None:
    rng = np.random.default_rng(21 + axis)
    data = random_data(rng, (6, 40, 25), np.dtype(np.float32))
    idx_shape = list(data.shape)
    idx_shape[axis] = 11
    indices = random_indices(rng, idx_shape, data.shape[axis], np.dtype(np.int64))
    desc = gather_elements_desc(data, indices, axis)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices})
    assert_same(
        desc, result.output, ort("GatherElements", {"data": data, "indices": indices}, {"axis": axis})
    )


def test_seed_example() -> None:
    # dml_gather_elements.md, Axis 0 (its output is labelled UINT32 but holds the float input's values).
    data = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    indices = np.array([[1, 2, 0], [2, 0, 0]], np.uint32)
    result = run_packed(
        gather_elements_desc(data, indices, 0), {"InputTensor": data, "IndicesTensor": indices}
    )
    np.testing.assert_array_equal(result.output, np.array([[4, 8, 3], [7, 2, 3]], np.float32), strict=True)
