"""DML_OPERATOR_GATHER.

``output[pre..., j..., post...] = input[pre..., indices[j...], post...]`` where ``pre`` runs over
InputTensor.Sizes[0..Axis), ``j`` over the last IndexDimensions dimensions of IndicesTensor and ``post``
over InputTensor.Sizes(Axis..D); OutputTensor.Sizes is that concatenation right-aligned to D.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml import shapes
from ..dml.operators import GatherDesc
from . import recycle
from .buffers import grid_offsets
from .common import (
    bind,
    fail,
    prepared,
    require_leading_ones,
    require_sizes,
)
from .indices import normalize_indices
from .options import KernelOptions, KernelResult
from .parallel import PARALLEL_MIN_ELEMENTS, chunk_length, run_all, spans, worth_chunking


def _take_blocks(src: np.ndarray, idx: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``src[:, idx, :]`` for a packed ``(pre, dim, post)`` source and validated indices, by chunks of
    the output on the kernel threads."""
    pre, _, post = src.shape
    out = recycle.empty((pre, idx.size, post), dtype)

    def work(box: tuple[int, int, int, int]) -> bool:
        p0, p1, k0, k1 = box
        # spans() boxes are contiguous slices of `out`, so np.take writes into them in place.
        np.take(src[p0:p1], idx[k0:k1], axis=1, mode="clip", out=out[p0:p1, k0:k1])
        return True

    run_all(work, spans(pre, idx.size, max(1, chunk_length(out.size) // post)), out.size)
    return out


def _layout(desc: GatherDesc) -> tuple[tuple[int, ...], int, int, int, int, np.dtype]:
    """The structural checks of DML_GATHER and what they establish: ``(output sizes, axis, dim, pre,
    post, dtype)``."""
    in_sizes = desc.input_tensor.sizes
    idx_sizes = desc.indices_tensor.sizes
    d = len(in_sizes)
    axis, k = desc.axis, desc.index_dimensions
    if not 0 <= axis < d:
        fail(desc, f"Axis {axis} is outside [0, {d})", value=axis)
    if not 0 <= k <= d:
        fail(desc, f"IndexDimensions {k} is outside [0, {d}]", value=k)
    require_leading_ones(desc, "IndicesTensor", k, "IndexDimensions")
    try:
        expected = shapes.gather_output_sizes(in_sizes, idx_sizes, axis, k)
    except ValueError as e:
        fail(desc, str(e), field="OutputTensor")
    require_sizes(desc, "OutputTensor", expected, "DML_GATHER output Sizes formula")
    pre, post = math.prod(in_sizes[:axis]), math.prod(in_sizes[axis + 1 :])
    return tuple(expected), axis, in_sizes[axis], pre, post, desc.output_tensor.data_type.numpy_dtype


def run(desc: GatherDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_GATHER; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    ctx, (expected, axis, dim, pre, post, dtype) = prepared(
        desc, options, "InputTensor", ("InputTensor", "OutputTensor"), _layout
    )

    inp = views["InputTensor"]
    idx = normalize_indices(views["IndicesTensor"].array(), (dim,), (axis,), ctx).reshape(-1)
    if pre * idx.size * post == 0:
        return KernelResult(np.zeros(expected, dtype=dtype))
    if inp.contiguous:
        src = inp.flat[: inp.element_count].reshape(pre, dim, post)
        total = pre * idx.size * post
        # Indices are already validated as a whole, so chunks only pay off when threads share them.
        if total >= PARALLEL_MIN_ELEMENTS and worth_chunking(post * dtype.itemsize):
            out = _take_blocks(src, idx, dtype)
        else:
            # Whole blocks of `post` elements move at once: numpy's take along an axis copies them as runs.
            out = np.take(src, idx, axis=1, mode="clip", out=recycle.empty((pre, idx.size, post), src.dtype))
    else:
        in_sizes = inp.sizes
        strides = inp.strides
        offsets = (
            grid_offsets(in_sizes[:axis], strides[:axis])[:, None, None]
            + np.multiply(idx, strides[axis], dtype=np.int64)[None, :, None]
            + grid_offsets(in_sizes[axis + 1 :], strides[axis + 1 :])[None, None, :]
        )
        # Indices are validated above; "clip" only skips numpy's own per-element bounds error path.
        out = np.take(inp.flat, offsets, mode="clip")
    return KernelResult(out.reshape(expected))
