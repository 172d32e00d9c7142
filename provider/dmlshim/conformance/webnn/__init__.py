"""The WebNN conformance cases (transcribed from the Web Platform Tests) run at the DirectML level.

Each case of ``webnn_wpt_cases.json`` becomes one DirectML operator descriptor, built the way onnxruntime's
DirectML execution provider builds descriptors for the matching ONNX op (right-aligned Sizes, the same
DimensionCount rule), with the case's index type kept as given (UINT32, INT32 or INT64). The descriptor is
validated at DML_FEATURE_LEVEL_5_0, written to DxDispatch's JSON form, read back from that JSON (so what runs
is exactly what a replay would run), executed by :mod:`dmlshim.kernels` and compared bit for bit with the
case's expected values.

WebNN op -> DirectML operator:

========================  =============================  ==============================
WebNN                     DirectML                       DimensionCount
========================  =============================  ==============================
gatherElements            DML_OPERATOR_GATHER_ELEMENTS   rank(input)
gatherND                  DML_OPERATOR_GATHER_ND1 (0)    max(rank(input), rank(indices), rank(output))
scatterElements           DML_OPERATOR_SCATTER           max(rank(input), 4)
scatterND                 DML_OPERATOR_SCATTER_ND        max(rank(input), rank(indices), rank(updates))
========================  =============================  ==============================

Out-of-range indices: WebNN's expected values assume they are clamped, whereas dmlshim's default
(``IndexMode.ERROR``) follows ONNX and refuses them; run with ``IndexMode.CLAMP`` to reproduce WebNN.

The cases ship with dmlshim (``dmlshim/conformance/data/webnn_wpt_cases.json``, the same file as the
repository's ``conformance/webnn_wpt_cases.json``); ``$DMLSHIM_WEBNN_CASES`` names another file.

Modules: :mod:`.cases` (data model and loader), :mod:`.descriptors` (case -> DirectML descriptor),
:mod:`.runner` (execute and compare).
"""

from __future__ import annotations

from .cases import (
    CASES_ENV_VAR,
    FEATURE_LEVEL,
    PACKAGED_CASES,
    WEBNN_OPS,
    CaseResult,
    CaseStatus,
    WebnnCase,
    WebnnCaseError,
    WebnnCasesFileError,
    WebnnTensor,
    default_cases_path,
    load_cases,
)
from .descriptors import build_descriptor, case_inputs
from .runner import compare_exact, execute_case, run_all, run_case, totals

__all__ = [
    "CASES_ENV_VAR",
    "FEATURE_LEVEL",
    "PACKAGED_CASES",
    "WEBNN_OPS",
    "CaseResult",
    "CaseStatus",
    "WebnnCase",
    "WebnnCaseError",
    "WebnnCasesFileError",
    "WebnnTensor",
    "build_descriptor",
    "case_inputs",
    "compare_exact",
    "default_cases_path",
    "execute_case",
    "load_cases",
    "run_all",
    "run_case",
    "totals",
]
