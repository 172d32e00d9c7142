"""SCATTER (= SCATTER_ELEMENTS) and SCATTER_ND through the compiled loops.

The input is copied as the numpy kernel copies it (:func:`..scatter_elements.copy_input`, on the kernel
threads when large); then one pass writes the updates in row-major index order, so the last write to an
element wins exactly as in the numpy kernel, and counts the overwritten writes with one mark per target.
None is returned where the numpy kernel must run instead (see :mod:`.gathers`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...dml.operators import ScatterDesc, ScatterNdDesc
from ..common import bind, prepared
from ..gather_elements import axis_split
from ..gather_nd import PackedTuples
from ..options import KernelOptions, KernelResult
from ..scatter_elements import _check_shapes as scatter_shapes
from ..scatter_elements import copy_input
from ..scatter_nd import _prepare as scatter_nd_prepare
from . import loops
from .gathers import allow_negative, bits, readonly

logger = logging.getLogger(__name__)

_NO_MARKS = np.zeros(0, dtype=np.uint8)
"""The marks argument when duplicates are not counted."""

_SCATTER_TENSORS = ("InputTensor", "UpdatesTensor", "OutputTensor")


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
    out = copy_input(views["InputTensor"])
    tuples = PackedTuples(indices, desc.output_tensor, r, q, 0, block, ctx)
    duplicates = loops.scatter_nd(
        out.view(width),
        readonly(tuples.tuples.reshape(-1)),
        tuple(tuples.dims),
        tuple(tuples.strides),
        readonly(views["UpdatesTensor"].packed().reshape(-1).view(width)),
        _marks(out.size // block, options),
        block,
        allow_negative(ctx, indices),
    )
    return None if duplicates < 0 else _result(desc, out, duplicates)
