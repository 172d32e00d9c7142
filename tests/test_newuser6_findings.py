"""Findings of a new user following README.md (newuser6).

1. ``dmlshim validate`` on the README's own model (``tiny_decoder_step.onnx``) said MATCH with only
   ``ORT_DML_EP_RUNS_ON_CPU`` warnings, while ``dmlshim inspect`` of the same model says
   "onnxruntime-directml today: NO": on real DirectML its session fails on ``node_view_5`` (Reshape with
   ``allowzero=1`` and a -1, ``docs/directml-linux.md``). validate now warns ``ORT_DML_EP_REFUSES_MODEL``,
   once per refused form, naming the node.
2. ``dmlshim inspect`` of a file ``dmlshim lower`` wrote ended with the generic "register the library"
   hint, while run and validate say how to run a lowered file; inspect now says the same.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from dmlshim.cli.main import main
from dmlshim.validate import validate_model
from tests.oracle import IR_VERSION

MODELS = Path(__file__).resolve().parent.parent / "onnx_models"


def _gather_after_view(allowzero: int) -> onnx.ModelProto:
    """``view(-1, 4)`` (as torch.export writes it: ``allowzero=1``) feeding a Gather of rows."""
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["v"], allowzero=allowzero, name="node_view"),
            helper.make_node("Gather", ["v", "idx"], ["y"], axis=0, name="node_rows"),
        ],
        "view_gather",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


FEEDS = {"x": np.arange(16, dtype=np.float32).reshape(2, 2, 4), "idx": np.array([3, 0, 2], dtype=np.int64)}


@pytest.mark.parametrize("allowzero", [1, 0])
def test_validate_warns_when_onnxruntime_directml_refuses_the_model(allowzero: int) -> None:
    model = _gather_after_view(allowzero)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    (want,) = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, FEEDS
    )
    report = validate_model(model, inputs=FEEDS)
    assert report.match
    np.testing.assert_array_equal(report.outputs[0].dmlshim, want)
    refused = [w for w in report.warnings if w.code == "ORT_DML_EP_REFUSES_MODEL"]
    if allowzero:
        (w,) = refused
        assert w.node == "node_view"
        assert "EP_REFUSES_RESHAPE_ALLOWZERO" in w.message and "allowzero=1" in w.message
        assert w.to_json()["code"] == "ORT_DML_EP_REFUSES_MODEL"
    else:  # allowzero=0: the same node runs on real DirectML (docs/directml-linux.md)
        assert refused == []


def test_readme_model_validate_agrees_with_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(MODELS / "tiny_decoder_step.onnx")
    assert main(["inspect", model]) == 0
    out, _ = capsys.readouterr()
    assert "onnxruntime-directml today: NO" in out and "node_view_5" in out
    assert main(["validate", model, "--inputs", str(MODELS / "tiny_decoder_step.npz"), "-q"]) == 0
    out, _ = capsys.readouterr()
    assert "ORT_DML_EP_REFUSES_MODEL node_view_5:" in out


def test_inspect_of_a_lowered_file_says_how_to_run_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lowered = tmp_path / "topk.lowered.onnx"
    assert main(["lower", str(MODELS / "topk_gather.onnx"), "-o", str(lowered), "-q"]) == 0
    capsys.readouterr()
    main(["inspect", str(lowered)])
    out, _ = capsys.readouterr()
    (nxt,) = [ln for ln in out.splitlines() if ln.startswith("Next:")]
    assert "it looks like a model `dmlshim lower` wrote: run the source model with --engine customop" in nxt
    assert "register_custom_ops_library" not in nxt


def test_export_text_lines_up_and_names_the_linux_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator column was as wide as each name, so the iteration notes of a Loop's body nodes
    started at different columns; and the closing hint named only dxdispatch.exe on Windows, while the
    README's Linux path is ``compare --run-directml``."""
    out_dir = tmp_path / "exp"
    assert main(["export", str(MODELS / "loop_scatternd.onnx"), "-o", str(out_dir), "-q"]) == 0
    out, _ = capsys.readouterr()
    rows = [ln for ln in out.splitlines() if "(iteration " in ln]
    assert len(rows) == 3  # the body's two Gathers and its ScatterND, each at iteration 0
    assert len({ln.index("(iteration ") for ln in rows}) == 1
    assert f"dmlshim compare {out_dir} --run-directml" in out
    assert sorted(p.name for p in out_dir.iterdir() if p.is_dir()) == sorted(ln.split()[0] for ln in rows)


def test_a_warning_of_one_of_several_models_names_the_model(caplog: pytest.LogCaptureFixture) -> None:
    """``dmlshim validate onnx_models/ecosystem`` printed "input 'idx': 6 scatter indices but only 5
    distinct values in range: repeats" among 52 models, naming none: which model, and what to do?"""
    eco = MODELS / "ecosystem"
    models = [str(eco / "tfl_scatters.onnx"), str(eco / "pd_along_axis.onnx")]
    with caplog.at_level(logging.WARNING):
        assert main(["validate", *models, "-q"]) == 0
    repeats = [r.getMessage() for r in caplog.records if "so some repeat" in r.getMessage()]
    # each model has one generated index input with more positions than values in range
    assert [m.split(": input ")[0] for m in repeats] == models
    assert all("--inputs chooses the values" in m for m in repeats)


def test_a_jobs_worker_logs_warnings_as_the_parent_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``--jobs 2`` the same models printed none of the warnings ``--jobs 1`` printed (onnx.checker's
    findings, repeated generated indices): a spawned worker has no log handler, and dmlshim's logger has a
    NullHandler. The worker now sets up the parent's log output (checked here in-process: no worker)."""
    from dmlshim.cli import validate_many
    from dmlshim.cli.main import _OnceFilter, _PrintableFormatter

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a freshly spawned process
    monkeypatch.setattr(root, "level", logging.WARNING)
    monkeypatch.setattr(validate_many.signal, "signal", lambda *_: None)
    monkeypatch.setattr(validate_many.portable, "unblock_sigint", lambda: None)
    validate_many._worker_start(logging.INFO)
    (handler,) = root.handlers
    assert root.level == logging.INFO
    assert isinstance(handler.formatter, _PrintableFormatter)
    assert any(isinstance(f, _OnceFilter) for f in handler.filters)


def test_compare_before_any_directml_output_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the README's ``dmlshim export``, ``dmlshim compare DIR`` on Linux listed each node as missing
    with "run dxdispatch.exe" only; the Linux way (``--run-directml``) is now named once."""
    out_dir = tmp_path / "exp"
    assert main(["export", str(MODELS / "topk_gather.onnx"), "-o", str(out_dir), "-q"]) == 0
    capsys.readouterr()
    assert main(["compare", str(out_dir)]) == 1  # nothing to compare yet
    out, _ = capsys.readouterr()
    assert "0 match, 0 mismatch, 1 missing of 1 node(s)" in out
    assert f"dmlshim compare {out_dir} --run-directml" in out.splitlines()[-1]
