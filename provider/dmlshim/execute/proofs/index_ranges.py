"""Range proofs of gather and scatter indices: every index in ``[0, dim)``, read as a Python list when
there are a few (cheaper than a numpy reduction at that size, measured between onnxruntime runs), else by
numpy reductions (issue 36, run cost)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def axis_of(attrs: Mapping[str, Any], rank: int) -> int | None:
    """A node's ``axis`` attribute (default 0) made non-negative for ``rank``, or None out of range."""
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


SMALL_INDICES = 64
"""Up to this many indices, :func:`in_range` reads them as a Python list (cheaper than a numpy reduction
at that size, measured between onnxruntime runs)."""


def in_range(indices: np.ndarray, dim: int) -> bool:
    """Every index in ``[0, dim)``: a few read as a list; else usually one OR-reduction (no sign bit
    anywhere and the OR below ``dim`` bounds every value), else the maximum."""
    size = indices.size
    if size <= SMALL_INDICES:
        if size == 0:
            return True
        values = indices.ravel().tolist()
        return min(values) >= 0 and max(values) < dim
    acc = int(np.bitwise_or.reduce(indices, axis=None))
    if acc < 0:
        return False
    return acc < dim or int(indices.max()) < dim


def columns_in_range(flat: list[int], dims: Sequence[int]) -> bool:
    """Index tuples of ``len(dims)`` coordinates, listed one after another in ``flat``: every coordinate
    ``d`` in ``[0, dims[d])``."""
    k = len(dims)
    for d, dim in enumerate(dims):
        column = flat[d::k]
        if column and (min(column) < 0 or max(column) >= dim):
            return False
    return True


def lean_indices_in_range(
    op_type: str, attrs: Mapping[str, Any], data_shape: Sequence[int], indices: np.ndarray
) -> bool:
    """Whether a lean gather's indices, when the check holds them (a constant, or a value fetched for
    another node), are all in ``[0, dim)`` for the run's data shape: a constant's gather may have been
    folded by onnxruntime into a Slice, which refuses nothing."""
    if indices.dtype.kind not in "iu" or not len(data_shape):
        return False
    if op_type == "GatherND":
        batch = int(attrs.get("batch_dims", 0))
        k = indices.shape[-1] if indices.ndim else 0
        if indices.ndim == 0 or batch + k > len(data_shape):
            return False
        if k == 0:  # no index column: every index tuple selects the whole batch slice
            return True
        dims = [int(d) for d in data_shape[batch : batch + k]]
        if indices.size <= SMALL_INDICES:  # a few tuples, read as lists
            return columns_in_range(indices.ravel().tolist(), dims)
        columns = indices.reshape(-1, k)
        return all(in_range(columns[:, d], dims[d]) for d in range(k))
    axis = axis_of(attrs, len(data_shape))
    return axis is not None and in_range(indices, int(data_shape[axis]))
