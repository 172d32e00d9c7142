"""Operators onnxruntime defines in the ONNX domain that onnx does not: onnxruntime-genai's model builder
writes ``SimplifiedLayerNormalization`` (RMSNorm) with domain ``""``, and onnxruntime runs it (its own
schema, registered in the ONNX domain). dmlshim took such a node for a custom op: inspect listed it under
"Nodes inspect cannot place" and said run and validate refuse the model, and a session given
``SessionOptions`` used them as they are (as for a custom-op library), reading the model whole and building
every partition at once: on a 540 MB genai Llama export, 35 s and 4 GB where onnxruntime needs 2-12 s and
0.8 GB. The outputs compared here come from onnxruntime CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from dmlshim.cli.main import main
from dmlshim.model.ort_errors import unknown_operators
from dmlshim.ort.session_options import sharable_options
from tests.oracle import IR_VERSION

FEEDS = {"ids": np.array([[1, 9, 0], [4, 4, 7]], np.int64), "pick": np.array([2, 0], np.int64)}


def _model() -> onnx.ModelProto:
    """embedding Gather -> SimplifiedLayerNormalization (domain "") -> Gather, as the genai builder lays
    out a decoder's first layer."""
    rng = np.random.default_rng(50)
    table = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "table")
    scale = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "scale")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed", axis=0),
        helper.make_node(
            "SimplifiedLayerNormalization", ["emb", "scale"], ["normed"], name="norm", axis=-1, epsilon=1e-5
        ),
        helper.make_node("Gather", ["normed", "pick"], ["out"], name="pick_rows", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "rmsnorm",
        [
            helper.make_tensor_value_info("ids", T.INT64, [2, 3]),
            helper.make_tensor_value_info("pick", T.INT64, [2]),
        ],
        [helper.make_tensor_value_info("out", T.FLOAT, None)],
        [table, scale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "rmsnorm.onnx"
    onnx.save(_model(), path)
    return path


def _reference(path: Path) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, FEEDS)


def test_onnx_does_not_know_it_onnxruntime_does(model_path: Path) -> None:
    assert not onnx.defs.has("SimplifiedLayerNormalization", "")
    assert _reference(model_path)[0].shape == (2, 2, 8)
    assert unknown_operators(_model()) == []


def test_inspect_places_every_node(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "cannot place" not in out
    assert "register_custom_ops_library" not in out
    assert main(["inspect", str(model_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not doc.get("unknown_operators")
    assert [(n["name"], n["status"]) for n in doc["nodes"]] == [("embed", "dml"), ("pick_rows", "dml")]


def test_session_options_are_shared_and_outputs_match(model_path: Path) -> None:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    # a copy of the options means all they mean: the lean build (weights left in the file) applies
    assert sharable_options(so, _model(), []) == {}
    want = _reference(model_path)
    for engine in ("partitioned", "customop"):
        sess = dmlshim.InferenceSession(str(model_path), so, engine=engine)
        got = sess.run(None, FEEDS)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w), engine
        assert {n.name: n.placement for n in sess.last_run_record.nodes} == {
            "embed": "dml",
            "pick_rows": "dml",
        }
