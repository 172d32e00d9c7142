"""Element-wise comparison of two arrays of one dtype and shape, as every dmlshim check compares them.

Integers and bools must be equal whatever the tolerance; floating-point (and complex) values must satisfy
``|actual - expected| <= atol + rtol * |expected|``, with NaN equal to NaN and an infinity equal only to
the same infinity. Callers check dtype and shape first and word those problems themselves.

:func:`exact_difference` is the stricter rule for values that were copied, not computed: floating-point
elements must have identical bits (so ``-0.0`` differs from ``0.0``), except that any NaN equals any NaN
whatever its sign and payload (onnxruntime's arithmetic downstream of a copy does not define which NaN it
produces). :func:`dtype_tolerance` gives a tolerance that fits a dtype's precision, for comparing values
two implementations computed.

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


_FLOAT_EXTENSIONS = frozenset(
    {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn"}
)
"""ml_dtypes' floating-point types (numpy sees them as kind ``V``)."""


def is_floating(dtype: np.dtype) -> bool:
    """Whether a dtype holds real floating-point numbers (numpy's and ml_dtypes')."""
    return dtype.kind == "f" or dtype.name in _FLOAT_EXTENSIONS


DTYPE_TOLERANCE: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-2),
    "bfloat16": (6e-2, 6e-2),
}
"""(rtol, atol) per dtype for values computed by two implementations (fusion, fp16 computed in fp32):
a few units in the last place relative, a small absolute floor for values near zero. 8-bit floats get
(0.25, 0.25); integers, bools and strings are compared exactly."""


def dtype_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) fitting a dtype (see :data:`DTYPE_TOLERANCE`); (0, 0) for non-floating types."""
    if dtype.name in DTYPE_TOLERANCE:
        return DTYPE_TOLERANCE[dtype.name]
    if is_floating(dtype):
        return (0.25, 0.25)
    if dtype.kind == "c":
        return DTYPE_TOLERANCE.get(np.dtype(dtype.char.lower()).name, (1e-5, 1e-6))
    return (0.0, 0.0)


_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Same dtype, shape and bits (NaN payloads and signed zeros included; other kinds, strings say,
    equal element by element): the cheap first question of every comparison, answered without widening
    either array."""
    if actual is expected:
        return True
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    if actual.dtype.kind not in "biufc":
        return bool(np.array_equal(actual, expected))
    if actual.size <= 4096:
        # Equal bits are equal C-order bytes (cheaper than ufuncs on small arrays).
        return actual.tobytes() == expected.tobytes()
    # Compared 8 bytes at a time when the size allows (fewer, wider comparisons; a 3 MB KV cache in
    # about 0.1 ms of CPU).
    word = np.uint64 if actual.nbytes % 8 == 0 else np.uint8
    a = np.ascontiguousarray(actual).reshape(-1).view(word)
    e = np.ascontiguousarray(expected).reshape(-1).view(word)
    return bool(np.array_equal(a, e))


def exact_difference(actual: np.ndarray, expected: np.ndarray) -> ArrayDifference:
    """Compare bit for bit, any NaN equal to any NaN (see the module docstring)."""
    if same_bits(actual, expected):
        return ArrayDifference(0, 0.0, None)
    if expected.size == 0 or not is_floating(expected.dtype):
        return array_difference(actual, expected)
    width = _WORDS[expected.dtype.itemsize]
    # ascontiguousarray makes a 0-d array 1-d: the shape is put back so that ``first`` indexes the inputs
    a = np.ascontiguousarray(actual).view(width).reshape(actual.shape)
    e = np.ascontiguousarray(expected).view(width).reshape(expected.shape)
    wide_a = actual.astype(np.float64)
    wide_e = expected.astype(np.float64)
    bad = (a != e) & ~(np.isnan(wide_a) & np.isnan(wide_e))
    count = int(np.count_nonzero(bad))
    if not count:
        return ArrayDifference(0, 0.0, None)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(wide_a - wide_e)
    diff = np.where(bad, np.where(np.isnan(diff), np.inf, diff), 0.0)
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return ArrayDifference(count, float(diff.max()), first)


def array_difference(
    actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0, atol: float = 0.0
) -> ArrayDifference:
    """Compare two arrays of one dtype and shape (see the module docstring for the rule)."""
    if expected.size == 0:
        return ArrayDifference(0, 0.0, None)
    kind = "f" if is_floating(expected.dtype) else expected.dtype.kind
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
