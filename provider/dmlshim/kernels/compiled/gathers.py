"""GATHER, GATHER_ELEMENTS and GATHER_ND(1) through the compiled loops.

Each entry point takes what :func:`dmlshim.kernels.execute` takes and runs the same binding and
descriptor checks as the numpy kernel (the same functions, so the same errors, and the per-descriptor
results they remember are shared). It returns None where the numpy kernel must run instead: an index
the loop may not use (the numpy kernel then raises or clamps), an input read through Strides, an empty
tensor, an element width other than 1, 2, 4 or 8 bytes, or a gather that moves runs of 64 bytes or more
per index (``numpy.take`` copies those at memory speed; the compiled copy loop was up to 2.7x slower).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...dml.operators import GatherDesc, GatherElementsDesc, GatherNd1Desc, GatherNdDesc
from .. import recycle
from ..common import bind, prepared
from ..gather import _layout as gather_layout
from ..gather_elements import _check_shapes as gather_elements_shapes
from ..gather_elements import axis_split
from ..gather_nd import PackedTuples
from ..gather_nd import _layout as gather_nd_layout
from ..indices import IndexContext
from ..options import KernelOptions, KernelResult
from ..parallel import chunk_length, run_all, spans, worth_chunking
from . import loops

_BITS: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}
"""The unsigned type each element width is moved as."""

_GATHER_TENSORS = ("InputTensor", "OutputTensor")


def bits(dtype: np.dtype) -> np.dtype | None:
    """The unsigned integer type of ``dtype``'s width (None: no loop moves that width)."""
    return _BITS.get(dtype.itemsize)


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view: the loops see every input with one numba type, so one compiled specialization."""
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def allow_negative(ctx: IndexContext, raw: np.ndarray) -> bool:
    """Whether an index of ``raw`` may count from the end (the rule of :func:`..indices.fast_indices`)."""
    return ctx.negatives_allowed and raw.dtype.kind == "i"


def gather(desc: GatherDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult | None:
    """DML_OPERATOR_GATHER: the indices checked in one pass, then one copy pass over the output."""
    views = bind(desc, inputs)
    ctx, (expected, _, dim, pre, post, dtype) = prepared(
        desc, options, "InputTensor", _GATHER_TENSORS, gather_layout
    )
    inp = views["InputTensor"]
    raw = views["IndicesTensor"].array().reshape(-1)
    width = bits(dtype)
    total = pre * raw.size * post
    # Runs of 64 bytes or more per index are a memory copy numpy's take already does at memory speed.
    if not (inp.contiguous and total and width is not None and worth_chunking(post * dtype.itemsize)):
        return None
    idx = np.empty(raw.size, dtype=np.uint64)
    if loops.normalize(readonly(raw), dim, allow_negative(ctx, raw), idx):
        return None
    src = readonly(inp.flat[: inp.element_count].view(width))
    out = recycle.empty((pre, raw.size, post), dtype)
    dst = out.reshape(-1).view(width)

    def work(box: tuple[int, int, int, int]) -> bool:
        return not loops.gather(src, idx, dst, dim, post, *box)

    run_all(work, spans(pre, raw.size, max(1, chunk_length(total) // post)), total)
    return KernelResult(out.reshape(expected))


def gather_elements(
    desc: GatherElementsDesc, inputs: Mapping[str, Any], options: KernelOptions
) -> KernelResult | None:
    """DML_OPERATOR_GATHER_ELEMENTS: each index checked, wrapped and used in the one pass."""
    views = bind(desc, inputs)
    ctx, _ = prepared(desc, options, "InputTensor", _GATHER_TENSORS, gather_elements_shapes)
    inp = views["InputTensor"]
    raw = views["IndicesTensor"].array()
    dtype = desc.output_tensor.data_type.numpy_dtype
    width = bits(dtype)
    if not (inp.contiguous and raw.size and width is not None):
        return None
    pre, dim, post = axis_split(inp.sizes, desc.axis)
    k = raw.shape[desc.axis]
    src = readonly(inp.flat[: inp.element_count].view(width))
    flat = readonly(raw.reshape(-1))
    out = recycle.empty((pre, k, post), dtype)
    dst = out.reshape(-1).view(width)
    negative = allow_negative(ctx, raw)

    def work(box: tuple[int, int, int, int]) -> bool:
        return not loops.gather_elements(src, flat, dst, dim, k, post, *box, negative)

    boxes = spans(pre, k, max(1, chunk_length(raw.size) // post))
    if not run_all(work, boxes, raw.size):
        return None
    return KernelResult(out.reshape(desc.indices_tensor.sizes))


def gather_nd(
    desc: GatherNdDesc | GatherNd1Desc, inputs: Mapping[str, Any], options: KernelOptions
) -> KernelResult | None:
    """DML_OPERATOR_GATHER_ND / GATHER_ND1: each tuple checked and turned into its row in the one pass."""
    views = bind(desc, inputs)
    ctx, (r, q, t, expected) = prepared(desc, options, "InputTensor", _GATHER_TENSORS, gather_nd_layout)
    inp = views["InputTensor"]
    dtype = desc.output_tensor.data_type.numpy_dtype
    width = bits(dtype)
    batch = desc.batch_dimension_count
    sizes = desc.input_tensor.sizes
    block = math.prod(sizes[len(sizes) - r + batch + t :])
    if not (
        inp.contiguous
        and t
        and math.prod(expected)
        and width is not None
        and worth_chunking(block * dtype.itemsize)
    ):
        return None
    indices = views["IndicesTensor"].array()
    tuples = PackedTuples(indices, desc.input_tensor, r, q, batch, block, ctx)
    b_count, n_count, _ = tuples.tuples.shape
    src = readonly(inp.flat[: inp.element_count].view(width))
    coords = readonly(tuples.tuples.reshape(-1))
    dims = tuple(tuples.dims)
    strides = tuple(tuples.strides)
    out = recycle.empty((b_count, n_count, block), dtype)
    dst = out.reshape(-1).view(width)
    negative = allow_negative(ctx, indices)

    def work(box: tuple[int, int, int, int]) -> bool:
        return not loops.gather_nd(
            src, coords, dims, strides, tuples.batch_rows, dst, n_count, block, *box, negative
        )

    boxes = spans(b_count, n_count, max(1, chunk_length(out.size) // block))
    if not run_all(work, boxes, out.size):
        return None
    return KernelResult(out.reshape(expected))
