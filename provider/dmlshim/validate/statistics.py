"""Error statistics of one output against a reference: what a model converter reads to choose a
tolerance (polygraphy prints the same kind of figures)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comparison import is_floating, same_bits
from .results import json_scalar


@dataclass(frozen=True)
class ErrorStatistics:
    """Absolute and relative error of ``actual`` against ``expected``, element by element.

    Relative error is ``|actual - expected| / |expected|`` (infinite where ``expected`` is 0 and the
    values differ). NaN against NaN counts as no error; NaN against a number, or different infinities, as
    an infinite error.

    Attributes:
        elements: the elements compared.
        max_abs, mean_abs, median_abs, p99_abs: absolute error figures.
        max_rel, mean_rel, median_rel, p99_rel: relative error figures (finite elements only for means).
        over_tolerance: elements outside ``atol + rtol * |expected|``.
        rtol, atol: the tolerance checked.
        min_atol: the smallest atol that passes with ``rtol`` as given (inf when no atol can).
        min_rtol: the smallest rtol that passes with ``atol`` as given (inf when no rtol can).
    """

    elements: int
    max_abs: float
    mean_abs: float
    median_abs: float
    p99_abs: float
    max_rel: float
    mean_rel: float
    median_rel: float
    p99_rel: float
    over_tolerance: int
    rtol: float
    atol: float
    min_atol: float
    min_rtol: float

    def to_json(self) -> dict[str, Any]:
        return {k: json_scalar(v) for k, v in self.__dict__.items()}


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else (math.inf if values.size else 0.0)


def error_statistics(
    actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0, atol: float = 0.0
) -> ErrorStatistics | None:
    """The statistics, or None when the arrays are not comparable numbers (dtype or shape differ,
    strings)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return None
    kind = "f" if is_floating(expected.dtype) else expected.dtype.kind
    if kind not in "fciub":
        return None
    if expected.size == 0 or same_bits(actual, expected):
        # Nothing differs: every figure is 0 (what the arithmetic below gives, without it).
        figures = dict.fromkeys(("max_abs", "mean_abs", "median_abs", "p99_abs"), 0.0)
        figures.update(dict.fromkeys(("max_rel", "mean_rel", "median_rel", "p99_rel"), 0.0))
        return ErrorStatistics(
            elements=int(expected.size),
            over_tolerance=0,
            rtol=rtol,
            atol=atol,
            min_atol=0.0,
            min_rtol=0.0,
            **figures,
        )
    wide = np.complex128 if kind == "c" else np.float64
    a = actual.astype(wide).reshape(-1)
    e = expected.astype(wide).reshape(-1)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.where(same, 0.0, np.abs(a - e))
        diff = np.where(np.isnan(diff), np.inf, diff)
        scale = np.abs(e)
        rel = np.where(same, 0.0, np.where(scale > 0, diff / scale, np.inf))
        rel = np.where(np.isnan(rel), np.inf, rel)
        exact = kind in "iub"
        allowed = np.where(np.isfinite(scale), atol + rtol * scale, np.inf) if not exact else 0.0
        over = int(np.count_nonzero(diff > allowed))
        need_atol = float(np.max(diff - rtol * np.where(np.isfinite(scale), scale, 0.0)))
        with_atol = np.where(diff <= atol, 0.0, np.where(scale > 0, (diff - atol) / scale, np.inf))
        need_rtol = float(np.max(with_atol))
        return _statistics(diff, rel, over, rtol, atol, exact, need_atol, need_rtol)


def _statistics(
    diff: np.ndarray,
    rel: np.ndarray,
    over: int,
    rtol: float,
    atol: float,
    exact: bool,
    need_atol: float,
    need_rtol: float,
) -> ErrorStatistics:
    return ErrorStatistics(
        elements=int(diff.size),
        max_abs=float(diff.max()),
        mean_abs=_finite_mean(diff),
        median_abs=float(np.median(diff)),
        p99_abs=float(np.percentile(diff, 99)),
        max_rel=float(rel.max()),
        mean_rel=_finite_mean(rel),
        median_rel=float(np.median(rel)),
        p99_rel=float(np.percentile(rel, 99)),
        over_tolerance=over,
        rtol=rtol,
        atol=atol,
        min_atol=max(0.0, need_atol) if not exact or need_atol <= 0 else math.inf,
        min_rtol=max(0.0, need_rtol) if not exact or need_rtol <= 0 else math.inf,
    )
