"""Conformance across the supported onnx/onnxruntime range: cases the installed onnxruntime cannot load get
their own status and never decide the exit code unless they are gather/scatter cases; before onnx 1.23 the
node cases are read from onnx's case folders.

The unloadable models are made so by onnxruntime's own rule (an IR version it does not know), and whether
it loads them is asked of onnxruntime directly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

from dmlshim.cli.main import main
from dmlshim.conformance import backend_suite
from dmlshim.conformance.backend_suite import (
    BackendCase,
    SuiteResult,
    discover_cases,
    min_in_scope_cases,
    ort_cannot_load,
    run_case,
)
from dmlshim.dml.enums import FeatureLevel
from dmlshim.report.conformance_report import render_text


def _case(name: str) -> BackendCase:
    return next(c for c in discover_cases() if c.name == name)


def _unloadable(case: BackendCase, *, op_type: str | None = None) -> BackendCase:
    """The case with an IR version no onnxruntime knows (onnxruntime refuses it on load)."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.ir_version = 99
    return dataclasses.replace(case, model=model, op_type=op_type or case.op_type)


def _ort_refuses(model: onnx.ModelProto) -> str:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    with pytest.raises(Exception) as info:
        onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return str(info.value)


def test_min_in_scope_cases_per_onnx_version() -> None:
    assert min_in_scope_cases("1.20.0") == 23
    assert min_in_scope_cases("1.22.1") == 23
    assert min_in_scope_cases("1.23.2") == 26
    assert min_in_scope_cases("1.24.0rc1") == 26
    assert min_in_scope_cases("2.0.0") == 26


def test_an_in_scope_case_onnxruntime_cannot_load_is_its_own_status() -> None:
    case = _unloadable(_case("test_gather_0"))
    message = _ort_refuses(case.model)
    outcome = run_case(case, FeatureLevel.FL_5_0)
    assert outcome.status == "ort_cannot_load", outcome
    assert outcome.reason.startswith(f"onnxruntime {onnxruntime.__version__} cannot load this model")
    assert message.split(":")[-1].strip() in outcome.reason
    assert ort_cannot_load(_case("test_gather_0").model) is None
    # A gather/scatter case that cannot be loaded is not a pass: the suite cannot vouch for it.
    result = SuiteResult(FeatureLevel.FL_5_0, (outcome,))
    assert not result.passed
    assert result.in_scope_totals == {"dml": 0, "fallback": 0, "fail": 0, "ort_cannot_load": 1}
    assert "1 ort_cannot_load" in render_text(result)


def test_a_failure_onnxruntime_could_load_stays_fail() -> None:
    case = _case("test_gather_0")
    wrong = dataclasses.replace(case, inputs=(case.inputs[0], np.array([0, 1, 99], np.int64)))
    outcome = run_case(wrong, FeatureLevel.FL_5_0)
    assert outcome.status == "fail" and "99" in outcome.reason, outcome


def test_only_gather_scatter_cases_decide_the_exit_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = discover_cases()
    reported = _unloadable(real[0], op_type="TensorScatter")
    assert not reported.in_scope

    monkeypatch.setattr(backend_suite, "discover_cases", lambda min_in_scope=None: (real[0], reported))
    code = main(["conformance", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["cases"][-1]["status"] == "ort_cannot_load"
    assert doc["totals"]["ort_cannot_load"] == 1 and doc["in_scope_totals"]["ort_cannot_load"] == 0

    unloadable = _unloadable(real[0])
    monkeypatch.setattr(backend_suite, "discover_cases", lambda min_in_scope=None: (unloadable, real[1]))
    code = main(["conformance"])
    out = capsys.readouterr().out
    assert code == 1
    line = next(ln for ln in out.splitlines() if ln.startswith(real[0].name))
    assert "ort_cannot_load" in line and "cannot load this model" in line, line


def _write_case_folder(root: Path, case: BackendCase) -> Path:
    """A case folder as onnx before 1.23 ships it: model.onnx and test_data_set_0/{input,output}_N.pb."""
    folder = root / case.name
    data = folder / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(case.model, str(folder / "model.onnx"))
    for stem, arrays in (("input", case.inputs), ("output", case.outputs)):
        for i, array in enumerate(arrays):
            (data / f"{stem}_{i}.pb").write_bytes(numpy_helper.from_array(array).SerializeToString())
    return folder


def test_node_cases_without_a_model_are_read_from_their_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx 1.20-1.22 list node cases with model=None and a model_dir: dmlshim reads the folder itself."""
    real = discover_cases()
    many_inputs = next(c for c in real if len(c.inputs) == 3)  # data, indices, updates: order matters
    chosen = [_case("test_gather_0"), many_inputs]
    listed = [
        SimpleNamespace(
            name=c.name, model=None, data_sets=None, model_dir=str(_write_case_folder(tmp_path, c)),
            rtol=c.rtol, atol=c.atol,
        )
        for c in chosen
    ]  # fmt: skip
    other = _write_case_folder(tmp_path, dataclasses.replace(chosen[0], name="test_relu"))
    relu = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Relu", ["x"], ["y"])], "relu",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        ),
        ir_version=10,
    )  # fmt: skip
    onnx.save(relu, str(other / "model.onnx"))
    listed.append(SimpleNamespace(name="test_relu", model=None, data_sets=None, model_dir=str(other),
                                  rtol=1e-3, atol=1e-7))  # fmt: skip
    monkeypatch.setattr(backend_suite, "_load_node_tests", lambda: tuple(listed))

    found = discover_cases(min_in_scope=2)
    assert [c.name for c in found] == [c.name for c in chosen]  # Gather sorts before the scatter
    by_name = {c.name: c for c in found}
    for want in chosen:
        got = by_name[want.name]
        assert got.model == want.model and (got.op_type, got.opset) == (want.op_type, want.opset)
        assert len(got.inputs) == len(want.inputs) and len(got.outputs) == len(want.outputs)
        for g, w in zip((*got.inputs, *got.outputs), (*want.inputs, *want.outputs), strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
        assert run_case(got, FeatureLevel.FL_5_0).status in ("dml", "fallback")
