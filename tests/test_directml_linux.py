"""Real DirectML on Linux (``dmlshim directml setup``): the stack's check, the directml engine through the
Windows host, onnxruntime-directml's refusals, and inspect's verdict against what really happens.

Tests marked ``real`` run DirectML 1.15.4 itself (under Wine, vkd3d, lavapipe) and are skipped, with the
reason, when the stack is not set up; expected values come from onnxruntime CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.directml.setup import Setup, pe_file_version
from dmlshim.directml.stack import load_stack, stack_available
from dmlshim.errors import BadModelError, EngineUnavailableError
from dmlshim.translate.ep_refusals import session_refusals
from tests.oracle import IR_VERSION, make_node_model, ort_run

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "onnx_models"


def _why_absent() -> str:
    states = [s for s in Setup().check() if not s.done]
    return (
        "real DirectML stack not set up (`dmlshim directml setup --check`: missing "
        + ", ".join(s.name for s in states)
        + ")"
    )


real = pytest.mark.skipif(not stack_available(), reason=_why_absent() if not stack_available() else "")


def test_check_reports_every_missing_piece_and_fails(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "directml", "setup", "--check", "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["complete"] is False
    names = [p["name"] for p in doc["pieces"]]
    assert names == [name for name, _ in Setup.STEPS]
    missing = {p["name"] for p in doc["pieces"] if not p["in_place"]}
    assert {"mesa", "wine_dlls", "node", "wheel", "prefix", "verify"} <= missing


@pytest.mark.parametrize("place", ["after", "before"])
def test_quiet_is_taken_after_the_action_as_after_every_command(tmp_path: Path, place: str) -> None:
    action = ["setup", "--check", "--dir", str(tmp_path)]
    args = [*action, "-q"] if place == "after" else ["-q", *action]
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "directml", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stderr  # incomplete: not a usage error (2)
    assert "unrecognized" not in done.stderr


def test_missing_stack_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailableError, match=r"dmlshim directml setup"):
        load_stack(tmp_path)


def _reshape_model(allowzero: int) -> onnx.ModelProto:
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, 1, -1])
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=allowzero, name="view")
    graph = helper.make_graph(
        [node],
        "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return model


def test_refusal_table_names_the_reshape_of_the_readme_model() -> None:
    found = session_refusals(onnx.load(str(MODELS / "tiny_decoder_step.onnx"), load_external_data=False))
    assert [(name, r.code) for name, r in found] == [("node_view_5", "EP_REFUSES_RESHAPE_ALLOWZERO")]
    assert session_refusals(_reshape_model(0)) == ()
    empty = onnx.load(str(MODELS / "ecosystem/hw_scatternd_empty_index.onnx"), load_external_data=False)
    assert [(n, r.code, r.when) for n, r in session_refusals(empty)] == [
        ("scatter_nd_whole", "EP_CRASHES_SCATTERND_EMPTY_INDEX_TUPLE", "run")
    ]
    assert [r.code for _, r in session_refusals(_reshape_model(1))] == ["EP_REFUSES_RESHAPE_ALLOWZERO"]


@real
def test_versions_are_read_from_the_dlls() -> None:
    stack = load_stack()
    assert stack.versions["directml"].startswith("1.15.")
    assert pe_file_version(stack.dml_dir / "DirectML.dll") == stack.versions["directml_wheel"]
    assert float(stack.versions["mesa"].split(".")[0]) >= 25


@real
def test_gather_elements_with_negative_index_is_bit_equal_to_onnxruntime_cpu() -> None:
    data = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    indices = np.array([[0, -1, 5], [2, -6, 3], [1, 1, -2], [4, 0, -3]], dtype=np.int64)
    model = make_node_model("GatherElements", {"data": data, "indices": indices}, {"axis": 1})
    sess = InferenceSession(model, engine="directml")
    got = sess.run(None, {"data": data, "indices": indices})
    want = ort_run(model, {"data": data, "indices": indices})
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])
    record = sess.last_run_record
    assert record is not None and dict(record.device)["directml"].startswith("1.15.")
    assert "lavapipe" in dict(record.device)["vulkan"]


@real
def test_scatter_nd_int32_is_bit_equal_to_onnxruntime_cpu() -> None:
    data = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    indices = np.array([[1, 2], [0, 0]], dtype=np.int64)
    updates = np.array([[100, 101, 102, 103], [-1, -2, -3, -4]], dtype=np.int32)
    feeds = {"data": data, "indices": indices, "updates": updates}
    model = make_node_model("ScatterND", feeds)
    got = InferenceSession(model, engine="directml").run(None, feeds)
    assert np.array_equal(got[0], ort_run(model, feeds)[0])


@real
def test_reshape_allowzero_with_minus_one_is_refused_as_the_table_says() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ok = InferenceSession(_reshape_model(0), engine="directml").run(None, {"x": x})
    assert np.array_equal(ok[0], ort_run(_reshape_model(0), {"x": x})[0])
    with pytest.raises(BadModelError) as err:
        InferenceSession(_reshape_model(1), engine="directml")
    assert "80070057" in str(err.value)
    assert type(err.value.__cause__).__name__ == "RuntimeException"


@real
def test_readme_model_is_refused_by_onnxruntime_directml() -> None:
    with pytest.raises(BadModelError, match="80070057"):
        InferenceSession(str(MODELS / "tiny_decoder_step.onnx"), engine="directml")


@real
def test_bad_feed_gets_onnxruntime_message_and_class() -> None:
    data = np.ones((2, 3), dtype=np.float32)
    indices = np.zeros((2, 1), dtype=np.int64)
    model = make_node_model("GatherElements", {"data": data, "indices": indices}, {"axis": 1})
    sess = InferenceSession(model, engine="directml")
    with pytest.raises(Exception) as err:
        sess.run(None, {"data": data, "indices": indices.astype(np.int32)})
    assert "InvalidArgument" in type(err.value).__name__ or any(
        c.__name__ == "InvalidArgument" for c in type(err.value).__mro__
    )


@real
def test_run_command_names_directml_and_the_cpu_nodes(tmp_path: Path) -> None:
    model = MODELS / "scatter_add_histogram.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "run", str(model), "--inputs", str(model.with_suffix(".npz")),
         "--engine", "directml", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    device = doc["record"]["device"]
    assert device["directml"].startswith("1.15.") and "vkd3d" in device["d3d12"]
    # onnxruntime's DirectML provider leaves ScatterElements with reduction='add' to its CPU provider.
    assert device["nodes_on_cpu"] == "node_scatter_add"
    assert [n["ort_placement"] for n in doc["record"]["nodes"]] == ["CPUExecutionProvider"]
