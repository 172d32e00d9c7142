"""DML_OPERATOR_GATHER_ND and DML_OPERATOR_GATHER_ND1 (GATHER_ND is ND1 with BatchDimensionCount 0).

With the meaningful (unpadded) shapes ``data`` (InputDimensionCount dims) and ``indices``
(IndicesDimensionCount dims), ``b`` batch dims and tuples of ``t = indices[-1]`` coordinates:
``output[batch..., n..., tail...] = input[batch..., indices[batch..., n..., :], tail...]``, i.e. the ONNX
GatherND ``batch_dims`` semantics; OutputTensor.Sizes is ``indices[:-1] + data[b+t:]`` right-aligned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml import shapes
from ..dml.operators import GatherNd1Desc, GatherNdDesc, ScatterNdDesc
from ..dml.tensor import BufferTensorDesc
from . import recycle
from .buffers import grid_offsets
from .common import (
    bind,
    fail,
    prepared,
    require_leading_ones,
    require_sizes,
)
from .indices import IndexContext, fast_indices, normalize_indices
from .options import KernelOptions, KernelResult
from .parallel import CHUNK_ELEMENTS, chunk_length, run_all, spans, worth_chunking


def check_nd_counts(desc: GatherNdDesc | GatherNd1Desc | ScatterNdDesc, batch: int) -> tuple[int, int, int]:
    """Check InputDimensionCount, IndicesDimensionCount, BatchDimensionCount and the padding 1s.

    Returns:
        ``(r, q, t)``: the real input rank, the real indices rank and the index tuple size.
    """
    d = desc.input_tensor.dimension_count
    r, q = desc.input_dimension_count, desc.indices_dimension_count
    # The pages print "[1, DimensionCount)" for ScatterND but their own examples use the inclusive bound.
    if not 1 <= r <= d:
        fail(desc, f"InputDimensionCount {r} is outside [1, {d}]", value=r)
    if not 1 <= q <= d:
        fail(desc, f"IndicesDimensionCount {q} is outside [1, {d}]", value=q)
    require_leading_ones(desc, "InputTensor", r, "InputDimensionCount")
    require_leading_ones(desc, "IndicesTensor", q, "IndicesDimensionCount")
    t = desc.indices_tensor.sizes[-1]
    if batch < 0 or batch >= q:
        fail(desc, f"BatchDimensionCount {batch} must be less than IndicesDimensionCount {q}", value=batch)
    if batch + t > r:
        fail(
            desc,
            f"index tuple size {t} (IndicesTensor.Sizes[-1]) plus BatchDimensionCount {batch} exceeds "
            f"InputDimensionCount {r}",
            field="IndicesTensor",
            value=t,
        )
    in_m = desc.input_tensor.sizes[d - r :]
    idx_m = desc.indices_tensor.sizes[d - q :]
    if tuple(in_m[:batch]) != tuple(idx_m[:batch]):
        fail(
            desc,
            f"the {batch} batch dimensions of InputTensor {list(in_m[:batch])} and IndicesTensor "
            f"{list(idx_m[:batch])} must be equal",
            field="IndicesTensor",
            value=list(idx_m[:batch]),
        )
    return r, q, t


def tuple_offsets(
    indices: np.ndarray,
    input_tensor: BufferTensorDesc,
    strides: tuple[int, ...],
    r: int,
    q: int,
    batch: int,
    ctx: IndexContext,
) -> np.ndarray:
    """Normalise the index tuples and turn each into the element offset of the block it selects.

    Args:
        indices: IndicesTensor values shaped like its Sizes (tuple components last).
        input_tensor: the addressed tensor's desc.
        strides: the strides that turn coordinates into offsets: element strides, or element strides
            divided by the block size to get block (row) numbers of a packed tensor.
        r: InputDimensionCount.
        q: IndicesDimensionCount.
        batch: BatchDimensionCount.
        ctx: the index rules.

    Returns:
        int64 offsets shaped ``(B, N)``: B batch positions by N tuples per batch, batch offset included.
    """
    d = input_tensor.dimension_count
    t = indices.shape[-1]
    first = d - r + batch  # the DirectML dimension that a tuple's first coordinate addresses
    dims = input_tensor.sizes[first : first + t]
    idx = normalize_indices(indices, dims, tuple(range(first, first + t)), ctx)
    batch_sizes = input_tensor.sizes[d - r : first]
    b_count = math.prod(batch_sizes)
    n_count = math.prod(indices.shape[d - q + batch : d - 1])
    cols = idx.reshape(b_count, n_count, t)
    off = np.zeros(cols.shape[:2], dtype=np.int64)
    term = np.empty_like(off)
    for j in range(t):
        stride = strides[first + j]
        if stride:
            # int64 arithmetic whatever the index dtype: int32 index * stride may exceed INT32_MAX.
            np.multiply(cols[:, :, j], stride, out=term, dtype=np.int64)
            off += term
    if b_count > 1:
        off += grid_offsets(batch_sizes, strides[d - r : first])[:, None]
    return off


class PackedTuples:
    """Row numbers of index tuples into a packed tensor seen as a ``(-1, block)`` matrix, chunk by chunk.

    Args:
        indices: IndicesTensor values shaped like its Sizes (tuple components last; not modified).
        tensor: the addressed tensor's desc (packed).
        r: InputDimensionCount.
        q: IndicesDimensionCount.
        batch: BatchDimensionCount.
        block: the element count of the block one tuple selects.
        ctx: the index rules.

    Attributes:
        tuples: the indices viewed as ``(B, N, t)``: B batch positions by N tuples per batch.
        dims: the sizes the ``t`` tuple components address.
        strides: each component's row stride.
        batch_rows: the first row of each batch position, int64 ``(B,)``.
    """

    def __init__(
        self,
        indices: np.ndarray,
        tensor: BufferTensorDesc,
        r: int,
        q: int,
        batch: int,
        block: int,
        ctx: IndexContext,
    ) -> None:
        d = tensor.dimension_count
        t = indices.shape[-1]
        first = d - r + batch
        self.dims = tensor.sizes[first : first + t]
        row_strides = tuple(s // block for s in tensor.packed_strides)
        self.strides = row_strides[first : first + t]
        batch_sizes = tensor.sizes[d - r : first]
        b_count = math.prod(batch_sizes)
        n_count = math.prod(indices.shape[d - q + batch : d - 1])
        self.tuples = indices.reshape(b_count, n_count, t)
        self.batch_rows = grid_offsets(batch_sizes, row_strides[d - r : first])
        self._ctx = ctx

    def rows(self, box: tuple[int, int, int, int]) -> np.ndarray | None:
        """The flat row numbers of the tuples in ``box`` (``(b0, b1, n0, n1)`` over ``(B, N)``), or
        None when an index needs the general path of :func:`tuple_offsets`."""
        b0, b1, n0, n1 = box
        cols = fast_indices(self.tuples[b0:b1, n0:n1], self.dims, self._ctx)
        if cols is None:
            return None
        rows: np.ndarray | None = None
        for j, stride in enumerate(self.strides):
            if not stride:
                continue
            if rows is None:
                rows = np.multiply(cols[..., j], stride, dtype=np.int64)
            else:
                # int64 whatever the index dtype: an int32 index times a stride may exceed INT32_MAX.
                rows += np.multiply(cols[..., j], stride, dtype=np.int64)
        if rows is None:
            rows = np.zeros(cols.shape[:-1], dtype=np.int64)
        if self.tuples.shape[0] > 1:
            rows += self.batch_rows[b0:b1, None]
        return rows.reshape(-1)


def _fast_gather(packed: np.ndarray, tuples: PackedTuples, block: int, dtype: np.dtype) -> np.ndarray | None:
    """GATHER_ND on a packed input, chunk by chunk on the kernel threads; None to use the general path."""
    b_count, n_count, _ = tuples.tuples.shape
    src = packed.reshape(-1, block)
    out = recycle.empty((b_count, n_count, block), dtype)

    def work(box: tuple[int, int, int, int]) -> bool:
        rows = tuples.rows(box)
        if rows is None:
            return False
        b0, b1, n0, n1 = box
        # Indices are validated; spans() boxes are contiguous slices of `out`, written in place.
        np.take(src, rows, axis=0, mode="clip", out=out[b0:b1, n0:n1].reshape(-1, block))
        return True

    boxes = spans(b_count, n_count, max(1, chunk_length(out.size) // block))
    return out if run_all(work, boxes, out.size) else None


def _layout(desc: GatherNdDesc | GatherNd1Desc) -> tuple[int, int, int, tuple[int, ...]]:
    """The structural checks of GATHER_ND(1): ``(r, q, t, output sizes)``."""
    batch = desc.batch_dimension_count
    r, q, t = check_nd_counts(desc, batch)
    try:
        expected = shapes.gather_nd_output_sizes(
            desc.input_tensor.sizes, desc.indices_tensor.sizes, r, q, batch
        )
    except ValueError as e:
        fail(desc, str(e), field="OutputTensor")
    require_sizes(desc, "OutputTensor", expected, "DML_GATHER_ND output Sizes formula")
    return r, q, t, tuple(expected)


def run(
    desc: GatherNdDesc | GatherNd1Desc, inputs: Mapping[str, Any], options: KernelOptions
) -> KernelResult:
    """Execute DML_OPERATOR_GATHER_ND / GATHER_ND1; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    ctx, (r, q, t, expected) = prepared(
        desc, options, "InputTensor", ("InputTensor", "OutputTensor"), _layout
    )
    batch = desc.batch_dimension_count
    in_sizes = desc.input_tensor.sizes

    inp = views["InputTensor"]
    dtype = desc.output_tensor.data_type.numpy_dtype
    d = len(in_sizes)
    tail = in_sizes[d - r + batch + t :]
    block = math.prod(tail)
    indices = views["IndicesTensor"].array()
    if math.prod(expected) == 0:
        # Still check the indices: an index into an empty dimension is out of range.
        tuple_offsets(indices, desc.input_tensor, inp.strides, r, q, batch, ctx)
        return KernelResult(np.zeros(expected, dtype=dtype))
    # One chunk's worth of output gains nothing from the chunked path but its set-up cost.
    chunked = math.prod(expected) > CHUNK_ELEMENTS
    if chunked and inp.contiguous and t and worth_chunking(block * dtype.itemsize):
        tuples = PackedTuples(indices, desc.input_tensor, r, q, batch, block, ctx)
        fast = _fast_gather(inp.flat[: inp.element_count], tuples, block, dtype)
        if fast is not None:
            return KernelResult(fast.reshape(expected))
    if inp.contiguous:
        # Packed input: each tuple selects one run of `block` elements, i.e. one row of a (-1, block)
        # matrix; row numbers come straight from the packed strides divided by the block size.
        row_strides = tuple(s // block for s in inp.strides)
        rows = tuple_offsets(indices, desc.input_tensor, row_strides, r, q, batch, ctx).reshape(-1)
        packed = inp.flat[: inp.element_count]
        fresh = recycle.empty((rows.size, block), packed.dtype)
        if block == 1:
            out = np.take(packed, rows, mode="clip", out=fresh.reshape(-1))
        else:
            out = np.take(packed.reshape(-1, block), rows, axis=0, mode="clip", out=fresh)
    else:
        offsets = tuple_offsets(indices, desc.input_tensor, inp.strides, r, q, batch, ctx).reshape(-1)
        if tail:
            offsets = offsets[:, None] + grid_offsets(tail, inp.strides[d - len(tail) :])[None, :]
        out = np.take(inp.flat, offsets, mode="clip")
    return KernelResult(out.reshape(expected))
