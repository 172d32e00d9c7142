"""DML_OPERATOR_SCATTER and DML_OPERATOR_SCATTER_ND kernels vs onnxruntime's ScatterElements / ScatterND.

Random cases use unique indices (ONNX leaves duplicates to the implementation); duplicates are tested
separately against the seed example and onnxruntime's sequential, single-threaded last-write-wins.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dmlshim.dml import BufferTensorDesc, DataType, ScatterDesc
from dmlshim.kernels import KernelOptions, execute
from tests.test_kernels_support import (
    assert_same,
    case_id,
    onnx_indices,
    ort,
    random_data,
    random_indices,
    random_shape,
    run_packed,
    scatter_desc,
    scatter_nd_desc,
    type_cases,
)


def _unique_along_axis(
    rng: np.random.Generator, shape: tuple, axis: int, dim: int, itype: np.dtype
) -> np.ndarray:
    """Indices whose values along ``axis`` are distinct in every line (some negative if signed)."""
    a = axis % len(shape)
    pre, post = math.prod(shape[:a]), math.prod(shape[a + 1 :])
    keys = rng.random((pre, dim, post))
    picks = np.argsort(keys, axis=1)[:, : shape[a], :].reshape(shape)
    if np.dtype(itype).kind == "i":
        picks = np.where(rng.random(shape) < 0.3, picks - dim, picks)
    return picks.astype(itype)


def _elements_case(rng: np.random.Generator, dtype: np.dtype, itype: np.dtype) -> tuple:
    r = int(rng.integers(1, 9))
    data = random_data(rng, random_shape(rng, r), dtype)
    axis = int(rng.integers(-r, r))
    idx_shape = list(data.shape)
    idx_shape[axis] = int(rng.integers(1, data.shape[axis] + 1))
    indices = _unique_along_axis(rng, tuple(idx_shape), axis, data.shape[axis], itype)
    updates = random_data(rng, indices.shape, dtype)
    return data, indices, updates, axis


@pytest.mark.parametrize("case", type_cases(88), ids=case_id)
def test_random_scatter_elements_matches_onnxruntime(case: tuple) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(4000 + seed)
    data, indices, updates, axis = _elements_case(rng, dtype, itype)
    desc = scatter_desc(data, indices, axis)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})

    inputs = {"data": data, "indices": onnx_indices(indices), "updates": updates}
    assert_same(desc, result.output, ort("ScatterElements", inputs, {"axis": axis}))
    assert result.duplicate_indices == 0


def _nd_case(rng: np.random.Generator, dtype: np.dtype, itype: np.dtype, unique: bool = True) -> tuple:
    while True:
        r = int(rng.integers(1, 9))
        t = int(rng.integers(1, r + 1))
        q = int(rng.integers(1, 9))
        if (q - 1) + (r - t) <= 8:
            break
    data = random_data(rng, random_shape(rng, r, 1024), dtype)
    rows = math.prod(data.shape[:t])
    lead = random_shape(rng, q - 1, rows if unique else 64)
    n = math.prod(lead)
    picks = rng.choice(rows, size=n, replace=not unique)
    coords = np.stack(np.unravel_index(picks, data.shape[:t]), axis=-1).reshape((*lead, t))
    if np.dtype(itype).kind == "i":
        dims = np.asarray(data.shape[:t])
        coords = np.where(rng.random(coords.shape) < 0.3, coords - dims, coords)
    indices = coords.astype(itype)
    updates = random_data(rng, lead + data.shape[t:], dtype)
    return data, indices, updates


@pytest.mark.parametrize("case", type_cases(88), ids=case_id)
def test_random_scatter_nd_matches_onnxruntime(case: tuple) -> None:
    seed, dtype, itype = case
    rng = np.random.default_rng(5000 + seed)
    data, indices, updates = _nd_case(rng, dtype, itype)
    desc = scatter_nd_desc(data, indices)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})

    inputs = {"data": data, "indices": onnx_indices(indices, int64_only=True), "updates": updates}
    assert_same(desc, result.output, ort("ScatterND", inputs))
    assert result.duplicate_indices == 0


def test_seed_example_1d_duplicate_last_write_wins() -> None:
    # dml_scatter_elements.md example 1: index 3 is written twice and the later update, 7, is shown.
    desc = ScatterDesc(
        BufferTensorDesc(DataType.FLOAT32, (5,)),
        BufferTensorDesc(DataType.UINT32, (4,)),
        BufferTensorDesc(DataType.FLOAT32, (4,)),
        BufferTensorDesc(DataType.FLOAT32, (5,)),
        axis=0,
    )
    data = np.arange(5, dtype=np.float32)
    indices = np.array([3, 1, 3, 0], np.uint32)
    updates = np.array([5, 6, 7, 8], np.float32)
    result = execute(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})
    np.testing.assert_array_equal(result.output, np.array([8, 6, 2, 7, 4], np.float32), strict=True)
    assert result.duplicate_indices == 1
    expected = ort("ScatterElements", {"data": data, "indices": indices.astype(np.int64), "updates": updates})
    np.testing.assert_array_equal(result.output, expected, strict=True)


def test_seed_example_2d() -> None:
    # dml_scatter_elements.md example 2 (its InputTensor Sizes typo {2,3} is {3,3}).
    data = np.zeros((3, 3), np.float32)
    indices = np.array([[1, 0, 2], [0, 2, 1]], np.uint32)
    updates = np.array([[10, 11, 12], [20, 21, 22]], np.float32)
    desc = scatter_desc(data, indices, 0)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})
    expected = np.array([[20, 11, 0], [10, 0, 22], [0, 21, 12]], np.float32)
    np.testing.assert_array_equal(result.output.reshape(3, 3), expected, strict=True)


def test_seed_example_scatter_nd() -> None:
    # dml_scatter_nd.md: its indices are typed FLOAT32 (a typo) and its tensors are padded here to D = 2.
    data = np.arange(1, 9, dtype=np.float32)
    indices = np.array([[4], [3], [1], [7]], np.uint32)
    updates = np.array([9, 10, 11, 12], np.float32)
    desc = scatter_nd_desc(data, indices)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})
    expected = np.array([1, 11, 3, 10, 9, 6, 7, 12], np.float32)
    np.testing.assert_array_equal(result.output.reshape(-1), expected, strict=True)


def _element_targets(indices: np.ndarray, axis: int, shape: tuple) -> np.ndarray:
    coords = list(np.indices(indices.shape))
    coords[axis] = np.where(indices < 0, indices + shape[axis], indices)
    return np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), shape)


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"s{s}")
def test_duplicate_scatter_elements_last_write_wins_like_onnxruntime(seed: int) -> None:
    rng = np.random.default_rng(6000 + seed)
    dtype = (np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.uint8), np.dtype(np.float16))[seed % 4]
    r = int(rng.integers(1, 5))
    data = random_data(rng, random_shape(rng, r, 512, 6), dtype)
    axis = int(rng.integers(0, r))
    idx_shape = list(data.shape)
    idx_shape[axis] = int(rng.integers(2, 3 * data.shape[axis] + 2))  # more writes than slots
    indices = random_indices(rng, idx_shape, data.shape[axis], np.dtype(np.int64))
    updates = random_data(rng, indices.shape, dtype)
    desc = scatter_desc(data, indices, axis)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})

    expected = ort("ScatterElements", {"data": data, "indices": indices, "updates": updates}, {"axis": axis})
    assert_same(desc, result.output, expected)
    targets = _element_targets(indices, axis, data.shape)
    assert result.duplicate_indices == targets.size - np.unique(targets).size
    assert result.duplicate_indices > 0

    quiet = run_packed(
        desc,
        {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates},
        KernelOptions(detect_duplicates=False),
    )
    assert quiet.duplicate_indices == 0
    np.testing.assert_array_equal(quiet.output, result.output, strict=True)


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"s{s}")
def test_duplicate_scatter_nd_last_write_wins_like_onnxruntime(seed: int) -> None:
    rng = np.random.default_rng(7000 + seed)
    dtype = (np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int8), np.dtype(np.uint16))[seed % 4]
    data, indices, updates = _nd_case(rng, dtype, np.dtype(np.int64), unique=False)
    desc = scatter_nd_desc(data, indices)

    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})

    # tests.oracle runs onnxruntime single-threaded: its ScatterND then applies tuples in order.
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": indices, "updates": updates}))
    t = indices.shape[-1]
    dims = np.asarray(data.shape[:t])
    coords = np.where(indices < 0, indices + dims, indices).reshape(-1, t)
    rows = np.ravel_multi_index(tuple(coords.T), data.shape[:t]) if t else np.zeros(0, np.int64)
    assert result.duplicate_indices == rows.size - np.unique(rows).size


def test_scatter_nd_duplicates_with_few_writes_into_a_large_tensor() -> None:
    data = np.zeros((4000, 3), np.float32)
    indices = np.array([[5], [7], [5], [3999], [5], [-1]], np.int64)
    updates = np.arange(18, dtype=np.float32).reshape(6, 3)
    desc = scatter_nd_desc(data, indices)
    result = run_packed(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates})
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": indices, "updates": updates}))
    assert result.duplicate_indices == 3  # two of the three writes to row 5, one of the two to 3999


@pytest.mark.parametrize("detect", [True, False], ids=["counted", "not-counted"])
def test_scatter_nd_runs_with_duplicates_keep_the_last_write(detect: bool) -> None:
    """Runs of 64 floats (256 bytes: written whole, one item per run) with repeated rows, in and out of
    the duplicate count: the last write of each row wins, as in single-threaded onnxruntime."""
    rng = np.random.default_rng(4242)
    data = rng.standard_normal((300, 4, 64)).astype(np.float32)
    indices = np.array([[7], [12], [7], [299], [-1], [7], [0]], np.int64)
    updates = rng.standard_normal((7, 4, 64)).astype(np.float32)
    desc = scatter_nd_desc(data, indices)
    result = run_packed(
        desc,
        {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates},
        KernelOptions(detect_duplicates=detect),
    )
    assert_same(desc, result.output, ort("ScatterND", {"data": data, "indices": indices, "updates": updates}))
    assert result.duplicate_indices == (3 if detect else 0)  # two of three writes to row 7, one to 299


@pytest.mark.parametrize("nd", [False, True], ids=["elements", "nd"])
def test_callers_arrays_are_unchanged(nd: bool) -> None:
    rng = np.random.default_rng(99)
    if nd:
        data, indices, updates = _nd_case(rng, np.dtype(np.float32), np.dtype(np.int64))
        desc = scatter_nd_desc(data, indices)
    else:
        data, indices, updates, axis = _elements_case(rng, np.dtype(np.float32), np.dtype(np.int64))
        desc = scatter_desc(data, indices, axis)
    assert (indices < 0).any()  # the negative-index path normalises a copy, never the caller's array
    bound = {
        "InputTensor": data.reshape(desc.input_tensor.sizes),
        "IndicesTensor": indices.reshape(desc.indices_tensor.sizes),
        "UpdatesTensor": updates.reshape(desc.updates_tensor.sizes),
    }
    before = {k: v.copy() for k, v in bound.items()}
    result = execute(desc, bound)
    for name, array in bound.items():
        np.testing.assert_array_equal(array, before[name], strict=True, err_msg=name)
    assert not np.shares_memory(result.output, bound["InputTensor"])
    assert result.output.flags.writeable


def test_empty_indices_give_a_copy_of_the_input() -> None:
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    indices = np.zeros((0, 4), np.int64)
    updates = np.zeros((0, 4), np.int32)
    result = run_packed(
        scatter_desc(data, indices, 0),
        {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates},
    )
    np.testing.assert_array_equal(result.output.reshape(3, 4), data, strict=True)
    nd_indices = np.zeros((0, 1), np.int64)
    result = run_packed(
        scatter_nd_desc(data, nd_indices),
        {"InputTensor": data, "IndicesTensor": nd_indices, "UpdatesTensor": updates},
    )
    np.testing.assert_array_equal(result.output.reshape(3, 4), data, strict=True)
