"""A gather/scatter step's run plan for one set of input shapes and dtypes: the node's output in one or
two numpy calls where the general path takes ~20 (issue 36, run cost on the partitioned path).

:meth:`~dmlshim.execute.plan.steps.EmulatedStep._run` runs a node through its translation and the
DirectML kernels (:func:`dmlshim.translate.runner.run_translation`): the bindings, the descriptor's
structural checks, the index rules, the offset arithmetic and the copy, about 25-35 us of Python for a
small node whatever its size. Everything but the index values is fixed once the inputs' shapes and dtypes
are: after a run through the kernel, the step makes a :data:`FastRun` for that key (:func:`fast_run`) and
later runs with the same key call it instead. A run plan moves the values as numpy's ``take`` and
advanced indexing move them; both wrap an index in ``[-dim, 0)`` and refuse one outside ``[-dim, dim)``.
So the plan answers only the runs whose indices DirectML and ONNX read alike: every index in ``[0, dim)``,
or in ``[-dim, dim)`` where the descriptor allows negative indices (a signed IndicesTensor at
``DML_FEATURE_LEVEL_3_0`` or later). Any other run (an index out of range, a negative one the feature
level refuses) gets None and goes through the kernel, which raises, clamps or refuses exactly as before.

A plan is made only for a translation whose kernel call is a plain reshape of the ONNX arrays
(:class:`~dmlshim.translate.runner.RunPlan`: no host step, no window, no 64-bit pairs, no index cast)
with no scatter reduction, and below :data:`FAST_MAX_ELEMENTS` (larger outputs keep the kernels' chunked,
threaded and compiled paths). It is proved once on the run it is made from: its output, duplicate count
and negative-index flag must equal the kernel's bit for bit, or the step keeps to the kernel.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ...comparison import same_bits
from ...dml.enums import FeatureLevel
from ...kernels.indices import SMALL_ELEMENTS, count_duplicates, write_in_order, write_rows
from ...translate import NodeTranslation
from ...translate.runner import run_plan

logger = logging.getLogger(__name__)

FastRun = Callable[[Sequence[Any]], "tuple[np.ndarray, int, bool] | None"]
"""``run(arrays) -> (output, duplicate writes, negative indices seen)``, or None: the kernel answers."""

FAST_MAX_ELEMENTS = 1 << 15
"""Outputs (and indices) up to this many elements take a run plan; the kernels' chunked and compiled
paths start well above it (:data:`dmlshim.kernels.parallel.CHUNK_ELEMENTS`)."""

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def fast_run(
    op_type: str, attrs: dict[str, Any], arrays: Sequence[Any], t: NodeTranslation
) -> FastRun | None:
    """The run plan of a node (``op_type``, its attributes) for inputs shaped and typed as ``arrays`` under
    the DirectML translation ``t``, or None when the node keeps to the kernel (see the module docstring)."""
    operator = t.operator
    if operator is None or t.output is None:
        return None
    plan = run_plan(t)
    if plan.output_shape is None or plan.pairs or any(entry[4] is None for entry in plan.inputs):
        return None
    if len(arrays) < 2 or any(type(a) is not np.ndarray for a in arrays):
        return None
    data, indices = arrays[0], arrays[1]
    if indices.dtype not in _INDEX_DTYPES or data.dtype.kind not in "biufc":
        return None
    if indices.ndim == 0 and op_type != "Gather":  # (a Gather's scalar index is a common one)
        return None
    if math.prod(plan.output_shape) > FAST_MAX_ELEMENTS or indices.size > FAST_MAX_ELEMENTS:
        return None
    if attrs.get("reduction", b"none") not in (b"none", "none"):
        return None
    negatives = operator.indices_tensor.data_type.is_signed_integer and t.feature_level >= FeatureLevel.FL_3_0
    maker = _MAKERS.get(op_type)
    return None if maker is None else maker(attrs, arrays, negatives)


def _negative(indices: np.ndarray, allowed: bool) -> bool | None:
    """Whether int32/int64 ``indices`` hold a negative value (:func:`dmlshim.kernels.indices.has_negative`);
    None when they do and the descriptor does not allow negative indices (``allowed`` False): the kernel
    answers that run. Every plan's first step."""
    if indices.size <= SMALL_ELEMENTS:
        negative = bool(indices.size) and min(indices.ravel().tolist()) < 0
    else:
        negative = int(_lowest(indices, axis=None)) < 0  # ndarray.min's Python wrapper skipped
    return None if negative and not allowed else negative


_lowest = np.minimum.reduce


def _gather(attrs: dict[str, Any], arrays: Sequence[Any], negatives: bool) -> FastRun | None:
    data = arrays[0]
    axis = int(attrs.get("axis", 0))
    if not -data.ndim <= axis < data.ndim:
        return None
    axis %= data.ndim
    take, ndarray, asarray = np.take, np.ndarray, np.asarray

    def run(arrays: Sequence[Any]) -> tuple[np.ndarray, int, bool] | None:
        indices = arrays[1]
        negative = _negative(indices, negatives)
        if negative is None:
            return None
        try:
            out = take(arrays[0], indices, axis=axis)
        except IndexError:  # an index outside [-dim, dim): the kernel raises or clamps
            return None
        # a scalar index into a 1-D tensor: numpy's scalar, made the 0-d array the kernel returns
        return (out if type(out) is ndarray else asarray(out)), 0, negative

    return run


def _grids(shape: tuple[int, ...], skip: int) -> list[Any]:
    """``np.ogrid``-like coordinate arrays of ``shape`` (each broadcastable to it), None at ``skip``."""
    rank = len(shape)
    return [
        None if k == skip else np.arange(n).reshape([n if i == k else 1 for i in range(rank)])
        for k, n in enumerate(shape)
    ]


def _gather_elements(attrs: dict[str, Any], arrays: Sequence[Any], negatives: bool) -> FastRun | None:
    data, indices = arrays[0], arrays[1]
    axis = int(attrs.get("axis", 0))
    if data.ndim != indices.ndim or not -data.ndim <= axis < data.ndim:
        return None
    axis %= data.ndim
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if k != axis):
        return None
    grids = _grids(indices.shape, axis)
    before, after = tuple(grids[:axis]), tuple(grids[axis + 1 :])

    def run(arrays: Sequence[Any]) -> tuple[np.ndarray, int, bool] | None:
        indices = arrays[1]
        negative = _negative(indices, negatives)
        if negative is None:
            return None
        try:
            return arrays[0][(*before, indices, *after)], 0, negative
        except IndexError:
            return None

    return run


def _gather_nd(attrs: dict[str, Any], arrays: Sequence[Any], negatives: bool) -> FastRun | None:
    data, indices = arrays[0], arrays[1]
    batch = int(attrs.get("batch_dims", 0))
    q, t = indices.ndim, indices.shape[-1]
    # q == 1: every coordinate a 0-d array, which numpy reads as basic indexing (a view, not a copy)
    if q < 2 or t < 1 or batch < 0 or batch >= q - 1 or batch + t > data.ndim:
        return None
    if data.shape[:batch] != indices.shape[:batch]:
        return None
    batch_grids = tuple(_grids(indices.shape[:-1], -1)[:batch])
    columns = range(t)

    def run(arrays: Sequence[Any]) -> tuple[np.ndarray, int, bool] | None:
        indices = arrays[1]
        negative = _negative(indices, negatives)
        if negative is None:
            return None
        try:
            return arrays[0][(*batch_grids, *[indices[..., j] for j in columns])], 0, negative
        except IndexError:
            return None

    return run


def _scatter_elements(attrs: dict[str, Any], arrays: Sequence[Any], negatives: bool) -> FastRun | None:
    if len(arrays) != 3 or type(arrays[2]) is not np.ndarray:
        return None
    data, indices, updates = arrays[0], arrays[1], arrays[2]
    axis = int(attrs.get("axis", 0))
    if data.ndim != indices.ndim or updates.shape != indices.shape or not -data.ndim <= axis < data.ndim:
        return None
    axis %= data.ndim
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if k != axis):
        return None
    dim = data.shape[axis]
    strides = [math.prod(data.shape[k + 1 :]) for k in range(data.ndim)]
    # each write's flat target with its axis coordinate 0; the index adds index * the axis stride
    base = sum((g * s for g, s in zip(_grids(indices.shape, axis), strides, strict=True) if g is not None), 0)
    base = np.broadcast_to(np.asarray(base, dtype=np.int64), indices.shape).reshape(-1)
    stride, count, size = strides[axis], indices.size, data.size

    def run(arrays: Sequence[Any]) -> tuple[np.ndarray, int, bool] | None:
        indices = arrays[1]
        if count <= SMALL_ELEMENTS:
            listed = indices.ravel().tolist()
            low, high = min(listed), max(listed)
        else:
            low, high = int(indices.min()), int(indices.max())
        negative = low < 0
        if high >= dim or low < -dim or (negative and not negatives):
            return None
        flat = indices.reshape(-1)
        if negative:
            flat = np.where(flat < 0, flat + dim, flat)
        targets = np.multiply(flat, stride, dtype=np.int64)
        targets += base
        if count <= SMALL_ELEMENTS:
            duplicates = count - len(set(targets.tolist()))
        else:
            duplicates = count_duplicates(targets, size)
        out = np.array(arrays[0], order="C", copy=True)
        write_in_order(out.reshape(-1), targets, arrays[2].reshape(-1), unique=not duplicates)
        return out, duplicates, negative

    return run


def _scatter_nd(attrs: dict[str, Any], arrays: Sequence[Any], negatives: bool) -> FastRun | None:
    if len(arrays) != 3 or type(arrays[2]) is not np.ndarray:
        return None
    data, indices, updates = arrays[0], arrays[1], arrays[2]
    t = indices.shape[-1]
    if t < 1 or t > data.ndim or updates.shape != indices.shape[:-1] + data.shape[t:]:
        return None
    dims = data.shape[:t]
    block = math.prod(data.shape[t:])
    dims_array = np.asarray(dims, dtype=np.int64)
    count = math.prod(indices.shape[:-1])
    rows_total = math.prod(dims)
    ravel = np.ravel_multi_index

    def run(arrays: Sequence[Any]) -> tuple[np.ndarray, int, bool] | None:
        indices = arrays[1]
        negative = _negative(indices, negatives)
        if negative is None:
            return None
        tuples = indices.reshape(count, t)
        if negative:
            tuples = np.where(tuples < 0, tuples + dims_array, tuples)
        try:  # refuses a coordinate outside [0, dim): the kernel raises or clamps
            rows = ravel(tuples.T, dims)
        except ValueError:
            return None
        if count <= SMALL_ELEMENTS:
            duplicates = count - len(set(rows.tolist()))
        else:
            duplicates = count_duplicates(rows, rows_total)
        out = np.array(arrays[0], order="C", copy=True)
        write_rows(out.reshape(-1), rows, np.ascontiguousarray(arrays[2]), block, unique=not duplicates)
        return out, duplicates, negative

    return run


_MAKERS: dict[str, Callable[[dict[str, Any], Sequence[Any], bool], FastRun | None]] = {
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Scatter": _scatter_elements,
    "ScatterElements": _scatter_elements,
    "ScatterND": _scatter_nd,
}


def proved_fast_run(
    op_type: str,
    attrs: dict[str, Any],
    arrays: Sequence[Any],
    t: NodeTranslation,
    result: Any,
    negative: bool,
) -> FastRun | Literal[False] | None:
    """The run plan of :func:`fast_run`, proved on the run the kernel just made (``result``, a
    :class:`~dmlshim.translate.runner.RunResult`, whose indices had a negative value when ``negative``):
    None when there is no plan or it does not give the kernel's output, duplicate count and negative
    flag bit for bit (the step then keeps to the kernel for these shapes); False when this run cannot
    prove it (its indices are not for a plan: clamped, say), to be tried again on the next run."""
    run = fast_run(op_type, attrs, arrays, t)
    if run is None:
        return None
    done = run(arrays)
    if done is None:
        return False
    output, duplicates, seen_negative = done
    expected = result.output
    if (
        type(output) is not np.ndarray
        or type(expected) is not np.ndarray
        or not output.flags.c_contiguous
        or duplicates != result.duplicate_indices
        or seen_negative != negative
        or not same_bits(output, expected)
    ):
        logger.warning("%s: its run plan differs from the kernel; the kernel runs it", t.name)
        return None
    return run


__all__ = ["FAST_MAX_ELEMENTS", "FastRun", "fast_run", "proved_fast_run"]
