"""dmlshim's outputs against reference outputs from a file (``--reference-outputs``): PyTorch's, say,
saved as ``.npz``, or a polygraphy ``RunResults`` JSON. What a model converter cares about."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .results import Mismatch, ValidationReport, json_scalar
from .statistics import ErrorStatistics, error_statistics
from .tolerances import Tolerances
from .value_kinds import fitting_tolerance, reference_values
from .verdict import compare_arrays


@dataclass(frozen=True)
class ExternalComparison:
    """One output against the reference outputs file.

    Attributes:
        match: equal within (rtol, atol); False when missing from the file or of another dtype/shape.
        rtol, atol: the tolerance used (the output's own, the default given, else one fitting the dtype).
        max_abs_diff: the largest absolute difference (None when not comparable).
        mismatches: elements outside the tolerance.
        first_mismatch: the first of them.
        problem: why the values could not be compared (missing, dtype, shape).
        statistics: error figures (None when not comparable).
    """

    match: bool
    rtol: float
    atol: float
    max_abs_diff: float | None = None
    mismatches: int = 0
    first_mismatch: Mismatch | None = None
    problem: str | None = None
    statistics: ErrorStatistics | None = None

    def to_json(self) -> dict[str, Any]:
        first = None
        if self.first_mismatch is not None:
            first = {
                "index": list(self.first_mismatch.index),
                "dmlshim": json_scalar(self.first_mismatch.dmlshim),
                "reference": json_scalar(self.first_mismatch.onnxruntime),
            }
        return {
            "match": self.match,
            "rtol": self.rtol,
            "atol": self.atol,
            "max_abs_diff": json_scalar(self.max_abs_diff),
            "mismatches": self.mismatches,
            "first_mismatch": first,
            "problem": self.problem,
            "statistics": self.statistics.to_json() if self.statistics is not None else None,
        }


ANY_DTYPE_OPTION = "--reference-any-dtype"
"""The option that compares values across dtypes (``any_dtype=True`` in Python)."""

_NUMERIC_KINDS = frozenset("biuf")


def _common(got: np.ndarray, expected: np.ndarray) -> np.dtype | None:
    """The dtype both arrays are compared in across dtypes (numpy's promotion), None when either is not a
    number or bool (strings are never equal to numbers)."""
    if got.dtype.kind not in _NUMERIC_KINDS or expected.dtype.kind not in _NUMERIC_KINDS:
        return None
    return np.result_type(got.dtype, expected.dtype)


def _narrow_from_bits(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """A bfloat16 or float8 output's reference given as its raw bits (unsigned integers of its width, as
    ``--save-outputs`` writes them and onnxruntime returns a float8 output; or the untyped ``|V1`` bytes
    ``numpy.save`` writes for an ml_dtypes array) viewed as that type; anything else as it is."""
    if got.dtype.kind != "V" or got.dtype.names is not None or expected.dtype == got.dtype:
        return expected
    raw = expected.dtype.kind == "u" or (expected.dtype.kind == "V" and expected.dtype.names is None)
    if raw and expected.dtype.itemsize == got.dtype.itemsize:
        return expected.view(got.dtype)
    return expected


def compare_external(
    got: np.ndarray, expected: np.ndarray | None, rtol: float, atol: float, *, any_dtype: bool = False
) -> ExternalComparison:
    """One output against its reference array (None: not in the file).

    The dtypes must be equal unless ``any_dtype``: then numbers of different dtypes (int32 labels against
    int64 references, as polygraphy compares them) are compared by value, in the dtype numpy promotes
    both to; the tolerance stays the one of dmlshim's output dtype."""
    if expected is None:
        return ExternalComparison(False, rtol, atol, problem="not in the reference outputs file")
    expected = _narrow_from_bits(got, np.asarray(expected))
    if got.dtype == object and expected.dtype.kind == "U":
        # a tensor(string) output as an .npz or polygraphy file holds it (``run -o``, ``--save-outputs``
        # write a numpy text array): the same strings
        expected = expected.astype(object)
    if got.dtype != expected.dtype:
        common = _common(got, expected) if any_dtype else None
        if common is not None:
            got, expected = got.astype(common), expected.astype(common)
        elif not any_dtype:
            return ExternalComparison(
                False,
                rtol,
                atol,
                problem=f"dtype {got.dtype}, the reference gives {expected.dtype} (values of different "
                f"dtypes are compared only with {ANY_DTYPE_OPTION}; Python: any_dtype=True)",
            )
    c = compare_arrays(got, expected, rtol, atol)
    if c.problem is not None:
        return ExternalComparison(False, rtol, atol, problem=c.problem)
    return ExternalComparison(
        match=c.match,
        rtol=rtol,
        atol=atol,
        max_abs_diff=c.max_abs_diff,
        mismatches=c.mismatches,
        first_mismatch=c.first_mismatch,
        statistics=error_statistics(got, expected, rtol, atol),
    )


def apply_reference_outputs(
    report: ValidationReport,
    reference: Mapping[str, np.ndarray],
    source: str,
    tolerances: Tolerances,
    *,
    any_dtype: bool = False,
) -> ValidationReport:
    """The report with every output compared against ``reference`` too; the verdict fails when any
    differs beyond its tolerance. Names in the file that are no output of the model are ignored (the
    file may hold intermediate values); an output missing from the file is a mismatch. ``any_dtype``:
    see :func:`compare_external`."""
    outputs = []
    for o in report.outputs:
        if o.dmlshim is None:
            outputs.append(o)
            continue
        got = np.asarray(o.dmlshim)
        if tolerances.has_own(o.name):
            rtol, atol = tolerances.for_output(o.name)
        else:
            rtol, atol = fitting_tolerance(got, o.dtype)  # a bfloat16 output's own, not float32's
        expected = reference.get(o.name)
        if expected is not None:
            # a bfloat16 or float8 output's raw bits (as --save-outputs writes them) compare as its values
            expected = reference_values(np.asarray(expected), o.dtype if got.dtype == np.float32 else None)
        outputs.append(
            dataclasses.replace(o, external=compare_external(got, expected, rtol, atol, any_dtype=any_dtype))
        )
    match = report.match and all(o.external is None or o.external.match for o in outputs)
    return dataclasses.replace(report, outputs=tuple(outputs), match=match, reference_outputs=source)
