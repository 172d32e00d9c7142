"""Running WebNN cases: validate, round-trip through DxDispatch JSON, execute, compare bit for bit."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...dml.json_form import operator_from_json, operator_to_json
from ...dml.validate import check
from ...errors import DmlShimError
from ...kernels import IndexMode, KernelOptions, execute
from .cases import FEATURE_LEVEL, CaseResult, CaseStatus, WebnnCase, WebnnCaseError, load_cases
from .descriptors import build_descriptor, case_inputs

logger = logging.getLogger(__name__)


def execute_case(case: WebnnCase, index_mode: IndexMode = IndexMode.ERROR) -> np.ndarray:
    """Build, validate and execute a case; the output in the expected (WebNN) shape.

    The descriptor executed is the one read back from its DxDispatch JSON, so the run is what a replay
    of that JSON would compute.

    Args:
        case: the case.
        index_mode: the out-of-range index policy of the kernels.

    Returns:
        The output array, reshaped from the descriptor's padded Sizes to the case's expected shape.

    Raises:
        WebnnCaseError: the case cannot be expressed.
        InvalidDescriptorError: the descriptor breaks a DirectML rule at FL 5_0.
        IndexOutOfRangeError: ``IndexMode.ERROR`` and an index is outside its dimension.
    """
    output, _ = _execute(case, index_mode)
    return output


def _execute(case: WebnnCase, index_mode: IndexMode) -> tuple[np.ndarray, int]:
    desc = build_descriptor(case)
    check(desc, FEATURE_LEVEL, node=case.name, op_type=case.op)
    replayed = operator_from_json(operator_to_json(desc))
    options = KernelOptions(feature_level=FEATURE_LEVEL, index_mode=index_mode, node=case.name)
    result = execute(replayed, case_inputs(case, replayed), options)
    output = result.output
    expected_shape = case.expected.shape
    if math.prod(output.shape) != math.prod(expected_shape):
        raise WebnnCaseError(
            f"the output has Sizes {list(output.shape)}, which cannot hold the expected shape "
            f"{list(expected_shape)}",
            node=case.name,
            op_type=case.op,
        )
    return output.reshape(expected_shape), result.duplicate_indices


def compare_exact(actual: np.ndarray, expected: np.ndarray) -> str | None:
    """Compare two arrays exactly (ULP 0): same dtype, same shape, same bits; a NaN matches any NaN.

    Returns:
        None when they match, else a one-line description of the first difference.
    """
    if actual.dtype != expected.dtype:
        return f"output dtype {actual.dtype} differs from the expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"output shape {list(actual.shape)} differs from the expected {list(expected.shape)}"
    if actual.dtype.kind == "f":
        bits = np.dtype(f"u{actual.dtype.itemsize}")
        nan_a, nan_e = np.isnan(actual), np.isnan(expected)
        # Gather and scatter only move values, so a match is bit-exact (which also tells -0.0 from 0.0).
        differs = (nan_a != nan_e) | (~nan_a & ~nan_e & (actual.view(bits) != expected.view(bits)))
    else:
        differs = actual != expected
    if not differs.any():
        return None
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    return (
        f"{int(differs.sum())} of {differs.size} elements differ; first at {list(first)}: "
        f"got {actual[first]!r}, expected {expected[first]!r}"
    )


def run_case(case: WebnnCase, index_mode: IndexMode = IndexMode.ERROR) -> CaseResult:
    """Run one case and compare its output exactly with the expected values.

    Args:
        case: the case.
        index_mode: ``IndexMode.ERROR`` (dmlshim's default: an out-of-range index is an error) or
            ``IndexMode.CLAMP`` (WebNN's assumption in the expected values).

    Returns:
        The case's result. Errors dmlshim raises on purpose become ``status="error"``; anything else is an
        internal bug and propagates.
    """
    descriptor: Mapping[str, Any] | None = None
    try:
        descriptor = operator_to_json(build_descriptor(case))
        output, duplicates = _execute(case, index_mode)
    except DmlShimError as exc:
        logger.debug("WebNN case %r (%s): %s", case.name, index_mode.value, exc)
        return CaseResult(case.name, case.op, "error", index_mode, str(exc), type(exc).__name__, descriptor)
    mismatch = compare_exact(output, case.expected.array())
    if mismatch is not None:
        logger.debug("WebNN case %r (%s) failed: %s", case.name, index_mode.value, mismatch)
        return CaseResult(case.name, case.op, "fail", index_mode, mismatch, None, descriptor, duplicates)
    return CaseResult(case.name, case.op, "pass", index_mode, "", None, descriptor, duplicates)


def run_all(
    index_mode: IndexMode = IndexMode.ERROR, path: str | os.PathLike[str] | None = None
) -> list[CaseResult]:
    """Run every case of the cases file.

    Args:
        index_mode: the out-of-range policy, as for :func:`run_case`.
        path: the cases file; :func:`default_cases_path` when None.

    Returns:
        One result per case, in file order.

    Raises:
        WebnnCasesFileError: the cases file is absent or malformed.
    """
    results = [run_case(case, index_mode) for case in load_cases(path)]
    counts = totals(results)
    logger.info(
        "WebNN cases (%s): %d pass, %d fail, %d error",
        index_mode.value,
        counts["pass"],
        counts["fail"],
        counts["error"],
    )
    return results


def totals(results: Iterable[CaseResult]) -> dict[CaseStatus, int]:
    """How many results have each status: ``{"pass": n, "fail": n, "error": n}``."""
    counts: dict[CaseStatus, int] = {"pass": 0, "fail": 0, "error": 0}
    for result in results:
        counts[result.status] += 1
    return counts
