"""ORT-format models (onnxruntime's flatbuffer ``.ort`` form) load and run as onnxruntime runs them.

Found in the fourth held-out round (client libraries): ``onnxruntime.tools.convert_onnx_models_to_ort``
writes ``.ort`` files that onnxruntime loads from a path or from bytes; dmlshim refused them ("not a
readable ONNX model"). Reduced here to plain onnxruntime API use: onnxruntime itself saves the ``.ort``
file (``optimized_model_filepath`` ending in ``.ort``). Expected values: onnxruntime's CPU session of the
same ``.ort`` file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadModelError


def _conv_gather_model() -> onnx.ModelProto:
    """Conv -> channel Gather -> ScatterND (a row write) -> Conv -> Sigmoid: ORT's full optimization
    rewrites the convolutions (NCHWc), which rounds differently from the graph as saved."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((1, 16, 3, 3)).astype(np.float32), "w2")
    perm = numpy_helper.from_array(np.array([3, 1, 0, 2, 7, 5, 6, 4, 8, 9, 15, 14, 13, 12, 11, 10]), "perm")
    idx = numpy_helper.from_array(np.array([[0, 1], [0, 4]], dtype=np.int64), "idx")
    upd = numpy_helper.from_array(np.full((2, 64, 64), 0.5, np.float32), "upd")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gather", ["r", "perm"], ["g"], axis=1),
        helper.make_node("ScatterND", ["g", "idx", "upd"], ["s"]),
        helper.make_node("Conv", ["s", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ortfmt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 64])],
        [w1, b1, w2, perm, idx, upd],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.fixture(scope="module")
def ort_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ortfmt")
    src = folder / "model.onnx"
    onnx.save(_conv_gather_model(), str(src))
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(folder / "model.ort")  # onnxruntime writes its ORT format by the ending
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return folder / "model.ort"


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)}


def _expected(source: object) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"]).run(None, _feeds())[0]


@pytest.mark.parametrize("providers", [None, ["DmlExecutionProvider", "CPUExecutionProvider"]])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_ort_format_model_runs_as_onnxruntime_runs_it(
    ort_file: Path, providers: list[str] | None, as_bytes: bool
) -> None:
    source = ort_file.read_bytes() if as_bytes else str(ort_file)
    expected = _expected(source)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = dmlshim.InferenceSession(source, so, providers=providers)
    got = session.run(None, _feeds())[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    assert [i.name for i in session.get_inputs()] == ["x"]


def test_ort_format_any_optimization_level_is_the_saved_graph(ort_file: Path) -> None:
    """onnxruntime runs an ORT-format model's graph as saved at every level; so does dmlshim."""
    expected = _expected(str(ort_file))
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = level
        got = dmlshim.InferenceSession(str(ort_file), so).run(None, _feeds())[0]
        assert got.tobytes() == expected.tobytes()
        assert so.graph_optimization_level == level  # the caller's object is not changed


def test_ort_format_emulates_the_gather_and_scatter(ort_file: Path) -> None:
    session = dmlshim.InferenceSession(str(ort_file), providers=["DmlExecutionProvider"])
    session.run(None, _feeds())
    record = session.last_run_record
    assert record is not None
    ran = {n.op_type: n.placement for n in record.nodes}
    assert ran.get("Gather") == "dml" and ran.get("ScatterND") == "dml"


def test_broken_ort_format_file_is_refused_with_onnxruntimes_class(tmp_path: Path) -> None:
    bad = tmp_path / "broken.ort"
    bad.write_bytes(b"\x10\x00\x00\x00ORTM" + b"\x00" * 40)
    with pytest.raises(Exception) as real:
        ort.InferenceSession(str(bad), providers=["CPUExecutionProvider"])
    with pytest.raises(BadModelError) as ours:
        dmlshim.InferenceSession(str(bad))
    assert isinstance(ours.value, type(real.value))
    assert "ORT-format" in str(ours.value) and "broken.ort" in str(ours.value)


def test_onnx_bytes_named_ort_by_config_only(ort_file: Path) -> None:
    """``session.load_model_format=ONNX`` makes onnxruntime parse even a ``.ort`` path as ONNX (and fail):
    dmlshim refuses it too, with onnxruntime's class."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.load_model_format", "ONNX")
    with pytest.raises(Exception) as real:
        ort.InferenceSession(str(ort_file), so, providers=["CPUExecutionProvider"])
    so2 = ort.SessionOptions()
    so2.add_session_config_entry("session.load_model_format", "ONNX")
    with pytest.raises(BadModelError) as ours:
        dmlshim.InferenceSession(str(ort_file), so2)
    assert isinstance(ours.value, type(real.value))


def test_ort_format_session_logs_no_checker_warning(ort_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime saves the ONNX form with an empty graph name, as its own metadata says: no warning."""
    with caplog.at_level("WARNING"):
        session = dmlshim.InferenceSession(str(ort_file))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    real = ort.InferenceSession(str(ort_file), providers=["CPUExecutionProvider"]).get_modelmeta()
    assert session.get_modelmeta().graph_name == real.graph_name
