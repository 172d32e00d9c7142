"""DML_OPERATOR_GATHER_ELEMENTS.

``output[i, j, k, ...] = input[i, index[i, j, k, ...], k, ...]`` (the index replaces the Axis coordinate).
IndicesTensor.Sizes equal InputTensor.Sizes except on Axis; OutputTensor.Sizes equal IndicesTensor.Sizes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml.operators import GatherElementsDesc, ScatterDesc
from . import recycle
from .buffers import grid_offsets
from .common import bind, fail, prepared, require_sizes
from .indices import IndexContext, fast_indices, normalize_indices
from .options import KernelOptions, KernelResult
from .parallel import chunk_length, run_all, scratch, spans


def check_axis_shapes(desc: GatherElementsDesc | ScatterDesc) -> None:
    """Axis in range and IndicesTensor.Sizes equal to InputTensor.Sizes except on Axis."""
    in_sizes = desc.input_tensor.sizes
    idx_sizes = desc.indices_tensor.sizes
    d = len(in_sizes)
    if not 0 <= desc.axis < d:
        fail(desc, f"Axis {desc.axis} is outside [0, {d})", value=desc.axis)
    mismatch = [i for i in range(d) if i != desc.axis and in_sizes[i] != idx_sizes[i]]
    if mismatch:
        fail(
            desc,
            f"IndicesTensor.Sizes {list(idx_sizes)} must equal InputTensor.Sizes {list(in_sizes)} in every "
            f"dimension except Axis {desc.axis} (differs in dimension {mismatch[0]})",
            field="IndicesTensor",
            value=list(idx_sizes),
        )


def element_offsets(
    idx: np.ndarray, grid: tuple[int, ...], strides: tuple[int, ...], axis: int
) -> np.ndarray:
    """Turn validated indices (shaped ``grid``, not modified) into a new array of flat element offsets.

    The offset of element ``p`` is ``idx[p] * strides[axis]`` plus the offset of ``p``'s other
    coordinates; the latter is split into the coordinates before and after Axis so that only two small
    offset vectors are built and broadcast (e.g. along the last axis: ``row_base + idx``). The first
    operation reads the indices in their own dtype and writes int64, so no separate conversion pass runs.
    """
    pre, mid, post = math.prod(grid[:axis]), grid[axis], math.prod(grid[axis + 1 :])
    idx3 = idx.reshape(pre, mid, post)
    terms: list[np.ndarray] = []
    if pre > 1:
        terms.append(grid_offsets(grid[:axis], strides[:axis])[:, None, None])
    if post > 1:
        terms.append(grid_offsets(grid[axis + 1 :], strides[axis + 1 :])[None, None, :])
    if strides[axis] != 1:
        off = np.multiply(idx3, strides[axis], dtype=np.int64)
    elif terms:
        off = np.add(idx3, terms.pop(0), dtype=np.int64)
    else:
        off = idx3.astype(np.int64)
    for term in terms:
        off += term
    return off.reshape(-1)


def axis_split(sizes: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """``(pre, mid, post)``: the element counts before, on and after ``axis``."""
    return math.prod(sizes[:axis]), sizes[axis], math.prod(sizes[axis + 1 :])


def packed_offsets(
    raw: np.ndarray,
    box: tuple[int, int, int, int],
    dim: int,
    post: int,
    ctx: IndexContext,
) -> np.ndarray | None:
    """Flat offsets into a packed ``(pre, dim, post)`` tensor for one chunk of ``(pre, k, post)`` indices.

    Args:
        raw: the whole IndicesTensor viewed as ``(pre, k, post)`` (not modified).
        box: the chunk ``(p0, p1, k0, k1)`` from :func:`dmlshim.kernels.parallel.spans` over ``(pre, k)``.
        dim: the size of the indexed axis.
        post: the element count after the axis.
        ctx: the index rules.

    Returns:
        The chunk's offsets, flattened: int64 in the calling thread's scratch buffer (valid until the
        thread's next chunk) or the chunk's own validated indices; None when an index needs the general
        path.
    """
    p0, p1, k0, k1 = box
    idx = fast_indices(raw[p0:p1, k0:k1], (dim,), ctx)
    if idx is None:
        return None
    row = dim * post
    if post == 1 and not p0 and p1 - p0 <= 1:
        # np.take converts to intp itself; copying here would only add a pass.
        return idx.reshape(-1)
    # The offsets go to the thread's scratch buffer: consumed by the caller before its next chunk.
    off = scratch(idx.size).reshape(idx.shape)
    if post > 1:
        np.multiply(idx, post, out=off, dtype=np.int64)
        off += np.arange(post, dtype=np.int64)
        if p1 - p0 > 1:
            off += np.arange(p0 * row, p1 * row, row, dtype=np.int64)[:, None, None]
        elif p0:
            off += p0 * row
    elif p1 - p0 > 1:
        np.add(
            idx, np.arange(p0 * row, p1 * row, row, dtype=np.int64)[:, None, None], out=off, dtype=np.int64
        )
    else:
        np.add(idx, p0 * row, out=off, dtype=np.int64)
    return off.reshape(-1)


def _fast_gather(
    inp: np.ndarray, raw: np.ndarray, axis: int, dtype: np.dtype, ctx: IndexContext
) -> np.ndarray | None:
    """GATHER_ELEMENTS on a packed input, chunk by chunk on the kernel threads; None to use the
    general path (an index out of range or negative where it may not be)."""
    pre, dim, post = axis_split(inp.shape, axis)
    k = raw.shape[axis]
    raw3 = raw.reshape(pre, k, post)
    flat = inp.reshape(-1)
    out = recycle.empty((pre, k, post), dtype)

    def work(box: tuple[int, int, int, int]) -> bool:
        off = packed_offsets(raw3, box, dim, post, ctx)
        if off is None:
            return False
        p0, p1, k0, k1 = box
        # Indices are validated; "clip" only skips numpy's own bounds error path. spans() boxes are
        # contiguous slices of `out`, so the reshape is a view and np.take writes in place.
        np.take(flat, off, mode="clip", out=out[p0:p1, k0:k1].reshape(-1))
        return True

    boxes = spans(pre, k, max(1, chunk_length(raw.size) // post))
    return out if run_all(work, boxes, raw.size) else None


def _check_shapes(desc: GatherElementsDesc) -> bool:
    check_axis_shapes(desc)
    require_sizes(desc, "OutputTensor", desc.indices_tensor.sizes, "it must equal IndicesTensor.Sizes")
    return True


def run(desc: GatherElementsDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_GATHER_ELEMENTS; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    ctx, _ = prepared(desc, options, "InputTensor", ("InputTensor", "OutputTensor"), _check_shapes)
    idx_sizes = desc.indices_tensor.sizes

    inp = views["InputTensor"]
    axis = desc.axis
    raw = views["IndicesTensor"].array()
    dtype = desc.output_tensor.data_type.numpy_dtype
    if inp.contiguous and raw.size:
        out = _fast_gather(inp.packed(), raw, axis, dtype, ctx)
        if out is not None:
            return KernelResult(out.reshape(idx_sizes))
    idx = normalize_indices(raw, (inp.sizes[axis],), (axis,), ctx)
    if idx.size == 0:
        return KernelResult(np.zeros(idx_sizes, dtype=dtype))
    offsets = element_offsets(idx, idx_sizes, inp.strides, axis)
    # Indices are validated above; "clip" only skips numpy's own per-element bounds error path.
    return KernelResult(np.take(inp.flat, offsets, mode="clip").reshape(idx_sizes))
