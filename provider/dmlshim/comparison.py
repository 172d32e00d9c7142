"""Element-wise comparison of two arrays of one dtype and shape, as every dmlshim check compares them.

Integers and bools must be equal whatever the tolerance; floating-point (and complex) values must satisfy
``|actual - expected| <= atol + rtol * |expected|``, with NaN equal to NaN and an infinity equal only to
the same infinity. Callers check dtype and shape first and word those problems themselves.

The default tolerance, in every command and API that compares (validate, compare, run's own checks), is
exact: ``rtol = atol = 0``. Gather and scatter only move values, so emulated and real DirectML results
are bit-identical to onnxruntime's; a user loosens it with ``--rtol`` / ``--atol``. (The ONNX backend
conformance cases carry their own rtol/atol, which ``dmlshim conformance`` applies as onnx's runner does.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RTOL = 0.0
"""Relative tolerance when none is given (see the module docstring)."""
DEFAULT_ATOL = 0.0
"""Absolute tolerance when none is given (see the module docstring)."""


@dataclass(frozen=True)
class ArrayDifference:
    """How two same-typed, same-shaped arrays differ.

    Attributes:
        mismatches: the number of elements outside the tolerance.
        max_abs_diff: the largest absolute difference (inf where NaN meets a number or infinities differ).
        first: the row-major first differing position, None when all agree.
    """

    mismatches: int
    max_abs_diff: float
    first: tuple[int, ...] | None


def array_difference(
    actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0, atol: float = 0.0
) -> ArrayDifference:
    """Compare two arrays of one dtype and shape (see the module docstring for the rule)."""
    if expected.size == 0:
        return ArrayDifference(0, 0.0, None)
    kind = expected.dtype.kind
    if kind in "fc":
        wide = np.complex128 if kind == "c" else np.float64
        a = actual.astype(wide)
        e = expected.astype(wide)
        both_nan = np.isnan(e) & np.isnan(a)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
            diff = np.abs(a - e)
        # inf - inf is NaN: a NaN difference that is not a shared NaN is as far apart as values get.
        diff = np.where(both_nan | (a == e), 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
    else:
        bad = np.asarray(expected != actual)
        if kind in "iu":
            # Python ints: no wrap-around at the int64/uint64 extremes.
            diff = np.abs(expected.astype(object) - actual.astype(object)).astype(np.float64)
        else:
            diff = bad.astype(np.float64)
    count = int(np.count_nonzero(bad))
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if count else None
    return ArrayDifference(count, float(diff.max()), first)
