"""Index normalisation shared by every kernel: negative indices, bounds, clamping, duplicate writes.

All checks are vectorised: a min/max pass proves the common all-valid case; only when it fails are masks
built to wrap negatives, find the first offending element, or clamp.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dml.enums import DataType, FeatureLevel, OperatorType
from ..errors import IndexOutOfRangeError
from .buffers import block_view
from .options import IndexMode

logger = logging.getLogger(__name__)

_INT64_MAX = np.iinfo(np.int64).max

RANGE_RULE = (
    "an index must address an existing element: [0, size-1], or [-size, -1] counted from the end when "
    "the index DataType is signed and the feature level is DML_FEATURE_LEVEL_3_0 or later (DirectML "
    "leaves out-of-range results undefined and ONNX makes them an error; --clamp-indices on the "
    'command line, index_mode="clamp" in Python, clamps instead)'
)
NEGATIVE_RULE = (
    "negative indices need DML_FEATURE_LEVEL_3_0 or later and a signed index DataType (INT32 or INT64); "
    "they count from the end of the dimension, -1 being the last element"
)


class KernelIndexError(IndexOutOfRangeError):
    """An index the kernel cannot use, with where it was found.

    Attributes:
        position: the multi-index of the offending element in IndicesTensor (DirectML dimensions).
        dimension: the dimension of the addressed tensor (InputTensor or OutputTensor) it indexes.
        size: that dimension's size.
        valid_range: the inclusive range of accepted values.
    """

    def __init__(
        self,
        message: str,
        *,
        position: tuple[int, ...],
        dimension: int,
        size: int,
        valid_range: tuple[int, int],
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.position = position
        self.dimension = dimension
        self.size = size
        self.valid_range = valid_range


@dataclass(frozen=True)
class IndexContext:
    """What an index check needs besides the values: who is asking, and under which rules.

    Attributes:
        op: the DirectML operator.
        node: the ONNX node name, for messages.
        data_type: IndicesTensor.DataType (signedness decides whether negatives may wrap).
        feature_level: the emulated feature level.
        mode: the out-of-range policy.
        target: the tensor the indices address (``InputTensor`` for gathers, ``OutputTensor`` for scatters).
    """

    op: OperatorType
    node: str | None
    data_type: DataType
    feature_level: FeatureLevel
    mode: IndexMode
    target: str = "InputTensor"

    @property
    def negatives_allowed(self) -> bool:
        return self.data_type.is_signed_integer and self.feature_level >= FeatureLevel.FL_3_0


def normalize_indices(
    raw: np.ndarray, dims: Sequence[int], axes: Sequence[int], ctx: IndexContext
) -> np.ndarray:
    """Check IndicesTensor values and turn them into valid non-negative indices.

    Args:
        raw: the index values shaped like IndicesTensor.Sizes (any integer dtype; never modified).
        dims: the sizes addressed by the last axis of ``raw``, one per component (ND tuples), or a single
            size that every element addresses (GATHER, GATHER_ELEMENTS, SCATTER).
        axes: the DirectML dimension numbers of ``dims``, for messages.
        ctx: the rules and the names used in messages.

    Returns:
        An integer array shaped like ``raw`` whose values lie in ``[0, dim-1]``. When no value needs
        fixing this is ``raw`` itself (a uint64 array viewed as int64) to save a copy: callers must treat
        it as read-only and compute offsets with ``dtype=np.int64`` arithmetic. Otherwise it is a new
        int64 array.

    Raises:
        IndexOutOfRangeError: (a :class:`KernelIndexError`) a negative index where negatives are not
            allowed, or, in ``IndexMode.ERROR``, an index outside the dimension.
    """
    if raw.size == 0:
        return np.zeros(raw.shape, dtype=np.int64)
    t = len(dims)
    if _all_in_range(raw, dims):
        return raw.view(np.int64) if raw.dtype == np.uint64 else raw
    # Unsafe cast on purpose: a uint64 above INT64_MAX becomes negative here and is caught below.
    idx = np.array(raw, dtype=np.int64, order="C", copy=True)
    cols = idx.reshape(-1, t)
    dim_arr = np.asarray(dims, dtype=np.int64)
    signed = ctx.data_type.is_signed_integer and raw.dtype.kind == "i"
    if signed:
        negative = cols < 0
        if bool(negative.any()):
            if not ctx.negatives_allowed:
                _raise(raw, cols, negative, dims, axes, ctx, negative_rule=True)
            np.add(cols, dim_arr, out=cols, where=negative)
    # Viewed as uint64, a still-negative value (or a wrapped-around uint64) is huge: one unsigned
    # comparison catches every out-of-range value without overflow.
    bad = cols.view(np.uint64) >= dim_arr.astype(np.uint64)
    if not bool(bad.any()):
        return idx
    if ctx.mode is IndexMode.ERROR or bool(np.any(dim_arr[np.any(bad, axis=0)] == 0)):
        _raise(raw, cols, bad, dims, axes, ctx, negative_rule=False)
    logger.debug("%s: clamping %d out-of-range indices", ctx.op.dml_name, int(np.count_nonzero(bad)))
    high = dim_arr - 1
    if signed:
        np.clip(cols, 0, high, out=cols)
    else:
        # Unsigned indices never wrap: a huge value clamps to the last element, not the first.
        ucols = cols.view(np.uint64)
        np.minimum(ucols, high.astype(np.uint64), out=ucols)
    return idx


def fast_indices(raw: np.ndarray, dims: Sequence[int], ctx: IndexContext) -> np.ndarray | None:
    """The chunk-sized counterpart of :func:`normalize_indices` for the common cases only.

    Args:
        raw: index values (a chunk of IndicesTensor; tuple components last when ``len(dims) > 1``).
        dims: as for :func:`normalize_indices`.
        ctx: the index rules.

    Returns:
        Indices in ``[0, dim-1]``, shaped like ``raw`` (``raw`` itself, a uint64 array viewed as int64,
        when no value needs wrapping; else a new int64 array), or None when some value is out of range
        or is a negative index the rules forbid: the caller must then run :func:`normalize_indices` on
        the whole IndicesTensor, which raises, clamps or reports exactly as documented.
    """
    if raw.size == 0:
        return raw
    if len(dims) == 1:
        dim = dims[0]
        if raw.size <= SMALL_ELEMENTS:
            low, high = _low_high(raw)
            if low >= 0 and high < dim:
                return raw.view(np.int64) if raw.dtype == np.uint64 else raw
        # One OR-reduction proves the common case: no sign bit anywhere and every value <= the OR.
        acc = int(np.bitwise_or.reduce(raw, axis=None))
        if 0 <= acc < dim or (acc >= 0 and int(raw.max()) < dim):
            return raw.view(np.int64) if raw.dtype == np.uint64 else raw
        if acc >= 0 or not (ctx.negatives_allowed and raw.dtype.kind == "i"):
            return None
        if int(raw.min()) < -dim or int(raw.max()) >= dim:
            return None
        wide = raw.astype(np.int64)
        return np.where(wide < 0, wide + dim, wide)
    if _all_in_range(raw, dims):
        return raw.view(np.int64) if raw.dtype == np.uint64 else raw
    if not (ctx.negatives_allowed and raw.dtype.kind == "i"):
        return None
    cols = raw.reshape(-1, len(dims))
    dim_arr = np.asarray(dims, dtype=np.int64)
    if bool(np.any(cols.min(axis=0) < -dim_arr)) or bool(np.any(cols.max(axis=0) >= dim_arr)):
        return None
    wide = cols.astype(np.int64)
    return np.where(wide < 0, wide + dim_arr, wide).reshape(raw.shape)


SMALL_ELEMENTS = 32
"""Up to this many index values, Python's min/max over ``tolist()`` beats two numpy reductions (each
costs a microsecond or two of call overhead whatever the size)."""


def _low_high(raw: np.ndarray) -> tuple[int, int]:
    """The smallest and largest value of a non-empty integer array, as Python ints."""
    if raw.size <= SMALL_ELEMENTS:
        values = raw.ravel().tolist()
        return min(values), max(values)
    return int(raw.min()), int(raw.max())


def has_negative(raw: np.ndarray | None) -> bool:
    """Whether a signed integer array holds a negative value (False for None, empty or unsigned arrays)."""
    if raw is None or raw.dtype.kind != "i" or not raw.size:
        return False
    if raw.size <= SMALL_ELEMENTS:
        return min(raw.ravel().tolist()) < 0
    return bool(raw.min() < 0)


def _all_in_range(raw: np.ndarray, dims: Sequence[int]) -> bool:
    """The common case, proven with min/max reductions only (Python ints: no uint64/int64 mixing)."""
    low, high = _low_high(raw)
    if low >= 0 and high < min(dims):
        return True
    if len(dims) == 1 or low < 0 or high >= max(dims):
        return False
    if raw.size <= SMALL_ELEMENTS:
        # low >= 0 is proven: each component's largest value must stay below its dimension.
        columns = zip(*raw.reshape(-1, len(dims)).tolist(), strict=True)
        return all(max(col) < dim for col, dim in zip(columns, dims, strict=True))
    cols = raw.reshape(-1, len(dims))
    return all(int(cols[:, j].min()) >= 0 and int(cols[:, j].max()) < dim for j, dim in enumerate(dims))


def _raise(
    raw: np.ndarray,
    cols: np.ndarray,
    mask: np.ndarray,
    dims: Sequence[int],
    axes: Sequence[int],
    ctx: IndexContext,
    *,
    negative_rule: bool,
) -> None:
    flat_pos = int(np.argmax(mask.reshape(-1)))
    component = flat_pos % len(dims)
    position = tuple(int(p) for p in np.unravel_index(flat_pos, raw.shape))
    value = int(raw[position])
    size = int(dims[component])
    axis = int(axes[component])
    count = int(np.count_nonzero(mask))
    where = f"IndicesTensor{list(position)} = {value}"
    others = f" ({count - 1} more elsewhere)" if count > 1 else ""
    if negative_rule:
        valid = (0, size - 1)
        message = (
            f"{where} is negative{others}; {ctx.data_type.dml_name} indices at "
            f"{ctx.feature_level.dml_name} cannot be negative. {NEGATIVE_RULE}"
        )
        rule = NEGATIVE_RULE
    else:
        valid = (-size, size - 1) if ctx.negatives_allowed else (0, size - 1)
        message = (
            f"{where} is out of range for {ctx.target} dimension {axis} of size {size}{others}: "
            f"valid range [{valid[0]}, {valid[1]}] ({ctx.data_type.dml_name} indices, "
            f"{ctx.feature_level.dml_name}). Rule: {RANGE_RULE}"
        )
        rule = RANGE_RULE
    raise KernelIndexError(
        message,
        position=position,
        dimension=axis,
        size=size,
        valid_range=valid,
        rule=rule,
        value=value,
        node=ctx.node,
        op_type=ctx.op.dml_name,
        tensor="IndicesTensor",
    )


def write_in_order(out: np.ndarray, targets: np.ndarray, values: np.ndarray, unique: bool) -> None:
    """``out[targets[i]] = values[i]`` for i in index order, so the last write to a target wins.

    Args:
        out: the flat, C-contiguous destination.
        targets: validated flat offsets into ``out``.
        values: one value per target.
        unique: the caller has proven every target distinct.
    """
    if unique:
        # No two writes collide, so numpy's fancy assignment (faster, order unspecified) is exact.
        out[targets] = values
    else:
        # np.put stores value after value in index order: the deterministic last-write-wins.
        np.put(out, targets, values, mode="clip")


def write_rows(out: np.ndarray, rows: np.ndarray, updates: np.ndarray, block: int, unique: bool) -> None:
    """:func:`write_in_order` for runs of ``block`` elements: run ``rows[i]`` of the flat ``out`` (seen as
    ``(-1, block)``) becomes run ``i`` of the flat ``updates``, in index order (the last write wins)."""
    if block == 1:
        write_in_order(out, rows, updates.reshape(-1), unique=unique)
    else:
        # np.put stores run after run in index order: the last write to a run wins.
        np.put(block_view(out, block), rows, block_view(updates, block), mode="clip")


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """For a sorted 1-D array: True where a value first appears."""
    first = np.empty(ordered.size, dtype=np.bool_)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted (``np.unique`` without its first call importing
    ``numpy.ma``, 0.1 s of a session's first run)."""
    ordered = np.sort(values.reshape(-1))
    return ordered if ordered.size <= 1 else ordered[_firsts(ordered)]


def unique_slots(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct, slots)``: the distinct values of an integer array, sorted, and for each value the
    position of its own in ``distinct`` (``np.unique(values, return_inverse=True)``, see
    :func:`sorted_unique`)."""
    flat = values.reshape(-1)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    first = _firsts(ordered)
    slots = np.empty(flat.size, dtype=np.int64)
    slots[order] = np.cumsum(first) - 1
    return ordered[first], slots


class TargetSet:
    """The distinct targets of a scatter's writes (element offsets, or row numbers of runs).

    Args:
        targets: validated flat targets, in write order.
        target_count: how many targets there are (the output's elements or rows).

    Attributes:
        duplicates: the writes a later write to the same target overwrites.
    """

    __slots__ = ("_mask", "_unique", "duplicates")

    def __init__(self, targets: np.ndarray, target_count: int) -> None:
        n = targets.size
        self._mask: np.ndarray | None = None
        self._unique: np.ndarray | None = None
        if n * 8 < target_count:
            # Few writes into a large output: sorting them beats a table of every target.
            self._unique = sorted_unique(targets)
            self.duplicates = n - int(self._unique.size)
        else:
            mask = np.zeros(target_count, dtype=np.bool_)
            mask[targets] = True  # every write stores the same value, so the order cannot matter
            self._mask = mask
            self.duplicates = n - int(np.count_nonzero(mask))

    @property
    def sorted_targets(self) -> np.ndarray | None:
        """The distinct targets, sorted, when the set holds them so (few writes into many targets)."""
        return self._unique

    def holds_all(self, positions: np.ndarray) -> bool:
        """Whether every one of ``positions`` (valid targets) is written."""
        if self._mask is not None:
            return bool(self._mask[positions].all())
        assert self._unique is not None
        unique = self._unique
        if not unique.size:
            return not positions.size
        found = np.minimum(np.searchsorted(unique, positions), unique.size - 1)
        return bool(np.array_equal(unique[found], positions))


def count_duplicates(targets: np.ndarray, target_count: int) -> int:
    """The number of writes in ``targets`` that a later write to the same target overwrites."""
    if targets.size <= 1:
        return 0
    return TargetSet(targets, target_count).duplicates
