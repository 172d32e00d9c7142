"""inspect reads a model with a node of an operator onnxruntime does not know (a custom op whose library
is not registered): it reports the gather/scatter nodes it can, names the unknown nodes, and reports a
gather/scatter whose shapes need the custom op's outputs as unknown-shaped. onnxruntime refuses such a
model at session creation; run and validate keep refusing it, naming the op and how to register it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.cli.main import main
from tests.oracle import IR_VERSION


def _model(path: Path, *, feeding_a_gather: bool) -> Path:
    nodes = [
        helper.make_node("Gather", ["data", "ids"], ["g"], name="gather_rows", axis=0),
        helper.make_node("Foo", ["g"], ["f"], name="custom_after", domain="com.example"),
    ]
    outputs = [helper.make_tensor_value_info("f", T.FLOAT, None)]
    if feeding_a_gather:
        nodes += [
            helper.make_node("Bar", ["ids"], ["bar_ids"], name="custom_ids", domain="com.example"),
            helper.make_node("Gather", ["data", "bar_ids"], ["g2"], name="gather_custom_ids", axis=0),
        ]
        outputs.append(helper.make_tensor_value_info("g2", T.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "custom",
        [
            helper.make_tensor_value_info("data", T.FLOAT, [5, 4]),
            helper.make_tensor_value_info("ids", T.INT64, [3]),
        ],
        outputs,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)],
        ir_version=IR_VERSION,
    )
    onnx.save(model, path)
    return path


def test_onnxruntime_refuses_the_model_without_the_library(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", feeding_a_gather=False)
    with pytest.raises(Exception, match="Foo"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_inspect_reports_the_gathers_and_names_the_custom_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "m.onnx", feeding_a_gather=False)
    assert main(["inspect", str(path)]) == 0  # the one Gather translates; the custom op is beside it
    out = capsys.readouterr().out
    assert "Gather/scatter nodes translated to DirectML: 1 of 1" in out
    listed = out.split("Nodes inspect cannot place")[1].splitlines()
    assert listed[2].split() == ["custom_after", "Foo", "com.example"]
    assert "register_custom_ops_library" in out.split("Next:")[1]

    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unknown_operators"] == [{"node": "custom_after", "op_type": "Foo", "domain": "com.example"}]
    assert [(n["name"], n["status"]) for n in doc["nodes"]] == [("gather_rows", "dml")]


def test_a_gather_fed_by_the_custom_op_is_unknown_shaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "m.onnx", feeding_a_gather=True)
    assert main(["inspect", str(path), "--json"]) == 1  # a node not translated
    doc = json.loads(capsys.readouterr().out)
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert by_name["gather_rows"]["status"] == "dml"
    fed = by_name["gather_custom_ids"]
    assert fed["status"] == "error"
    (reason,) = fed["reasons"]
    assert reason["code"] == "SHAPE_UNKNOWN"
    assert "'custom_ids', of operator com.example.Bar" in reason["message"]
    assert "register_custom_ops_library" in reason["message"]
    assert {u["node"] for u in doc["unknown_operators"]} == {"custom_after", "custom_ids"}


@pytest.mark.parametrize("command", ["run", "validate"])
def test_run_and_validate_refuse_naming_the_op_and_how_to_register(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = _model(tmp_path / "m.onnx", feeding_a_gather=False)
    feeds = tmp_path / "in.npz"
    np.savez(feeds, data=np.zeros((5, 4), np.float32), ids=np.array([0, 1, 2], np.int64))
    assert main([command, str(path), "--inputs", str(feeds)]) == 2
    err = capsys.readouterr().err
    assert "node 'custom_after', op com.example.Foo" in err
    assert "SessionOptions.register_custom_ops_library(PATH)" in err
    assert "Traceback" not in err


def test_inspect_of_a_folder_points_to_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a folder: inspect reports on one model" in err and f"dmlshim validate {tmp_path}" in err
