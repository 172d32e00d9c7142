"""validate runs at the optimization level onnxruntime runs the model at: ``disabled`` by default, ``all``
(onnxruntime's default) when onnxruntime itself fails the model with optimizations disabled; the report
says why; ``--optimization-level`` still decides. The model is a real legacy export (torch 2.13.0's
TorchScript exporter, tests/models/export_legacy_if.py) whose If branches declare stale shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from dmlshim.cli.main import main
from dmlshim.validate import validate_model

MODELS = Path(__file__).resolve().parent / "models"
STALE_IF = MODELS / "torchscript_stale_if.onnx"
STALE_IF_NPZ = MODELS / "torchscript_stale_if.npz"
SIDES = ("dmlshim", "reference", "whole_model")


def _ort(level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    so.log_severity_level = 4
    return ort.InferenceSession(str(STALE_IF), so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    return dict(np.load(STALE_IF_NPZ))


def test_onnxruntime_fails_it_disabled_and_runs_it_at_its_default(feeds: dict[str, np.ndarray]) -> None:
    with pytest.raises(Exception, match="If_1"):
        _ort(ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)
    (y,) = _ort(ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feeds)
    assert y.shape == (4, 3)


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
def test_validate_runs_it_at_onnxruntimes_default_level(engine: str, feeds: dict[str, np.ndarray]) -> None:
    (expected,) = _ort(ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feeds)
    report = validate_model(str(STALE_IF), inputs=feeds, engine=engine)
    assert report.match and report.exact
    assert dict(report.optimization_levels) == dict.fromkeys(SIDES, "all")
    reason = report.optimization_level_reason or ""
    assert "graph optimizations disabled" in reason and "If_1" in reason and "default level, all" in reason
    (out,) = report.outputs
    assert out.dmlshim.tobytes() == expected.tobytes() and out.dmlshim.shape == expected.shape


def test_cli_says_why_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(STALE_IF), "--inputs", str(STALE_IF_NPZ)]) == 0
    text = capsys.readouterr().out
    assert "onnxruntime graph optimization: dmlshim all, reference all, whole_model all" in text
    assert "  why: onnxruntime fails this model with graph optimizations disabled (If node '/If_1'" in text
    assert main(["validate", str(STALE_IF), "--inputs", str(STALE_IF_NPZ), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimization_levels"] == dict.fromkeys(SIDES, "all")
    assert doc["optimization_level_reason"].startswith("onnxruntime fails this model")
    assert doc["match"] and doc["exact"]


def test_a_named_level_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["validate", str(STALE_IF), "--inputs", str(STALE_IF_NPZ), "--optimization-level"]
    code = main([*args, "disabled"])
    err = capsys.readouterr().err
    assert code == 2
    assert "If_1" in err and "pass --optimization-level all" in err
    code = main([*args, "basic", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["optimization_levels"] == dict.fromkeys(SIDES, "basic")
    assert doc["optimization_level_reason"] is None


def test_a_model_that_runs_disabled_stays_disabled(capsys: pytest.CaptureFixture[str]) -> None:
    model = Path(__file__).resolve().parents[1] / "onnx_models" / "scatter_elements_scatter.onnx"
    assert main(["validate", str(model), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimization_levels"] == dict.fromkeys(SIDES, "disabled")
    assert doc["optimization_level_reason"] is None
