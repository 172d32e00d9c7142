"""``dmlshim lower MODEL -o OUT.onnx``: the written model passes onnx.checker and, with dmlshim's custom
ops registered, computes what the original model computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("onnxruntime_extensions")

from dmlshim.cli.main import main
from dmlshim.execute.engines.custom_op import session_options_with_custom_ops
from dmlshim.execute.lowering.lower import CUSTOM_DOMAIN
from tests.oracle import ort_session
from tests.test_session_models import assert_bitwise

MODELS = Path(__file__).resolve().parents[1] / "onnx_models"


def custom_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for node in graph.node:
        if node.domain == CUSTOM_DOMAIN:
            found.append(node)
        for attr in node.attribute:
            if attr.HasField("g"):
                found.extend(custom_nodes(attr.g))
    return found


def run_lowered(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = session_options_with_custom_ops()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return list(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds))


def sample(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS / f"{name}.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_lower_loop_model_checks_and_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lowered.onnx"
    assert main(["lower", str(MODELS / "loop_scatternd.onnx"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 of 3 gather/scatter nodes lowered" in text and "loop/body/scatter_row" in text
    lowered = onnx.load(str(out))
    onnx.checker.check_model(lowered, full_check=True)
    assert {(o.domain, o.version) for o in lowered.opset_import} >= {(CUSTOM_DOMAIN, 1)}
    # float32 data crosses the bridge as numpy arrays, every bit kept (see test_custom_op_bridge.py for
    # tags mode, where the custom op returns positions and onnxruntime moves the floats).
    assert [n.op_type for n in custom_nodes(lowered.graph)] == [
        "DmlGather_float32_int64",
        "DmlGather_int64_int64",
        "DmlScatterND_float32_int64",
    ]
    feeds = sample("loop_scatternd")
    assert_bitwise(run_lowered(out, feeds), ort_session(str(MODELS / "loop_scatternd.onnx")).run(None, feeds))


def test_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lowered.onnx"
    out.write_bytes(b"keep me")
    model = str(MODELS / "embedding_gather.onnx")
    assert main(["lower", model, "-o", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"keep me"
    assert main(["lower", model, "-o", str(out), "--overwrite"]) == 0
    onnx.checker.check_model(onnx.load(str(out)))


def test_input_shape_gives_static_descriptors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(MODELS / "gathernd_dynamic_batch.onnx")
    dynamic, static = tmp_path / "dynamic.onnx", tmp_path / "static.onnx"
    assert main(["lower", model, "-o", str(dynamic)]) == 0
    assert "[translate] translated at run time" in capsys.readouterr().out
    feeds = sample("gathernd_dynamic_batch")
    shapes = [f"{k}={','.join(map(str, v.shape))}" for k, v in feeds.items()]
    args = ["lower", model, "-o", str(static), "-l", "4_1"]
    for s in shapes:
        args += ["--input-shape", s]
    assert main(args) == 0
    assert "[descriptor] DML_OPERATOR_GATHER_ND" in capsys.readouterr().out
    want = ort_session(model).run(None, feeds)
    for path in (dynamic, static):
        onnx.checker.check_model(onnx.load(str(path)))
        assert_bitwise(run_lowered(path, feeds), want)


def test_bad_model_and_bad_input_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    assert main(["lower", str(bad), "-o", str(tmp_path / "o.onnx")]) == 2
    model = str(MODELS / "gathernd_dynamic_batch.onnx")
    assert main(["lower", model, "-o", str(tmp_path / "o.onnx"), "--input-shape", "nope=1"]) == 2
    assert "not a graph input" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


def test_the_lowered_check_follows_onnxruntime(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """onnx.checker's finding on a lowered model onnxruntime loads is a warning; one onnxruntime refuses
    is an error naming both."""
    from onnx import TensorProto, helper

    from dmlshim.errors import BadModelError
    from dmlshim.execute.lowering.file import check_lowered

    def model(op: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            [helper.make_node(op, ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],  # no shape: onnx.checker objects
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)

    out = tmp_path / "out.onnx"
    with caplog.at_level("WARNING"):
        check_lowered(model("Relu"), out)
    assert "Field 'shape' of 'type' is required but missing" in caplog.text
    assert "onnxruntime loads the lowered model" in caplog.text
    with pytest.raises(BadModelError, match=r"onnxruntime cannot load the lowered model: .*onnx\.checker"):
        check_lowered(model("NoSuchOperator"), out)
