"""``dmlshim conformance``: the ONNX backend node tests for gather/scatter through dmlshim.backend.

Expected outputs come from the onnx package's own backend cases (built in memory by onnx 1.23 and later,
read from its case folders before). The statuses below are pinned per case and per level, so a case silently
changing from ``fallback`` to ``dml`` (or back) fails here. The supported range differs in which cases
exist (onnx 1.20, the floor, has 23 in scope and the 3 TensorScatter cases) and in whether the installed
onnxruntime can load them (TensorScatter-24 needs a newer one than 1.24): both are taken from onnx and
onnxruntime themselves.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from dmlshim.cli.main import main
from dmlshim.conformance import backend_suite
from dmlshim.conformance.backend_suite import (
    MIN_IN_SCOPE_CASES,
    STATUSES,
    BackendCase,
    SuiteCorpusError,
    SuiteResult,
    compare_outputs,
    discover_cases,
    min_in_scope_cases,
    run_case,
    suite_by_level,
)
from dmlshim.dml.enums import FeatureLevel
from dmlshim.report.conformance_report import render_markdown, render_text, summary_markdown
from dmlshim.translate import translate_model

RESULTS_MD = Path(__file__).resolve().parents[1] / "conformance" / "RESULTS.md"

GATHERS = [
    "test_gather_0", "test_gather_1", "test_gather_2d_indices", "test_gather_negative_indices",
    "test_gather_elements_0", "test_gather_elements_1", "test_gather_elements_negative_indices",
    "test_gathernd_example_float32", "test_gathernd_example_int32", "test_gathernd_example_int32_batch_dim1",
]  # fmt: skip
SCATTERS_NONE = [
    "test_scatter_with_axis", "test_scatter_without_axis",
    "test_scatter_elements_with_axis", "test_scatter_elements_with_negative_indices",
    "test_scatter_elements_without_axis", "test_scatternd",
]  # fmt: skip
REDUCTIONS = {
    "test_scatter_elements_with_duplicate_indices": "add",
    "test_scatter_elements_with_reduction_max": "max",
    "test_scatter_elements_with_reduction_min": "min",
    "test_scatter_elements_with_reduction_mul": "mul",
    "test_scatternd_add": "add",
    "test_scatternd_max": "max",
    "test_scatternd_max_with_element_indices": "max",
    "test_scatternd_min": "min",
    "test_scatternd_min_with_element_indices": "min",
    "test_scatternd_multiply": "mul",
}
TENSOR_SCATTER = ["test_tensorscatter", "test_tensorscatter_3d", "test_tensorscatter_circular"]

# Cases onnx 1.20 (the floor) does not have yet; onnx 1.23 has them all. onnx 1.20 already has the
# TensorScatter-24 cases (26 cases in all, 23 in scope).
LATER_CASES = {
    "test_scatter_elements_with_reduction_mul",
    "test_scatternd_max_with_element_indices",
    "test_scatternd_min_with_element_indices",
}
ONNX_1_23 = tuple(int(p) for p in onnx.__version__.split(".")[:2]) >= (1, 23)


def _ort_loads(case: BackendCase) -> bool:
    """Whether the installed onnxruntime loads the case's model by itself (the oracle for ort_cannot_load)."""
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    try:
        onnxruntime.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def _expected_5_0() -> dict[str, str]:
    """The pinned statuses, for the cases the installed onnx has; a TensorScatter case the installed
    onnxruntime cannot load is ``ort_cannot_load``."""
    full = {
        **dict.fromkeys(GATHERS, "dml"),
        **dict.fromkeys(SCATTERS_NONE, "dml"),
        **dict.fromkeys(REDUCTIONS, "fallback"),
        **dict.fromkeys(TENSOR_SCATTER, "fallback"),
    }
    cases = {c.name: c for c in discover_cases()}
    return {
        name: status if name not in TENSOR_SCATTER or _ort_loads(cases[name]) else "ort_cannot_load"
        for name, status in full.items()
        if name in cases
    }


def _counts(statuses: Mapping[str, str], in_scope: bool = False) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for name, status in statuses.items():
        if not in_scope or name not in TENSOR_SCATTER:
            counts[status] += 1
    return counts


EXPECTED_5_0 = _expected_5_0()
# FL 2_1 has DML_OPERATOR_GATHER_ND but not GATHER_ND1 (batch dimensions arrive with 3_0): the batch is
# folded into the index tuples on the host, so every case runs as at 5_0.
EXPECTED_2_1 = EXPECTED_5_0
EXPECTED = {
    FeatureLevel.FL_5_0: EXPECTED_5_0,
    FeatureLevel.FL_3_0: EXPECTED_5_0,
    FeatureLevel.FL_2_1: EXPECTED_2_1,
}


@pytest.fixture(scope="module")
def results() -> Mapping[FeatureLevel, SuiteResult]:
    return suite_by_level()


def _statuses(result: SuiteResult) -> dict[str, str]:
    return {c.name: c.status for c in result.cases}


def test_discovery_finds_every_case() -> None:
    cases = discover_cases()
    in_scope = [c for c in cases if c.in_scope]
    assert {c.name for c in cases} == set(EXPECTED_5_0)
    counts: dict[str, int] = {}
    for c in in_scope:
        counts[c.op_type] = counts.get(c.op_type, 0) + 1
    if ONNX_1_23:
        assert len(in_scope) == MIN_IN_SCOPE_CASES == min_in_scope_cases() == 26
        assert len(cases) == 29
        assert counts == {"Gather": 4, "GatherElements": 3, "GatherND": 3, "Scatter": 2,
                          "ScatterElements": 7, "ScatterND": 7}  # fmt: skip
    else:  # onnx 1.20 .. 1.22: the later cases may be missing, nothing else
        all_names = set(GATHERS) | set(SCATTERS_NONE) | set(REDUCTIONS) | set(TENSOR_SCATTER)
        assert all_names - {c.name for c in cases} <= LATER_CASES
        assert len(in_scope) >= min_in_scope_cases() == 23
    assert {c.opset for c in in_scope if c.op_type == "ScatterND"} == {18}
    assert {c.opset for c in in_scope if c.op_type == "Scatter"} == {10}


def test_a_shrunk_corpus_fails_loudly() -> None:
    with pytest.raises(SuiteCorpusError, match="fewer than the floor"):
        discover_cases(min_in_scope=MIN_IN_SCOPE_CASES + 1000)


@pytest.mark.parametrize("level", list(EXPECTED), ids=lambda lv: lv.short)
def test_statuses_per_case(results: Mapping[FeatureLevel, SuiteResult], level: FeatureLevel) -> None:
    assert _statuses(results[level]) == EXPECTED[level]


def test_26_of_26_in_scope_pass_at_5_0(results: Mapping[FeatureLevel, SuiteResult]) -> None:
    r = results[FeatureLevel.FL_5_0]
    assert r.passed
    assert r.in_scope_totals == _counts(EXPECTED_5_0, in_scope=True)
    assert r.totals == _counts(EXPECTED_5_0)
    if ONNX_1_23:
        assert r.in_scope_totals == {"dml": 16, "fallback": 10, "fail": 0, "ort_cannot_load": 0}
        assert "in scope: 26/26 passing" in render_text(r)
    else:
        assert r.in_scope_totals == {"dml": 16, "fallback": 7, "fail": 0, "ort_cannot_load": 0}
        assert "in scope: 23/23 passing" in render_text(r)


@pytest.mark.parametrize("level", list(EXPECTED), ids=lambda lv: lv.short)
def test_every_fallback_says_why(results: Mapping[FeatureLevel, SuiteResult], level: FeatureLevel) -> None:
    for case in results[level].cases:
        if case.name in REDUCTIONS:
            assert case.reason.startswith("SCATTER_REDUCTION_UNSUPPORTED"), case
            assert f"reduction='{REDUCTIONS[case.name]}'" in case.reason
        elif case.name in TENSOR_SCATTER and case.status == "ort_cannot_load":
            assert case.reason.startswith(f"onnxruntime {onnxruntime.__version__} cannot load"), case
            assert not case.in_scope
        elif case.name in TENSOR_SCATTER:
            assert case.reason.startswith("OUT_OF_SCOPE") and "onnxruntime CPU" in case.reason
            assert not case.in_scope
        elif case.status == "fallback":
            assert case.reason, case
    if level == FeatureLevel.FL_2_1:
        batch = next(c for c in results[level].cases if c.name == "test_gathernd_example_int32_batch_dim1")
        assert batch.status == "dml" and batch.operators == ("DML_OPERATOR_GATHER_ND",), batch
        assert "fold_batch_into_indices" in batch.reason, batch


@pytest.mark.parametrize("level", list(EXPECTED), ids=lambda lv: lv.short)
def test_no_case_is_dml_that_the_level_cannot_express(
    results: Mapping[FeatureLevel, SuiteResult], level: FeatureLevel
) -> None:
    """A ``dml`` case must translate at this level on its own, with an operator the level has."""
    cases = {c.name: c for c in discover_cases()}
    for outcome in results[level].cases:
        if outcome.status != "dml":
            continue
        translation = translate_model(cases[outcome.name].model, level)
        for node in translation.nodes:
            assert node.ok, (outcome.name, node.reasons)
            assert node.min_feature_level is not None and node.min_feature_level <= level
        assert outcome.operators, outcome
        if level < FeatureLevel.FL_3_0:
            assert "DML_OPERATOR_GATHER_ND1" not in outcome.operators
            # Below 3_0 DirectML takes UINT32 indices only: the host step that makes them so is stated.
            assert "normalize_indices" in outcome.reason, outcome


def test_reduction_never_runs_as_a_descriptor(results: Mapping[FeatureLevel, SuiteResult]) -> None:
    for result in results.values():
        for case in result.cases:
            if case.name in REDUCTIONS:
                assert case.operators == (), case


def test_a_wrong_expected_output_fails() -> None:
    case = next(c for c in discover_cases() if c.name == "test_gather_0")
    wrong = dataclasses.replace(case, outputs=(case.outputs[0] + 1,))
    outcome = run_case(wrong, FeatureLevel.FL_5_0)
    assert outcome.status == "fail" and "differ" in outcome.reason


def test_a_wrong_dtype_fails() -> None:
    case = next(c for c in discover_cases() if c.name == "test_gathernd_example_int32")
    other = dataclasses.replace(case, outputs=(case.outputs[0].astype(np.int64),))
    outcome = run_case(other, FeatureLevel.FL_5_0)
    assert outcome.status == "fail" and "dtype" in outcome.reason


def test_compare_outputs_rules() -> None:
    a = np.array([1.0, 2.0], np.float32)
    assert compare_outputs([a], [a.copy()], 1e-3, 1e-7) is None
    assert compare_outputs([a], [a, a], 1e-3, 1e-7) is not None
    assert compare_outputs([a + 1e-4], [a], 1e-3, 1e-7) is None
    assert "differ" in (compare_outputs([a + 1], [a], 1e-3, 1e-7) or "")
    assert "shape" in (compare_outputs([a.reshape(2, 1)], [a], 1e-3, 1e-7) or "")


# --- the command ---------------------------------------------------------------------------------


def test_cli_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["feature_level"] == "DML_FEATURE_LEVEL_5_0"
    assert doc["totals"] == _counts(EXPECTED_5_0)
    assert len(doc["cases"]) == len(EXPECTED_5_0) == (29 if ONNX_1_23 else 26)
    for case in doc["cases"]:
        assert {"name", "op_type", "opset", "status", "reason"} <= set(case)
        assert isinstance(case["opset"], int) and case["status"] == EXPECTED_5_0[case["name"]]
        assert isinstance(case["reason"], str)


def test_cli_text_at_a_lower_level(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--feature-level", "2_1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "DML_FEATURE_LEVEL_2_1" in out
    line = next(ln for ln in out.splitlines() if "test_gathernd_example_int32_batch_dim1" in ln)
    assert "dml" in line and "fold_batch_into_indices" in line, line
    n = 26 if ONNX_1_23 else 23
    assert f"in scope: {n}/{n} passing (16 dml, {n - 16} fallback, 0 fail)" in out


def test_cli_exit_1_when_a_case_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = discover_cases()

    def doctored(min_in_scope: int | None = None) -> tuple[BackendCase, ...]:
        first = dataclasses.replace(real[0], outputs=tuple(o + 1 for o in real[0].outputs))
        return (first, *real[1:])

    monkeypatch.setattr(backend_suite, "discover_cases", doctored)
    code = main(["conformance", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["totals"]["fail"] == 1
    assert doc["cases"][0]["status"] == "fail"


def test_cli_exit_2_on_a_shrunk_corpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(backend_suite, "MIN_IN_SCOPE_CASES", 10_000)
    monkeypatch.setattr(
        backend_suite, "discover_cases", lambda min_in_scope=10_000: discover_cases(min_in_scope=min_in_scope)
    )
    code = main(["conformance"])
    assert code == 2
    assert "corpus shrank" in capsys.readouterr().err


def test_cli_all_levels_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--all-levels", "--markdown"])
    out = capsys.readouterr().out
    assert code == 0
    for level in ("DML_FEATURE_LEVEL_5_0", "DML_FEATURE_LEVEL_3_0", "DML_FEATURE_LEVEL_2_1"):
        assert f"### {level}" in out
    assert "## WebNN cases" in out


def test_committed_results_are_current(results: Mapping[FeatureLevel, SuiteResult]) -> None:
    """conformance/RESULTS.md holds the summary and every per-level table the suite gives today."""
    text = RESULTS_MD.read_text()
    recorded = next(line for line in text.splitlines() if line.startswith("dmlshim "))
    versions = dict(part.rsplit(" ", 1) for part in recorded.split(", "))
    installed = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
    if any(_release(installed[k]) < _release(versions[k]) for k in installed):
        # The file is made with the newest versions; an older onnx or onnxruntime has fewer cases.
        pytest.skip(
            f"conformance/RESULTS.md is made with onnx {versions['onnx']} and onnxruntime "
            f"{versions['onnxruntime']}; installed: onnx {installed['onnx']}, "
            f"onnxruntime {installed['onnxruntime']}"
        )
    assert summary_markdown(results) in text
    for result in results.values():
        assert render_markdown(result) in text


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())
