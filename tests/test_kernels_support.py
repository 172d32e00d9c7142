"""Helpers for the kernel tests (no tests here): random data, ONNX -> DirectML descriptors, comparison.

Descriptors are built the way the DML EP builds them (facts sheet section 5): ONNX shapes right-aligned
to one DimensionCount D with leading 1s, Strides null. Output Sizes come from the ONNX shapes computed
here with plain numpy shape arithmetic, never from dmlshim's own Sizes formulas, and expected values
come from onnxruntime (tests/oracle.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dmlshim.dml import (
    BufferTensorDesc,
    DataType,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
    right_align,
)
from dmlshim.kernels import KernelOptions, KernelResult, execute
from tests.oracle import ort_node

DATA_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(n)
    for n in (
        "float32",
        "float16",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    )
)
"""Every data type DirectML supports for the six operators (64-bit ones from FL 4_1)."""

INDEX_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(n) for n in ("int32", "int64", "uint32", "uint64"))
"""Every DirectML index type (FL 3_0 and later)."""


def short(dtype: np.dtype) -> str:
    """A compact test id: f32, i64, u8 ..."""
    dt = np.dtype(dtype)
    return f"{dt.kind}{dt.itemsize * 8}"


def type_cases(count: int) -> list[tuple[int, np.dtype, np.dtype]]:
    """``count`` (seed, data dtype, index dtype) triples cycling through every combination."""
    out = []
    for seed in range(count):
        data = DATA_DTYPES[seed % len(DATA_DTYPES)]
        index = INDEX_DTYPES[(seed // len(DATA_DTYPES) + seed) % len(INDEX_DTYPES)]
        out.append((seed, data, index))
    return out


def case_id(case: tuple[int, np.dtype, np.dtype]) -> str:
    seed, data, index = case
    return f"s{seed}-{short(data)}-idx{short(index)}"


def random_shape(rng: np.random.Generator, rank: int, max_elements: int = 2048, max_dim: int = 4) -> tuple:
    """A random shape of ``rank`` dims in [1, max_dim] with at most ``max_elements`` elements."""
    dims: list[int] = []
    for _ in range(rank):
        room = max_elements // max(1, math.prod(dims))
        dims.append(int(rng.integers(1, max(1, min(max_dim, room)) + 1)))
    return tuple(dims)


def random_data(rng: np.random.Generator, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Values covering the whole range of ``dtype`` (floats include NaN, infinities and -0.0)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        values = np.asarray(rng.standard_normal(shape) * 1000).astype(dt)
        flat = values.reshape(-1)
        if flat.size >= 8:
            flat[rng.integers(0, flat.size, 4)] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=dt)
        return values
    info = np.iinfo(dt)
    return np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True))


def random_indices(
    rng: np.random.Generator, shape: Sequence[int], dim: int | Sequence[int], dtype: np.dtype
) -> np.ndarray:
    """Valid indices for ``dim``; negative ones (from -dim) too when ``dtype`` is signed.

    ``dim`` may be a sequence: then the last axis of ``shape`` holds one component per entry (ND tuples).
    """
    dt = np.dtype(dtype)
    dims = np.broadcast_to(np.asarray(dim, dtype=np.int64), tuple(shape)) if len(shape) else np.int64(dim)
    low = -dims if dt.kind == "i" else np.zeros_like(dims)
    values = rng.integers(low, dims, size=tuple(shape)) if np.size(dims) else np.zeros(shape, np.int64)
    return np.asarray(values).astype(dt)


def onnx_indices(indices: np.ndarray, *, int64_only: bool = False) -> np.ndarray:
    """The same index values as an ONNX index type: uint32/uint64 (and int32 where ONNX wants int64)."""
    if indices.dtype == np.int64 or (indices.dtype == np.int32 and not int64_only):
        return indices
    return indices.astype(np.int64)


def tensor(dtype: np.dtype, shape: Sequence[int], d: int) -> BufferTensorDesc:
    """A packed DML_BUFFER_TENSOR_DESC of an ONNX shape right-aligned to ``d`` dimensions."""
    return BufferTensorDesc(DataType.from_numpy(dtype), right_align(shape, d))


def gather_desc(data: np.ndarray, indices: np.ndarray, axis: int) -> GatherDesc:
    """DML_GATHER for ONNX Gather: D = max(r, q, r+q-1), Axis shifted, IndexDimensions = q."""
    r, q = data.ndim, indices.ndim
    d = max(r, q, r + q - 1)
    a = axis % r
    out_shape = data.shape[:a] + indices.shape + data.shape[a + 1 :]
    return GatherDesc(
        tensor(data.dtype, data.shape, d),
        tensor(indices.dtype, indices.shape, d),
        tensor(data.dtype, out_shape, d),
        axis=a + d - r,
        index_dimensions=q,
    )


def gather_elements_desc(data: np.ndarray, indices: np.ndarray, axis: int) -> GatherElementsDesc:
    """DML_GATHER_ELEMENTS for ONNX GatherElements: D = r."""
    r = data.ndim
    return GatherElementsDesc(
        tensor(data.dtype, data.shape, r),
        tensor(indices.dtype, indices.shape, r),
        tensor(data.dtype, indices.shape, r),
        axis=axis % r,
    )


def gather_nd_desc(
    data: np.ndarray, indices: np.ndarray, batch_dims: int, *, nd1: bool = True
) -> GatherNd1Desc | GatherNdDesc:
    """DML_GATHER_ND1 (or GATHER_ND when ``nd1`` is false) for ONNX GatherND: D = max(r, q, rank(out))."""
    r, q = data.ndim, indices.ndim
    out_shape = indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1] :]
    d = max(r, q, len(out_shape))
    tensors = (
        tensor(data.dtype, data.shape, d),
        tensor(indices.dtype, indices.shape, d),
        tensor(data.dtype, out_shape, d),
    )
    if nd1:
        return GatherNd1Desc(
            *tensors, input_dimension_count=r, indices_dimension_count=q, batch_dimension_count=batch_dims
        )
    assert batch_dims == 0
    return GatherNdDesc(*tensors, input_dimension_count=r, indices_dimension_count=q)


def scatter_desc(data: np.ndarray, indices: np.ndarray, axis: int) -> ScatterDesc:
    """DML_SCATTER for ONNX ScatterElements: D = max(r, 4), Axis shifted."""
    r = data.ndim
    d = max(r, 4)
    return ScatterDesc(
        tensor(data.dtype, data.shape, d),
        tensor(indices.dtype, indices.shape, d),
        tensor(data.dtype, indices.shape, d),
        tensor(data.dtype, data.shape, d),
        axis=axis % r + d - r,
    )


def scatter_nd_desc(data: np.ndarray, indices: np.ndarray) -> ScatterNdDesc:
    """DML_SCATTER_ND for ONNX ScatterND: D = max(r, q, rank(updates))."""
    r, q = data.ndim, indices.ndim
    upd_shape = indices.shape[:-1] + data.shape[indices.shape[-1] :]
    d = max(r, q, len(upd_shape))
    return ScatterNdDesc(
        tensor(data.dtype, data.shape, d),
        tensor(indices.dtype, indices.shape, d),
        tensor(data.dtype, upd_shape, d),
        tensor(data.dtype, data.shape, d),
        input_dimension_count=r,
        indices_dimension_count=q,
    )


def run_packed(
    desc: OperatorDesc, arrays: Mapping[str, np.ndarray], options: KernelOptions | None = None
) -> KernelResult:
    """Execute with each ONNX-shaped array reshaped to its tensor's Sizes (the packed form)."""
    tensors = desc.tensors()
    bound = {name: a.reshape(tensors[name].sizes) for name, a in arrays.items()}
    return execute(desc, bound, options or KernelOptions())


def assert_same(desc: OperatorDesc, actual: np.ndarray, expected: np.ndarray) -> None:
    """DirectML output vs an ONNX output: Sizes are the right-aligned ONNX shape, values identical."""
    sizes = desc.tensors()["OutputTensor"].sizes
    assert actual.shape == sizes
    assert right_align(expected.shape, len(sizes)) == sizes, (expected.shape, sizes)
    assert actual.dtype == expected.dtype
    assert actual.flags.c_contiguous
    np.testing.assert_array_equal(actual, expected.reshape(sizes), strict=True)


def ort(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    attrs: Mapping[str, object] | None = None,
    opset: int = 13,
) -> np.ndarray:
    """onnxruntime CPU, single-threaded (tests.oracle)."""
    return ort_node(op, inputs, attrs, opset)
