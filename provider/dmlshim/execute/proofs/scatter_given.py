"""A scatter's output taken as onnxruntime computed it in the whole-model check (issue 22: each emulated
node computed once per run, and no Python work per run that onnxruntime already did).

ONNX's Scatter/ScatterElements/ScatterND without reduction and DirectML's SCATTER / SCATTER_ND define the
same output when every index is in ``[0, dim)`` and no two writes land on the same place: the data input
with each update copied, bit for bit, to the one place its index names. Negative indices (ONNX wraps them,
DirectML's rules may not) and repeated targets (ONNX leaves the winner unspecified, onnxruntime's CPU
ScatterND races on them, DirectML's record counts them) are where the two can differ. So on every run of
the check, a scatter's indices are looked at first: when they are all in range, non-negative and
distinct, onnxruntime's output is the DirectML one and is taken as it is (from the first run on: the
proof is the run's own indices, as a lean gather's is the graph, :mod:`dmlshim.execute.proofs.gather_given`).
On a Llama-style static-cache decode step (12 KV-cache ScatterElements of 768 KB) that is ~25 µs of index
checks per scatter instead of ~190 µs for locating and comparing the written elements, and no proof runs
reading every cache whole. Any other run (a negative or repeated index, an OrtValue, another dtype or
shape than the node's, a reduction) is verified by the kernel as before
(:mod:`dmlshim.kernels.scatter_verify`), and ``DMLSHIM_FULL_CHECK=1`` (validate) verifies every run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .index_ranges import columns_in_range, in_range

SCATTERS = frozenset(("Scatter", "ScatterElements", "ScatterND"))
"""Scatters whose output the whole-model check takes from onnxruntime when their indices prove it."""


SCATTER_GIVEN_MESSAGE = (
    "this scatter's output is onnxruntime's: every index of this run is in range (onnxruntime refuses any "
    "other), non-negative and written once, where ONNX and DirectML define the same output "
    "(DMLSHIM_FULL_CHECK=1 verifies it against the DirectML kernel on every run)"
)
"""The record note's text for a scatter whose output was taken as onnxruntime computed it."""


def no_reduction(attrs: Mapping[str, Any]) -> bool:
    """A scatter's ``reduction`` attribute is absent or ``none``: a later write to a place replaces an
    earlier one."""
    reduction = attrs.get("reduction", b"none")
    return (reduction.decode() if isinstance(reduction, bytes) else str(reduction)) == "none"


def repeated_writes(op_type: str, axis: int, data_shape: Sequence[int], indices: np.ndarray) -> int:
    """Writes of a scatter that a later write to the same place overwrites, counted as the kernels count
    them: elements for Scatter/ScatterElements (along ``axis``, non-negative), index tuples for ScatterND.
    The indices are in range; negative ones wrap, as ONNX's do."""
    if op_type == "ScatterND":
        k = indices.shape[-1]
        count = int(np.prod(indices.shape[:-1], dtype=np.int64))
        if count <= 1:
            return 0
        if k == 0:
            return count - 1  # every tuple of no coordinates names the whole data
        dims = np.asarray(data_shape[:k], dtype=np.int64)
        tuples = indices.reshape(count, k).astype(np.int64, copy=False)
        tuples = np.where(tuples < 0, tuples + dims, tuples)
        if count <= SMALL_WRITES:  # a few tuples: distinct ones counted in Python, no sort
            return count - len(set(map(tuple, tuples.tolist())))
        return count - _distinct(_flat_targets(tuples, data_shape[:k]), _space(data_shape[:k]))
    # A ScatterElements write keeps every coordinate of its position but the axis one: two writes meet
    # only on one line along the axis, with equal indices.
    if indices.shape[axis] <= 1:
        return 0
    wrapped = indices.astype(np.int64, copy=False)
    wrapped = np.where(wrapped < 0, wrapped + data_shape[axis], wrapped)
    ordered = np.sort(wrapped, axis=axis)
    return int((np.diff(ordered, axis=axis) == 0).sum())


SMALL_WRITES = 64
"""Up to this many index tuples (or elements), a proof of distinct writes runs in Python on the values as a
list (a set of them): cheaper than numpy's calls at that size."""

MARKS_PER_WRITE = 8
"""Distinct targets are counted with a mark per possible target (one byte each, O(writes + targets)) when
the targets number at most this many times the writes (plus 64K); else by a sort."""


def _space(dims: Sequence[int]) -> int:
    """How many targets ``dims`` hold (a Python int: no overflow)."""
    return math.prod(int(d) for d in dims)


def _flat_targets(tuples: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Each in-range, non-negative index tuple (a row of ``tuples``) as its row-major offset in ``dims``."""
    k = tuples.shape[-1]
    if k == 1:
        return tuples.reshape(-1)
    strides = np.ones(k, dtype=np.int64)
    for d in range(k - 2, -1, -1):
        strides[d] = strides[d + 1] * int(dims[d + 1])
    return tuples.astype(np.int64, copy=False) @ strides  # type: ignore[no-any-return]


def _distinct(flat: np.ndarray, space: int) -> int:
    """How many distinct values ``flat`` (offsets in ``[0, space)``) holds: marks when the space is small
    next to the writes, else a sort (the same count either way)."""
    if flat.size <= 1:
        return int(flat.size)
    if space <= MARKS_PER_WRITE * flat.size + 65536:
        marks = np.zeros(space, dtype=np.bool_)
        marks[flat] = True
        return int(np.count_nonzero(marks))
    ordered = np.sort(flat)
    return int(flat.size - np.count_nonzero(ordered[1:] == ordered[:-1]))


def scatter_output_is_given(
    op_type: str, attrs: Mapping[str, Any], arrays: Sequence[Any], theirs: Any
) -> bool:
    """Whether ``theirs`` can stand for the DirectML scatter's output of ``arrays``: numpy arrays of the
    data's shape and dtype, no reduction, and integer indices all in ``[0, dim)`` with no two writes to
    one place (see the module docstring). False means: verify as before."""
    if op_type not in SCATTERS or len(arrays) < 3 or not no_reduction(attrs):
        return False
    data, indices, updates = arrays[0], arrays[1], arrays[2]
    if not all(isinstance(a, np.ndarray) for a in (data, indices, updates, theirs)):
        return False
    if indices.dtype.kind not in "iu" or data.ndim == 0 or updates.dtype != data.dtype:
        return False
    if theirs.shape != data.shape or theirs.dtype != data.dtype:
        return False
    if op_type == "ScatterND":
        # Before the empty check: tuples of 0 coordinates (an empty indices tensor) each name the whole
        # data, so two of them are two writes to one place.
        k = indices.shape[-1] if indices.ndim else 0
        if indices.ndim == 0 or k > data.ndim:
            return False
        if indices.size and not in_range(indices, min(data.shape[:k])):
            columns = indices.reshape(-1, k)
            if not all(in_range(columns[:, d], data.shape[d]) for d in range(k)):
                return False
        return repeated_writes(op_type, 0, data.shape, indices) == 0
    if indices.size == 0:
        return True
    axis = int(attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim or indices.ndim != data.ndim:
        return False
    return in_range(indices, data.shape[axis]) and not repeated_writes(op_type, axis, data.shape, indices)


def steady_scatter_proof(
    op_type: str, attrs: Mapping[str, Any], key: Sequence[Any]
) -> Callable[[np.ndarray], bool] | None:
    """:func:`scatter_output_is_given` for inputs of the shapes and dtypes ``key`` (per input its shape and
    dtype, or None) reduced to what depends on the indices' values: when no two writes can meet (one
    index tuple, or one index along the axis per line), the range proof alone; else the range proof and
    distinct targets, made once (a few ScatterND tuples as a Python set, more by marks or a sort; a
    ScatterElements' lines sorted). None for tuples of no coordinates (use the whole proof). Every
    other test of that function reads only shapes and dtypes: when one fails, the proof is False on any
    values."""
    if op_type not in SCATTERS or len(key) < 3 or any(p is None for p in key[:3]) or not no_reduction(attrs):
        return None
    (data_shape, data_dtype), (indices_shape, indices_dtype), (_, updates_dtype) = key[:3]
    if indices_dtype.kind not in "iu" or not data_shape or updates_dtype != data_dtype:
        return _never
    if op_type == "ScatterND":
        k = indices_shape[-1] if indices_shape else 0
        if not indices_shape or k > len(data_shape):
            return _never
        if k == 0:
            return None
        dims = tuple(int(d) for d in data_shape[:k])
        count = int(np.prod(indices_shape[:-1], dtype=np.int64))
        if count <= 1:
            return functools.partial(_tuples_in_range, dims)
        if count <= SMALL_WRITES:
            return functools.partial(_few_tuples_written_once, dims)
        return functools.partial(_tuples_written_once, dims, _space(dims))
    if 0 in indices_shape:
        return _always
    axis = int(attrs.get("axis", 0))
    axis = axis + len(data_shape) if axis < 0 else axis
    if not 0 <= axis < len(data_shape) or len(indices_shape) != len(data_shape):
        return _never
    if indices_shape[axis] > 1:
        return functools.partial(_lines_written_once, axis, int(data_shape[axis]))
    return functools.partial(in_range, dim=int(data_shape[axis]))


def _never(indices: np.ndarray) -> bool:
    return False


def _always(indices: np.ndarray) -> bool:
    return True


def _few_tuples_written_once(dims: tuple[int, ...], indices: np.ndarray) -> bool:
    """A ScatterND's few index tuples all in range (non-negative) and distinct, read as Python lists."""
    flat = indices.ravel().tolist()
    if not columns_in_range(flat, dims):
        return False
    k = len(dims)
    targets = flat if k == 1 else list(zip(*(flat[d::k] for d in range(k)), strict=True))
    return len(set(targets)) == len(targets)


def _tuples_written_once(dims: tuple[int, ...], space: int, indices: np.ndarray) -> bool:
    """A ScatterND's index tuples all in range (non-negative) and distinct."""
    if not _tuples_in_range(dims, indices):
        return False
    tuples = indices.reshape(-1, len(dims))
    return _distinct(_flat_targets(tuples, dims), space) == tuples.shape[0]


def _lines_written_once(axis: int, dim: int, indices: np.ndarray) -> bool:
    """A ScatterElements' indices all in ``[0, dim)``, no two equal on one line along ``axis``."""
    if not in_range(indices, dim):
        return False
    if indices.size <= SMALL_WRITES:  # a few lines, read as lists
        length = indices.shape[axis]
        return all(
            len(set(line)) == length for line in indices.swapaxes(axis, -1).reshape(-1, length).tolist()
        )
    line = _one_line_everywhere(axis, indices)
    if line is not None:  # an expanded column (torchvision's RoI pooling): prove that line alone
        return np.unique(line).size == line.size
    ordered = np.sort(indices, axis=axis)
    return not (np.diff(ordered, axis=axis) == 0).any()


def _one_line_everywhere(axis: int, indices: np.ndarray) -> np.ndarray | None:
    """The line along ``axis`` when every line of ``indices`` is that one (indices expanded from one
    column, as ``index.expand(...)`` exports), else None. One comparison pass instead of a sort of every
    line; the first and last lines are compared first, so that most other layouts cost nothing more."""
    first = indices[(0,) * axis + (slice(None),) + (0,) * (indices.ndim - axis - 1)]
    last = indices[(-1,) * axis + (slice(None),) + (-1,) * (indices.ndim - axis - 1)]
    if not np.array_equal(first, last):
        return None
    shape = [1] * indices.ndim
    shape[axis] = first.size
    return first if bool((indices == first.reshape(shape)).all()) else None


def _tuples_in_range(dims: tuple[int, ...], indices: np.ndarray) -> bool:
    if indices.size <= SMALL_WRITES:
        return columns_in_range(indices.ravel().tolist(), dims)
    if in_range(indices, min(dims)):
        return True
    columns = indices.reshape(-1, len(dims))
    return all(in_range(columns[:, d], dims[d]) for d in range(len(dims)))


def overwrites(node: onnx.NodeProto) -> bool:
    """A scatter without reduction: duplicate indices make some of its writes overwrite others."""
    if node.op_type not in SCATTERS:
        return False
    return not any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute)


def overwritten_writes(op_type: str, attrs: Mapping[str, Any], arrays: Sequence[np.ndarray | None]) -> int:
    """Writes of a scatter without reduction that a later write to the same place overwrites, counted as
    the kernels count them (elements for ScatterElements, index tuples for ScatterND), for nodes that ran
    on onnxruntime (which has accepted the indices, so they are in range)."""
    if op_type not in SCATTERS or len(arrays) < 2 or not no_reduction(attrs):
        return 0
    data, indices = arrays[0], arrays[1]
    if data is None or indices is None or data.size == 0:
        return 0
    empty_tuples = op_type == "ScatterND" and indices.ndim > 0 and indices.shape[-1] == 0  # each: all data
    if indices.size == 0 and not empty_tuples:
        return 0
    axis = int(attrs.get("axis", 0))
    return repeated_writes(op_type, axis + data.ndim if axis < 0 else axis, data.shape, indices)
