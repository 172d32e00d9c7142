"""A scatter's output taken as onnxruntime computed it in the whole-model check (issue 22: each emulated
node computed once per run, and no Python work per run that onnxruntime already did).

ONNX's Scatter/ScatterElements/ScatterND without reduction and DirectML's SCATTER / SCATTER_ND define the
same output when every index is in ``[0, dim)`` and no two writes land on the same place: the data input
with each update copied, bit for bit, to the one place its index names. Negative indices (ONNX wraps them,
DirectML's rules may not) and repeated targets (ONNX leaves the winner unspecified, onnxruntime's CPU
ScatterND races on them, DirectML's record counts them) are where the two can differ. So on every run of
the check, a scatter's indices are looked at first: when they are all in range, non-negative and
distinct, onnxruntime's output is the DirectML one and is taken as it is (from the first run on: the
proof is the run's own indices, as a lean gather's is the graph, :mod:`dmlshim.execute.gather_given`).
On a Llama-style static-cache decode step (12 KV-cache ScatterElements of 768 KB) that is ~25 µs of index
checks per scatter instead of ~190 µs for locating and comparing the written elements, and no proof runs
reading every cache whole. Any other run (a negative or repeated index, an OrtValue, another dtype or
shape than the node's, a reduction) is verified by the kernel as before
(:mod:`dmlshim.kernels.scatter_verify`), and ``DMLSHIM_FULL_CHECK=1`` (validate) verifies every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .gather_given import in_range

SCATTERS = frozenset(("Scatter", "ScatterElements", "ScatterND"))
"""Scatters whose output the whole-model check takes from onnxruntime when their indices prove it."""


SCATTER_GIVEN_MESSAGE = (
    "this scatter's output is onnxruntime's: every index of this run is in range (onnxruntime refuses any "
    "other), non-negative and written once, where ONNX and DirectML define the same output "
    "(DMLSHIM_FULL_CHECK=1 verifies it against the DirectML kernel on every run)"
)
"""The record note's text for a scatter whose output was taken as onnxruntime computed it."""


def _no_reduction(attrs: Mapping[str, Any]) -> bool:
    reduction = attrs.get("reduction", b"none")
    return (reduction.decode() if isinstance(reduction, bytes) else str(reduction)) == "none"


def _repeats_along(indices: np.ndarray, axis: int) -> bool:
    """Whether two indices of one line along ``axis`` are equal (ScatterElements' duplicate targets: the
    other coordinates of a write are its own)."""
    if indices.shape[axis] <= 1:
        return False
    ordered = np.sort(indices, axis=axis)
    return bool((np.diff(ordered, axis=axis) == 0).any())


def _nd_targets_distinct(indices: np.ndarray, data_shape: tuple[int, ...]) -> bool:
    """Whether ScatterND's index tuples (in range, non-negative) name distinct places."""
    k = indices.shape[-1]
    count = indices.size // k if k else int(np.prod(indices.shape[:-1], dtype=np.int64))
    if count <= 1:
        return True
    if k == 0:
        return False  # every tuple names the whole data
    tuples = indices.reshape(-1, k).astype(np.int64, copy=False)
    strides = np.ones(k, dtype=np.int64)
    for d in range(k - 2, -1, -1):
        strides[d] = strides[d + 1] * data_shape[d + 1]
    flat = np.sort(tuples @ strides)
    return not bool((flat[1:] == flat[:-1]).any())


def scatter_output_is_given(
    op_type: str, attrs: Mapping[str, Any], arrays: Sequence[Any], theirs: Any
) -> bool:
    """Whether ``theirs`` can stand for the DirectML scatter's output of ``arrays``: numpy arrays of the
    data's shape and dtype, no reduction, and integer indices all in ``[0, dim)`` with no two writes to
    one place (see the module docstring). False means: verify as before."""
    if op_type not in SCATTERS or len(arrays) < 3 or not _no_reduction(attrs):
        return False
    data, indices, updates = arrays[0], arrays[1], arrays[2]
    if not all(isinstance(a, np.ndarray) for a in (data, indices, updates, theirs)):
        return False
    if indices.dtype.kind not in "iu" or data.ndim == 0 or updates.dtype != data.dtype:
        return False
    if theirs.shape != data.shape or theirs.dtype != data.dtype:
        return False
    if indices.size == 0:
        return True
    if op_type == "ScatterND":
        k = indices.shape[-1] if indices.ndim else 0
        if indices.ndim == 0 or k > data.ndim:
            return False
        if k and not in_range(indices, min(data.shape[:k])):
            columns = indices.reshape(-1, k)
            if not all(in_range(columns[:, d], data.shape[d]) for d in range(k)):
                return False
        return _nd_targets_distinct(indices, data.shape)
    axis = int(attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim or indices.ndim != data.ndim:
        return False
    return in_range(indices, data.shape[axis]) and not _repeats_along(indices, axis)
