"""``--engine`` on validate and conformance, as on run: one option definition, every engine, values
checked against onnxruntime CPU run apart (one intra-op thread)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from dmlshim.cli.main import build_parser, main
from dmlshim.conformance import backend_suite
from dmlshim.conformance.backend_suite import discover_cases
from dmlshim.execute.record import PLACEMENT_CPU, PLACEMENT_DML
from dmlshim.validate import validate_model

from .conftest import REPO

MODELS = REPO / "onnx_models"
SCATTER = MODELS / "scatter_elements_scatter.onnx"
SCATTER_NPZ = MODELS / "scatter_elements_scatter.npz"


def _ort_outputs(model: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _engine_option(command: str) -> argparse.Action:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return next(a for a in sub._actions if "--engine" in a.option_strings)


def test_run_validate_and_conformance_take_the_same_engine_option() -> None:
    actions = [_engine_option(c) for c in ("run", "validate", "conformance")]
    assert {(a.default, a.help, a.metavar) for a in actions} == {(actions[0].default, actions[0].help, "E")}
    assert actions[0].default == "partitioned"
    for name in ("partitioned", "customop", "cpu", "directml"):
        assert name in actions[0].help


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
def test_validate_each_engine_against_onnxruntime(engine: str) -> None:
    feeds = dict(np.load(SCATTER_NPZ))
    expected = _ort_outputs(str(SCATTER), feeds)
    report = validate_model(str(SCATTER), inputs=feeds, engine=engine)
    assert report.match and report.engine == engine
    for out, want in zip(report.outputs, expected, strict=True):
        np.testing.assert_array_equal(out.dmlshim, want)
        assert out.dmlshim.tobytes() == want.tobytes()
    placements = {n.record.placement for n in report.nodes if n.record is not None}
    # the cpu engine runs everything on onnxruntime's CPU provider; the others run the scatter as DirectML
    assert placements == ({PLACEMENT_CPU} if engine == "cpu" else {PLACEMENT_DML})


def test_validate_cli_engine_customop_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(SCATTER), "--inputs", str(SCATTER_NPZ), "--engine", "customop", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["engine"] == "customop"
    assert doc["reference"] == "whole-model-onnxruntime"
    assert doc["runs"] == "engine-and-whole-model"
    assert doc["match"] is True


def test_validate_cli_text_names_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(SCATTER), "--inputs", str(SCATTER_NPZ), "--engine", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert "engine: cpu; reference: onnxruntime running the whole model" in out


@pytest.mark.skipif("DmlExecutionProvider" in ort.get_available_providers(), reason="DirectML is here")
@pytest.mark.parametrize("command", ["validate", "conformance"])
def test_directml_where_unavailable_is_a_clear_usage_error(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_CACHE_DIR", str(tmp_path))  # no real-DirectML stack on Linux either
    args = [command, *([str(SCATTER), "--inputs", str(SCATTER_NPZ)] if command == "validate" else [])]
    code = main([*args, "--engine", "directml"])
    err = capsys.readouterr().err
    assert code == 2
    assert "DmlExecutionProvider is not available" in err


@pytest.mark.parametrize("command", ["validate", "conformance", "run"])
def test_unknown_engine_lists_the_engines(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [command, *([str(SCATTER), "--inputs", str(SCATTER_NPZ)] if command != "conformance" else [])]
    code = main([*args, "--engine", "nope"])
    err = capsys.readouterr().err
    assert code == 2
    assert "unknown engine 'nope'" in err and "customop" in err


def test_conformance_through_the_custom_op_engine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = {"test_scatter_elements_with_negative_indices", "test_gather_elements_0", "test_scatternd"}
    cases = tuple(c for c in discover_cases() if c.name in wanted)
    assert len(cases) == len(wanted)
    monkeypatch.setattr(backend_suite, "discover_cases", lambda min_in_scope=None: cases)
    code = main(["conformance", "--engine", "customop", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["engine"] == "customop"
    # the expected outputs are the ONNX backend suite's own
    assert {c["name"]: c["status"] for c in doc["cases"]} == dict.fromkeys(wanted, "dml")
