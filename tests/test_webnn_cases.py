"""The WebNN conformance cases (shipped in dmlshim/conformance/data/) through dmlshim's kernels.

Expected values come from the Web Platform Tests (the file); onnxruntime CPU is a second oracle that checks
the transcription. The four out-of-range cases are found from the data here, independently of the kernels.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.conformance import webnn
from dmlshim.conformance.webnn import (
    CaseResult,
    WebnnCase,
    WebnnCaseError,
    WebnnCasesFileError,
    WebnnTensor,
    build_descriptor,
    compare_exact,
    execute_case,
    load_cases,
    run_all,
    run_case,
    totals,
)
from dmlshim.dml.enums import DataType, OperatorType
from dmlshim.dml.json_form import operator_from_json
from dmlshim.errors import IndexOutOfRangeError
from dmlshim.kernels import IndexMode

from .conftest import REPO, SHARED
from .oracle import ort_node

CASES_FILE = webnn.PACKAGED_CASES

EXPECTED_COUNTS = {"gatherElements": 13, "gatherND": 16, "scatterElements": 26, "scatterND": 23}
"""The file as transcribed (oracles.md section 2); a shrinking file must fail loudly."""

OUT_OF_RANGE = frozenset(
    {
        "gatherElements float32 1D input and int32 out-of-bounds indices",
        "gatherND float32 1D input and 2D out-of-bounds indices",
        "gatherND float32 2D input and 2D out-of-bounds indices",
        "scatterND 2D int8 tensors with index out of bound",
    }
)
"""The cases whose expected values assume WebNN's clamping (oracles.md section 2)."""

ONNX_OPS = {
    "gatherElements": "GatherElements",
    "gatherND": "GatherND",
    "scatterElements": "ScatterElements",
    "scatterND": "ScatterND",
}


@functools.cache
def _cases() -> dict[str, WebnnCase]:
    return {case.name: case for case in load_cases(CASES_FILE)}


CASE_NAMES = list(_cases())


def _case(name: str) -> WebnnCase:
    return _cases()[name]


def _first_out_of_range(case: WebnnCase) -> tuple[int, int] | None:
    """(value, size) of the first out-of-range index in row-major order, by WebNN's rules; None if none."""
    idx = case.indices.array().astype(np.int64)
    if case.op in ("gatherElements", "scatterElements"):
        dims = np.array([case.input.shape[case.axis or 0]])
    else:
        dims = np.array(case.input.shape[: case.indices.shape[-1]])
    cols = idx.reshape(-1, len(dims))
    bad = (cols < -dims) | (cols >= dims)
    if not bad.any():
        return None
    flat = int(np.argmax(bad.reshape(-1)))
    return int(cols.reshape(-1)[flat]), int(dims[flat % len(dims)])


# ---------------------------------------------------------------------------------------------------------
# The file itself


def test_case_counts() -> None:
    cases = load_cases(CASES_FILE)
    by_op = {op: sum(c.op == op for c in cases) for op in EXPECTED_COUNTS}
    assert len(cases) == 78
    assert by_op == EXPECTED_COUNTS
    declared = json.loads(CASES_FILE.read_text(encoding="utf-8"))["counts"]
    assert declared == EXPECTED_COUNTS


def test_out_of_range_cases_are_the_documented_four() -> None:
    found = {name for name, case in _cases().items() if _first_out_of_range(case) is not None}
    assert found == OUT_OF_RANGE


def test_default_path_is_the_shipped_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(webnn.CASES_ENV_VAR, raising=False)
    assert webnn.default_cases_path() == CASES_FILE
    assert CASES_FILE.parent.name == "data" and CASES_FILE.is_relative_to(Path(webnn.__file__).parents[1])
    assert len(load_cases()) == 78


def test_shipped_copies_are_the_same_file() -> None:
    """The package-data copy, conformance/'s copy and (beside a checkout) ../shared's are identical."""
    shipped = CASES_FILE.read_bytes()
    assert (REPO / "conformance" / "webnn_wpt_cases.json").read_bytes() == shipped
    shared = SHARED / "conformance" / "webnn_wpt_cases.json"
    if shared.is_file():
        assert shared.read_bytes() == shipped


# ---------------------------------------------------------------------------------------------------------
# One test per case and mode


@pytest.mark.parametrize("name", CASE_NAMES)
def test_default_mode(name: str) -> None:
    case = _case(name)
    result = run_case(case, IndexMode.ERROR)
    if name not in OUT_OF_RANGE:
        assert result.status == "pass", result.message
        return
    assert result.status == "error"
    assert result.error_type is not None
    with pytest.raises(IndexOutOfRangeError) as info:
        execute_case(case, IndexMode.ERROR)
    first = _first_out_of_range(case)
    assert first is not None
    value, size = first
    message = str(info.value)
    # The error names the case, the offending element's position and value, and the valid range.
    assert name in message
    assert "IndicesTensor[" in message
    assert f"= {value} " in message
    assert f"[{-size}, {size - 1}]" in message
    assert result.message == message


@pytest.mark.parametrize("name", CASE_NAMES)
def test_clamp_mode(name: str) -> None:
    result = run_case(_case(name), IndexMode.CLAMP)
    assert result.status == "pass", result.message
    assert result.duplicate_indices == 0


@pytest.mark.parametrize("name", CASE_NAMES)
def test_descriptor(name: str) -> None:
    """The DML EP's DimensionCount rule, indices in the given type, and a JSON form that reads back."""
    case = _case(name)
    desc = build_descriptor(case)
    tensors = desc.tensors()
    r, q = len(case.input.shape), len(case.indices.shape)
    if case.op == "gatherElements":
        d = r
    elif case.op == "gatherND":
        d = max(r, q, len(case.expected.shape))
    elif case.op == "scatterElements":
        d = max(r, 4)
    else:
        assert case.updates is not None
        d = max(r, q, len(case.updates.shape))
    assert desc.operator_type is case.dml_operator
    assert {t.dimension_count for t in tensors.values()} == {d}
    assert tensors["IndicesTensor"].data_type is DataType[case.indices.data_type.upper()]
    assert tensors["InputTensor"].data_type is DataType[case.input.data_type.upper()]
    assert tensors["OutputTensor"].data_type is DataType[case.expected.data_type.upper()]
    assert math.prod(tensors["OutputTensor"].sizes) == math.prod(case.expected.shape)
    assert tensors["OutputTensor"].sizes[d - len(case.expected.shape) :] == case.expected.shape
    result = run_case(case, IndexMode.CLAMP)
    assert result.descriptor is not None
    assert operator_from_json(result.descriptor) == desc


@pytest.mark.parametrize("name", CASE_NAMES)
def test_onnxruntime_agrees(name: str) -> None:
    """onnxruntime CPU reproduces the expected values (a second oracle checking the transcription).

    On the four out-of-range cases it must refuse instead, as ONNX requires.
    """
    case = _case(name)
    indices = case.indices.array()
    # ONNX has no uint32 index type, and GatherND/ScatterND take int64 indices only.
    if indices.dtype == np.uint32 or case.op in ("gatherND", "scatterND"):
        indices = indices.astype(np.int64)
    inputs: dict[str, np.ndarray | None] = {"data": case.input.array(), "indices": indices}
    if case.updates is not None:
        inputs["updates"] = case.updates.array()
    attrs: dict[str, Any] = (
        {"axis": case.axis or 0} if case.op in ("gatherElements", "scatterElements") else {}
    )
    if name in OUT_OF_RANGE:
        # ONNX makes an out-of-range index an error, and onnxruntime refuses it (oracles.md section 3).
        with pytest.raises(Exception, match=r"Out of range value|invalid ind(ex|ice) found"):
            ort_node(ONNX_OPS[case.op], inputs, attrs, opset=13)
        return
    got = ort_node(ONNX_OPS[case.op], inputs, attrs, opset=13)
    mismatch = compare_exact(np.asarray(got), case.expected.array())
    assert mismatch is None, mismatch


# ---------------------------------------------------------------------------------------------------------
# The headline numbers


def test_run_all_default_mode() -> None:
    results = run_all(IndexMode.ERROR, CASES_FILE)
    assert totals(results) == {"pass": 74, "fail": 0, "error": 4}
    errors = {r.name for r in results if r.status == "error"}
    assert errors == OUT_OF_RANGE
    assert all("is out of range" in r.message for r in results if r.status == "error")


def test_run_all_clamp_mode() -> None:
    results = run_all(IndexMode.CLAMP, CASES_FILE)
    assert totals(results) == {"pass": 78, "fail": 0, "error": 0}
    assert all(isinstance(r, CaseResult) and r.passed for r in results)


# ---------------------------------------------------------------------------------------------------------
# Loader and mapping details


def _tensor(data: list[float], shape: tuple[int, ...], data_type: str) -> WebnnTensor:
    return WebnnTensor(tuple(data), shape, data_type)


def _doc(cases: dict[str, list[dict[str, Any]]], counts: dict[str, int] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"cases": cases}
    if counts is not None:
        doc["counts"] = counts
    return doc


def _ge_case(name: str = "ge", indices: list[int] | None = None, axis: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "op": "gatherElements",
        "name": name,
        "inputs": {
            "input": {"data": [1.0, 2.0, 3.0], "shape": [3], "dataType": "float32"},
            "indices": {"data": indices or [2, 0], "shape": [2], "dataType": "uint32"},
        },
        "options": {} if axis is None else {"axis": axis},
        "expected": {"data": [3.0, 1.0], "shape": [2], "dataType": "float32"},
    }
    return entry


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(WebnnCasesFileError, match="not found") as info:
        load_cases(missing)
    assert str(missing) in str(info.value)


def test_environment_variable_overrides_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(_doc({"gatherElements": [_ge_case()]})), encoding="utf-8")
    monkeypatch.setenv(webnn.CASES_ENV_VAR, str(path))
    assert webnn.default_cases_path() == path
    [result] = run_all(IndexMode.ERROR)
    assert result.status == "pass", result.message


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"nothing": 1}, "'cases'"),
        (_doc({"gather": []}), "unknown op group"),
        (_doc({"gatherElements": [_ge_case()]}, {"gatherElements": 2}), "declares 2, holds 1"),
        (_doc({"gatherElements": [_ge_case(), _ge_case()]}), "repeat"),
        (_doc({"gatherElements": [_ge_case(indices=[-1, 0])]}), "does not fit uint32"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, document: dict[str, Any], fragment: str) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(WebnnCasesFileError, match=fragment):
        load_cases(path)


def test_negative_axis_is_rejected_as_webnn_does() -> None:
    base = _ge_case(axis=-1)
    case = WebnnCase(
        op="gatherElements",
        name="negative axis",
        input=_tensor(base["inputs"]["input"]["data"], (3,), "float32"),
        indices=_tensor([2, 0], (2,), "int32"),
        updates=None,
        axis=-1,
        expected=_tensor([3.0, 1.0], (2,), "float32"),
    )
    with pytest.raises(WebnnCaseError, match="unsigned long"):
        build_descriptor(case)
    result = run_case(case)
    assert result.status == "error"
    assert result.error_type == "WebnnCaseError"
    assert result.descriptor is None


def test_scatter_elements_is_padded_to_four_dimensions() -> None:
    case = WebnnCase(
        op="scatterElements",
        name="1-D scatter",
        input=_tensor([0.0] * 5, (5,), "float16"),
        indices=_tensor([4, -5], (2,), "int64"),
        updates=_tensor([1.0, 2.0], (2,), "float16"),
        axis=None,
        expected=_tensor([2.0, 0.0, 0.0, 0.0, 1.0], (5,), "float16"),
    )
    desc = build_descriptor(case)
    assert desc.operator_type is OperatorType.SCATTER_ELEMENTS
    assert desc.tensors()["InputTensor"].sizes == (1, 1, 1, 5)
    assert desc.tensors()["IndicesTensor"].data_type is DataType.INT64
    assert desc.uints() == {"Axis": 3}
    result = run_case(case)
    assert result.status == "pass", result.message
    assert result.descriptor is not None
    assert result.descriptor["type"] == "DML_OPERATOR_SCATTER"


def test_gather_nd_uses_nd1_with_no_batch_dimensions() -> None:
    case = WebnnCase(
        op="gatherND",
        name="1-D gatherND",
        input=_tensor([10.0, 11.0, 12.0], (3,), "float32"),
        indices=_tensor([2, 0], (2, 1), "uint32"),
        updates=None,
        axis=None,
        expected=_tensor([12.0, 10.0], (2,), "float32"),
    )
    desc = build_descriptor(case)
    assert desc.uints() == {"InputDimensionCount": 1, "IndicesDimensionCount": 2, "BatchDimensionCount": 0}
    assert desc.tensors()["OutputTensor"].sizes == (1, 2)
    assert run_case(case).status == "pass"


def test_a_wrong_expectation_is_a_fail_not_an_error() -> None:
    case = WebnnCase(
        op="gatherElements",
        name="wrong expectation",
        input=_tensor([1.0, 2.0, 3.0], (3,), "float32"),
        indices=_tensor([2, 0], (2,), "int32"),
        updates=None,
        axis=0,
        expected=_tensor([3.0, 2.0], (2,), "float32"),
    )
    result = run_case(case)
    assert result.status == "fail"
    assert "1 of 2 elements differ; first at [1]" in result.message
    assert result.error_type is None


def test_compare_exact_is_bitwise_and_nan_aware() -> None:
    a = np.array([np.nan, 1.0, -0.0], dtype=np.float32)
    assert compare_exact(a, np.array([np.nan, 1.0, -0.0], dtype=np.float32)) is None
    assert compare_exact(a, np.array([np.nan, 1.0, 0.0], dtype=np.float32)) is not None
    assert compare_exact(a, np.array([1.0, 1.0, -0.0], dtype=np.float32)) is not None
    assert compare_exact(a, a.astype(np.float16)) is not None
    ints = np.array([1, 2], dtype=np.int8)
    assert compare_exact(ints, ints.copy()) is None
    assert compare_exact(ints, np.array([1, 3], dtype=np.int8)) is not None
