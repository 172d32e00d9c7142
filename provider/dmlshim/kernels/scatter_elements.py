"""DML_OPERATOR_SCATTER (= DML_OPERATOR_SCATTER_ELEMENTS).

``output = input``, then ``output[i, index[i, j, k, ...], k, ...] = updates[i, j, k, ...]`` (the index
replaces the Axis coordinate). Writes happen in row-major order over IndicesTensor, so when two indices
hit one element the later write wins (the seed's 1-D example: indices [3,1,3,0] leave the second update
for 3 in place). DirectML calls overlapping writes invalid and guarantees no winner; dmlshim is
deterministic and counts them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml.operators import ScatterDesc
from .buffers import TensorView
from .common import bind, prepared, require_sizes
from .gather_elements import axis_split, check_axis_shapes, element_offsets, packed_offsets
from .indices import IndexContext, count_duplicates, normalize_indices, write_in_order
from .options import KernelOptions, KernelResult
from .parallel import chunk_length, parallel_copy, run_all, spans
from .scatter_verify import VerifyResult, verify_scatter

logger = logging.getLogger(__name__)


def copy_input(inp: TensorView) -> np.ndarray:
    """The one copy a scatter makes: InputTensor, packed, as a flat writable array."""
    if inp.contiguous:
        return parallel_copy(inp.flat[: inp.element_count])
    return np.array(inp.array(), order="C").reshape(-1)


def _fast_scatter(
    out: np.ndarray,
    shape: tuple[int, ...],
    raw: np.ndarray,
    updates: np.ndarray,
    axis: int,
    ctx: IndexContext,
) -> bool:
    """Write every update into the packed flat ``out`` chunk by chunk on the kernel threads, in no
    particular order, when all indices are valid and no two writes share a target.

    Returns:
        False when ``out`` must be rebuilt on the general path: an index needs the general treatment,
        or two writes hit one element (only the general path applies them in index order). ``out`` is
        then partly written.
    """
    pre, dim, post = axis_split(shape, axis)
    k = raw.shape[axis]
    raw3 = raw.reshape(pre, k, post)
    upd3 = updates.reshape(pre, k, post)
    # Every write marks its target; fewer marks than writes means a duplicate. Concurrent chunks may
    # mark one byte at once, but they all store True, so the table ends up the same.
    seen = np.zeros(out.size, dtype=np.bool_)

    def work(box: tuple[int, int, int, int]) -> bool:
        off = packed_offsets(raw3, box, dim, post, ctx)
        if off is None:
            return False
        p0, p1, k0, k1 = box
        seen[off] = True
        out[off] = upd3[p0:p1, k0:k1].reshape(-1)
        return True

    boxes = spans(pre, k, max(1, chunk_length(raw.size) // post))
    if not run_all(work, boxes, raw.size):
        return False
    return int(np.count_nonzero(seen)) == raw.size


def _check_shapes(desc: ScatterDesc) -> bool:
    check_axis_shapes(desc)
    require_sizes(desc, "UpdatesTensor", desc.indices_tensor.sizes, "it must equal IndicesTensor.Sizes")
    require_sizes(desc, "OutputTensor", desc.input_tensor.sizes, "it must equal InputTensor.Sizes")
    return True


def _offsets(desc: ScatterDesc, views: dict[str, TensorView], ctx: IndexContext) -> np.ndarray:
    """The flat output offset each update is written to, in write order; raises, clamps or wraps as the
    index rules say."""
    axis = desc.axis
    idx = normalize_indices(views["IndicesTensor"].array(), (views["InputTensor"].sizes[axis],), (axis,), ctx)
    if not idx.size:
        return np.zeros(0, dtype=np.int64)
    return element_offsets(idx, desc.indices_tensor.sizes, desc.output_tensor.packed_strides, axis)


def run(desc: ScatterDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_SCATTER; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    ctx, _ = prepared(
        desc, options, "OutputTensor", ("InputTensor", "UpdatesTensor", "OutputTensor"), _check_shapes
    )
    inp = views["InputTensor"]
    raw = views["IndicesTensor"].array()
    out = copy_input(inp)
    if raw.size:
        updates = views["UpdatesTensor"].packed()
        if _fast_scatter(out, desc.output_tensor.sizes, raw, updates, desc.axis, ctx):
            return KernelResult(out.reshape(desc.output_tensor.sizes), 0)
        out = copy_input(inp)
    offsets = _offsets(desc, views, ctx)
    duplicates = 0
    if offsets.size:
        if options.detect_duplicates:
            duplicates = count_duplicates(offsets, out.size)
            if duplicates:
                logger.debug("%s: %d writes overwritten", desc.operator_type.dml_name, duplicates)
        updates = views["UpdatesTensor"].packed().reshape(-1)
        write_in_order(out, offsets, updates, unique=options.detect_duplicates and not duplicates)
    return KernelResult(out.reshape(desc.output_tensor.sizes), duplicates)


def verify(
    desc: ScatterDesc, inputs: Mapping[str, Any], expected: np.ndarray, options: KernelOptions
) -> VerifyResult:
    """Whether ``expected`` (flat, the output's dtype) is exactly what :func:`run` would output, and the
    duplicate count it would report; see :mod:`dmlshim.kernels.scatter_verify`."""
    views = bind(desc, inputs)
    ctx, _ = prepared(
        desc, options, "OutputTensor", ("InputTensor", "UpdatesTensor", "OutputTensor"), _check_shapes
    )
    offsets = _offsets(desc, views, ctx)
    return verify_scatter(desc.operator_type.dml_name, views, expected, offsets, 1, options)
