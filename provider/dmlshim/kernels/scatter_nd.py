"""DML_OPERATOR_SCATTER_ND.

``output = input``, then ``output[indices[n..., :], tail...] = updates[n..., tail...]`` for every index
tuple ``n``. UpdatesTensor.Sizes is the GATHER_ND output formula with no batch dimensions. Tuples are
applied in row-major order over IndicesTensor, so the last tuple naming a block wins; DirectML calls
overlapping writes invalid and guarantees no winner, dmlshim is deterministic and counts them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml import shapes
from ..dml.operators import ScatterNdDesc
from .buffers import TensorView, block_view
from .common import bind, fail, prepared, require_sizes
from .gather_nd import PackedTuples, check_nd_counts, tuple_offsets
from .indices import IndexContext, count_duplicates, write_rows
from .options import KernelOptions, KernelResult
from .parallel import chunk_length, run_all, spans, worth_chunking
from .scatter_elements import copy_input
from .scatter_verify import VerifyResult, verify_scatter

logger = logging.getLogger(__name__)


def _fast_scatter(out: np.ndarray, tuples: PackedTuples, updates: np.ndarray, block: int) -> bool:
    """Write every update block into the packed flat ``out`` chunk by chunk on the kernel threads, in no
    particular order, when all indices are valid and no two tuples name one block.

    Returns:
        False when ``out`` must be rebuilt on the general path (an index needs the general treatment, or
        a duplicate: only the general path applies those in index order). ``out`` is then partly written.
    """
    _, n_count, _ = tuples.tuples.shape
    # Runs of several elements move as one opaque item each (see block_view).
    rows_out = block_view(out, block) if block > 1 else out
    upd = block_view(updates, block) if block > 1 else updates.reshape(-1)
    # Fewer marked rows than writes means a duplicate; concurrent chunks only ever store True.
    seen = np.zeros(rows_out.shape[0], dtype=np.bool_)

    def work(box: tuple[int, int, int, int]) -> bool:
        rows = tuples.rows(box)
        if rows is None:
            return False
        _, _, n0, n1 = box
        seen[rows] = True
        rows_out[rows] = upd[n0:n1]
        return True

    boxes = spans(1, n_count, max(1, chunk_length(updates.size) // block))
    if not run_all(work, boxes, updates.size):
        return False
    return int(np.count_nonzero(seen)) == n_count


def _layout(desc: ScatterNdDesc) -> tuple[int, int, int]:
    """The structural checks of SCATTER_ND: ``(r, q, t)``."""
    r, q, t = check_nd_counts(desc, 0)
    in_sizes = desc.input_tensor.sizes
    try:
        expected = shapes.scatter_nd_updates_sizes(in_sizes, desc.indices_tensor.sizes, r, q)
    except ValueError as e:
        fail(desc, str(e), field="UpdatesTensor")
    require_sizes(desc, "UpdatesTensor", expected, "DML_SCATTER_ND UpdatesTensor Sizes formula")
    require_sizes(desc, "OutputTensor", in_sizes, "it must equal InputTensor.Sizes")
    return r, q, t


def _prepare(
    desc: ScatterNdDesc, inputs: Mapping[str, Any], options: KernelOptions
) -> tuple[dict[str, TensorView], IndexContext, int, int, int, int]:
    """What a run and a verify share: the bound views, the index rules, ``(r, q, t)`` and the block."""
    views = bind(desc, inputs)
    ctx, (r, q, t) = prepared(
        desc, options, "OutputTensor", ("InputTensor", "UpdatesTensor", "OutputTensor"), _layout
    )
    in_sizes = desc.input_tensor.sizes
    return views, ctx, r, q, t, math.prod(in_sizes[len(in_sizes) - r + t :])


def _rows(
    views: dict[str, TensorView], desc: ScatterNdDesc, ctx: IndexContext, r: int, q: int, block: int
) -> np.ndarray:
    """The row of the packed output (seen as ``(-1, block)``) each index tuple writes, flat, in order;
    raises, clamps or wraps as the index rules say."""
    out_desc = desc.output_tensor
    row_strides = tuple(s // block for s in out_desc.packed_strides)
    indices = views["IndicesTensor"].array()
    return tuple_offsets(indices, out_desc, row_strides, r, q, 0, ctx).reshape(-1)


def run(desc: ScatterNdDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_SCATTER_ND; see :func:`dmlshim.kernels.execute`."""
    views, ctx, r, q, t, block = _prepare(desc, inputs, options)
    out_desc = desc.output_tensor
    out = copy_input(views["InputTensor"])
    if block == 0:
        return KernelResult(out.reshape(out_desc.sizes))
    # The output is packed: each tuple selects one run of `block` elements, i.e. one row of a
    # (-1, block) matrix, whose number comes from the packed strides divided by the block size.
    indices = views["IndicesTensor"].array()
    if t and indices.size and worth_chunking(block * out.dtype.itemsize):
        updates = views["UpdatesTensor"].packed()
        tuples = PackedTuples(indices, out_desc, r, q, 0, block, ctx)
        if _fast_scatter(out, tuples, updates, block):
            return KernelResult(out.reshape(out_desc.sizes), 0)
        out = copy_input(views["InputTensor"])
    rows = _rows(views, desc, ctx, r, q, block)
    duplicates = 0
    if rows.size:
        updates = views["UpdatesTensor"].packed().reshape(-1)
        if options.detect_duplicates:
            duplicates = count_duplicates(rows, out.size // block)
        # Without duplicate detection the writes may collide: only then is the order-keeping writer
        # needed for single elements (runs are always written in order).
        write_rows(out, rows, updates, block, unique=options.detect_duplicates and not duplicates)
    if duplicates:
        logger.debug("%s: %d writes overwritten", desc.operator_type.dml_name, duplicates)
    return KernelResult(out.reshape(out_desc.sizes), duplicates)


def verify(
    desc: ScatterNdDesc, inputs: Mapping[str, Any], expected: np.ndarray, options: KernelOptions
) -> VerifyResult:
    """Whether ``expected`` (flat, the output's dtype) is exactly what :func:`run` would output, and the
    duplicate count it would report; see :mod:`dmlshim.kernels.scatter_verify`."""
    views, ctx, r, q, _, block = _prepare(desc, inputs, options)
    if block == 0:
        # An empty output: run() checks no index either.
        return VerifyResult(expected.size == 0 and expected.dtype == desc.output_tensor.data_type.numpy_dtype)
    rows = _rows(views, desc, ctx, r, q, block)
    return verify_scatter(desc.operator_type.dml_name, views, expected, rows, block, options)
