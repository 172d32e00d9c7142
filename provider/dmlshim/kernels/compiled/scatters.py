"""SCATTER (= SCATTER_ELEMENTS) and SCATTER_ND through the compiled loops.

The input is copied as the numpy kernel copies it (:func:`..scatter_elements.copy_input`, on the kernel
threads when large); then one pass writes the updates in row-major index order, so the last write to an
element wins exactly as in the numpy kernel, and counts the overwritten writes with one mark per target.
SCATTER_ND with rows of :data:`OWNER_MIN_BYTES` or more skips the copy: one pass over the tuples names
each row's last writer (its owner), then each output row is written once, from its owner's update or
from the input, the rows shared between the kernel threads (disjoint, so any split gives the same bytes)
when they are narrower than 64 bytes (wider ones make that pass a memory copy, kept on one thread).
None is returned where the numpy kernel must run instead (see :mod:`.gathers`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...dml.operators import ScatterDesc, ScatterNdDesc
from .. import recycle
from ..buffers import TensorView
from ..common import bind, prepared
from ..gather_elements import axis_split
from ..gather_nd import PackedTuples
from ..options import KernelOptions, KernelResult
from ..parallel import chunk_length, run_all, spans, worth_chunking
from ..scatter_elements import _check_shapes as scatter_shapes
from ..scatter_elements import copy_input
from ..scatter_nd import _prepare as scatter_nd_prepare
from . import loops
from .gathers import allow_negative, bits, readonly

logger = logging.getLogger(__name__)

_NO_MARKS = np.zeros(0, dtype=np.uint8)
"""The marks argument when duplicates are not counted."""

_SCATTER_TENSORS = ("InputTensor", "UpdatesTensor", "OutputTensor")

OWNER_MIN_BYTES = 16
"""SCATTER_ND rows at least this wide are written in one pass with the input copy: the int32 owner of a
row costs a quarter of the row or less. Narrower rows (single elements) take the copy, then the writes
in order: an owner array as large as the output would cost more than the copy it saves."""

_MAX_OWNER = np.iinfo(np.int32).max


def _marks(count: int, options: KernelOptions) -> np.ndarray:
    """A zeroed bit set of one mark per target, when duplicates are counted."""
    return np.zeros((count + 7) // 8, dtype=np.uint8) if options.detect_duplicates else _NO_MARKS


def _result(desc: ScatterDesc | ScatterNdDesc, out: np.ndarray, duplicates: int) -> KernelResult:
    if duplicates:
        logger.debug("%s: %d writes overwritten", desc.operator_type.dml_name, duplicates)
    return KernelResult(out.reshape(desc.output_tensor.sizes), duplicates)


def scatter_elements(
    desc: ScatterDesc, inputs: Mapping[str, Any], options: KernelOptions
) -> KernelResult | None:
    """DML_OPERATOR_SCATTER: the copy, then each index checked, wrapped and written in one pass."""
    views = bind(desc, inputs)
    ctx, _ = prepared(desc, options, "OutputTensor", _SCATTER_TENSORS, scatter_shapes)
    raw = views["IndicesTensor"].array()
    width = bits(desc.output_tensor.data_type.numpy_dtype)
    if not raw.size or width is None:
        return None
    pre, dim, post = axis_split(desc.output_tensor.sizes, desc.axis)
    k = raw.shape[desc.axis]
    out = copy_input(views["InputTensor"])
    duplicates = loops.scatter_elements(
        out.view(width),
        readonly(raw.reshape(-1)),
        readonly(views["UpdatesTensor"].packed().reshape(-1).view(width)),
        _marks(out.size, options),
        pre,
        dim,
        k,
        post,
        allow_negative(ctx, raw),
    )
    return None if duplicates < 0 else _result(desc, out, duplicates)


def scatter_nd(desc: ScatterNdDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult | None:
    """DML_OPERATOR_SCATTER_ND: the copy, then each tuple checked and its block written in one pass."""
    views, ctx, r, q, t, block = scatter_nd_prepare(desc, inputs, options)
    indices = views["IndicesTensor"].array()
    width = bits(desc.output_tensor.data_type.numpy_dtype)
    if not (block and t and indices.size) or width is None:
        return None
    tuples = PackedTuples(indices, desc.output_tensor, r, q, 0, block, ctx)
    coords = readonly(tuples.tuples.reshape(-1))
    updates = readonly(views["UpdatesTensor"].packed().reshape(-1).view(width))
    negative = allow_negative(ctx, indices)
    inp = views["InputTensor"]
    if inp.contiguous and block * width.itemsize >= OWNER_MIN_BYTES and updates.size // block < _MAX_OWNER:
        fused = _fused_scatter_nd(inp, coords, tuples, updates, block, negative)
        if fused is None:
            return None
        out, duplicates = fused
        return _result(desc, out, duplicates if options.detect_duplicates else 0)
    out = copy_input(inp)
    duplicates = loops.scatter_nd(
        out.view(width),
        coords,
        tuple(tuples.dims),
        tuple(tuples.strides),
        updates,
        _marks(out.size // block, options),
        block,
        negative,
    )
    return None if duplicates < 0 else _result(desc, out, duplicates)


def _fused_scatter_nd(
    inp: TensorView,
    coords: np.ndarray,
    tuples: PackedTuples,
    updates: np.ndarray,
    block: int,
    negative: bool,
) -> tuple[np.ndarray, int] | None:
    """SCATTER_ND of wide rows without the input copy: ``(flat output, overwritten writes)``, or None
    when an index may not be used (checked before anything is written)."""
    count = inp.element_count
    owner = np.full(count // block, -1, dtype=np.int32)
    duplicates = loops.scatter_nd_owners(coords, tuple(tuples.dims), tuple(tuples.strides), owner, negative)
    if duplicates < 0:
        return None
    src = readonly(inp.flat[:count].view(updates.dtype))
    out = recycle.empty((count,), inp.flat.dtype)
    dst = out.view(updates.dtype)

    if not worth_chunking(block * updates.itemsize):
        # Rows of 64 bytes or more make this pass a memory copy: on the calling thread, as the numpy
        # kernels do (on the loaded bench VM a second thread made it 1.0-1.5x slower, and its time
        # varied 2x between runs, where one thread stayed within 25%).
        loops.scatter_nd_fill(src, updates, owner, dst, block, 0, owner.size)
        return out, duplicates

    def work(box: tuple[int, int, int, int]) -> bool:
        _, _, r0, r1 = box
        return not loops.scatter_nd_fill(src, updates, owner, dst, block, r0, r1)

    run_all(work, spans(1, owner.size, max(1, chunk_length(count) // block)), count)
    return out, duplicates
