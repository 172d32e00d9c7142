"""``inspect --inputs X.npz`` / ``--input-shape``: every top-level gather/scatter node is translated at the
shapes a run gives, and the report says which verdicts came from them. The model is the pattern of a
TensorFlow batch gather converted to GatherND (batch_dims=1) whose index depth is computed from the
params' rank (``Max(rank - 2, 1)``, which ONNX's data propagation does not follow): static inference
leaves the index depth, hence the output rank, unknown. Expected shapes come from onnxruntime CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

from dmlshim.cli.main import main
from dmlshim.execute.weights.model_source import load_model
from dmlshim.inputs import generate

NODE = "BatchGatherND/GatherNd"


def _depth_model() -> onnx.ModelProto:
    def const(name: str, value: object) -> onnx.TensorProto:
        return nh.from_array(np.array(value, dtype=np.int64), name)

    nodes = [
        oh.make_node("Shape", ["params"], ["params_shape"]),
        oh.make_node("Size", ["params_shape"], ["rank"]),
        oh.make_node("Sub", ["rank", "two"], ["rank_less_two"]),
        oh.make_node("Max", ["rank_less_two", "one"], ["depth"]),
        oh.make_node("Unsqueeze", ["depth", "axis0"], ["depth_1d"]),
        oh.make_node("Shape", ["ids"], ["ids_shape"]),
        oh.make_node("Concat", ["ids_shape", "depth_1d"], ["indices_shape"], axis=0),
        oh.make_node("Reshape", ["ids", "indices_shape"], ["indices"]),
        oh.make_node("GatherND", ["params", "indices"], ["out"], batch_dims=1, name=NODE),
    ]
    graph = oh.make_graph(
        nodes,
        "tf_batch_gather",
        [
            oh.make_tensor_value_info("params", T.FLOAT, ["batch", 5, 3]),
            oh.make_tensor_value_info("ids", T.INT64, ["batch", "n"]),
        ],
        [oh.make_tensor_value_info("out", T.FLOAT, ["batch", "n", 3])],
        [const("two", 2), const("one", 1), const("axis0", [0])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tf_batch_gather.onnx"
    onnx.save(_depth_model(), str(path))
    return path


def _ort_shape(path: Path, feeds: dict[str, np.ndarray]) -> list[int]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    (out,) = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    return list(out.shape)


def _inspect(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["inspect", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_static_inspect_cannot_tell(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _inspect([str(model)], capsys)
    (node,) = doc["nodes"]
    assert code == 1 and node["status"] == "error"
    assert [r["code"] for r in node["reasons"]] == ["SHAPE_UNKNOWN"]
    assert "run" not in doc and "shapes" not in node


def test_inputs_give_the_runs_shapes(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = np.arange(30, dtype=np.float32).reshape(2, 5, 3)
    feeds = {"params": params, "ids": np.array([[4, 0, 2], [1, 1, 3]])}
    npz = tmp_path / "in.npz"
    np.savez(npz, **feeds)
    code, doc = _inspect([str(model), "--inputs", str(npz)], capsys)
    (node,) = doc["nodes"]
    assert code == 0 and node["status"] == "dml" and node["shapes"] == "run"
    assert node["operator"]["type"] == "DML_OPERATOR_GATHER_ND1"
    assert node["plan"]["output"]["sizes"] == _ort_shape(model, feeds) == [2, 3, 3]
    assert doc["run"] == {"source": str(npz), "nodes_at_run_shapes": [NODE], "error": None}
    assert main(["inspect", str(model), "--inputs", str(npz)]) == 0
    text = capsys.readouterr().out
    assert "Shapes: 1 of 1 gather/scatter nodes translated at the shapes of a run on onnxruntime CPU" in text
    assert "SHAPES" in text and "GATHER_ND1" in text


def test_input_shape_runs_on_generated_inputs(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _inspect([str(model), "--input-shape", "batch=4", "--input-shape", "n=6"], capsys)
    (node,) = doc["nodes"]
    generated = generate(load_model(str(model)), input_shapes={"batch": (4,), "n": (6,)}, seed=0)
    assert code == 0 and node["shapes"] == "run"
    assert node["plan"]["output"]["sizes"] == _ort_shape(model, dict(generated.feeds)) == [4, 6, 3]
    assert doc["run"]["source"].startswith("generated (seed 0): params [4,5,3], ids [4,6]")


def test_a_run_onnxruntime_refuses_leaves_the_static_verdict(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    npz = tmp_path / "bad.npz"
    np.savez(npz, params=np.zeros((2, 5, 3), np.float32), ids=np.array([[9, 0], [0, 0]]))  # 9 >= 5
    code = main(["inspect", str(model), "--inputs", str(npz), "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 1 and doc["nodes"][0]["status"] == "error" and doc["nodes"][0]["shapes"] == "static"
    assert doc["run"]["error"] and "verdicts come from static shapes" in captured.err


def test_generated_inputs_onnxruntime_refuses_leave_the_static_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A constant index past the data's dimension: onnxruntime fails the run, so no shape comes from it;
    inspect still answers from static shapes (and a size the model does not have is still a usage error)."""
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["data"], ["r"]),
            oh.make_node("Gather", ["r", "k"], ["out"], axis=0, name="pick"),
        ],
        "g",
        [oh.make_tensor_value_info("data", T.FLOAT, ["n", 4])],
        [oh.make_tensor_value_info("out", T.FLOAT, [4])],
        [nh.from_array(np.array(50, dtype=np.int64), "k")],
    )
    path = tmp_path / "pick.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10), str(path))
    code = main(["inspect", str(path), "--input-shape", "n=3", "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    # the translation is static; the constant index 50 on an axis of 3 is flagged (onnxruntime's refusal)
    node = doc["nodes"][0]
    assert code == 1 and node["status"] == "error" and node["shapes"] == "static"
    assert node["operator"]["type"] == "DML_OPERATOR_GATHER"
    assert node["reasons"][0]["code"] == "INDEX_OUT_OF_RANGE" and node["reasons"][0]["value"] == 50
    assert "of size 3" in node["reasons"][0]["message"]
    assert doc["run"]["error"] and "verdicts come from static shapes" in captured.err
    assert main(["inspect", str(path), "--input-shape", "m=3"]) == 2
