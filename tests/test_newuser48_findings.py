"""A new user's PyTorch export (newuser-48): what dmlshim said about it against what onnxruntime does.

The TorchScript exporter writes ``scatter_reduce(..., reduce="amax")`` at opset 16-17 as a ScatterElements
with ``reduction="max"``, a value ONNX defines only from opset 18; onnxruntime's CPU kernel computes the
maximum anyway, so dmlshim reports a fallback there (not a malformed node the provider rejects) and returns
onnxruntime's values. Expected values come from onnxruntime CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.translate import CPU_PROVIDER, Status, TensorInfo, translate_node

I64 = TensorProto.INT64
F32 = TensorProto.FLOAT


def _scatter_model(op: str, opset: int, reduction: str) -> bytes:
    rank_indices = [2, 2] if op == "ScatterElements" else [2, 1]
    updates = [2, 2] if op == "ScatterElements" else [2, 3]
    node = helper.make_node(op, ["d", "i", "u"], ["y"], name="scatter_0", reduction=reduction)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("d", F32, [3, 3]),
            helper.make_tensor_value_info("i", I64, rank_indices),
            helper.make_tensor_value_info("u", F32, updates),
        ],
        [helper.make_tensor_value_info("y", F32, [3, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _feeds(op: str) -> dict[str, np.ndarray]:
    duplicate = [[0, 1], [0, 1]] if op == "ScatterElements" else [[0], [0]]
    updates = [[5, -1], [2, 7]] if op == "ScatterElements" else [[5, -1, 3], [2, 7, -3]]
    return {
        "d": np.zeros((3, 3), np.float32),
        "i": np.array(duplicate, np.int64),
        "u": np.array(updates, np.float32),
    }


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("opset", [16, 17])
def test_max_min_before_opset_18_fall_back_as_onnxruntime_computes_them(
    op: str, reduction: str, opset: int
) -> None:
    model = _scatter_model(op, opset, reduction)
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    expected = onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(
        None, _feeds(op)
    )[0]
    # onnxruntime reduces (a row the duplicates hit holds their max or min with the data's 0), no last write.
    assert expected[0, 0] == (5.0 if reduction == "max" else 0.0)

    indices = (2, 2) if op == "ScatterElements" else (2, 1)
    updates = (2, 2) if op == "ScatterElements" else (2, 3)
    node = helper.make_node(op, ["data", "indices", "updates"], ["out"], name="s", reduction=reduction)
    t = translate_node(
        node, opset, [TensorInfo((3, 3), F32), TensorInfo(indices, I64), TensorInfo(updates, F32)]
    )
    assert t.status is Status.FALLBACK
    assert t.reasons[0].code == "SCATTER_REDUCTION_UNSUPPORTED"
    assert "opset 18" in t.reasons[0].message and t.reasons[0].value == reduction
    assert t.ort_placement == CPU_PROVIDER  # the provider's support query sends reduction != none to the CPU
    assert "EP_REDUCTION_ON_CPU" in t.reason_codes

    sess = dmlshim.InferenceSession(model, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    got = sess.run(None, _feeds(op))[0]
    assert got.tobytes() == expected.tobytes()
    record = {n.name: n for n in sess.last_run_record.nodes}
    assert record["scatter_0"].placement == "onnxruntime-cpu"


def test_unknown_reduction_stays_invalid() -> None:
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], reduction="maximum")
    t = translate_node(node, 18, [TensorInfo((3, 3), F32), TensorInfo((2, 2), I64), TensorInfo((2, 2), F32)])
    assert t.status is Status.ERROR and t.reasons[0].code == "ATTRIBUTE_INVALID"


def test_inspect_of_a_max_reduction_at_opset_17_is_a_fallback_not_a_rejection(tmp_path: Path) -> None:
    path = tmp_path / "amax17.onnx"
    path.write_bytes(_scatter_model("ScatterElements", 17, "max"))
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim", "inspect", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # a node that falls back (docs/commands.md)
    assert "EP_REDUCTION_ON_CPU" in proc.stdout and "rejected" not in proc.stdout
    assert "1 fall back to CPU, 0 failed to translate" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["lower", "M.onnx", "-o", "OUT.onnx", "--json"], "dmlshim lower has no --json option"),
        (["replay", "M.json", "--engine", "cpu"], "dmlshim replay has no --engine option"),
    ],
)
def test_a_shared_option_a_command_lacks_is_named_not_misspelt(argv: list[str], hint: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim", *argv], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 2
    assert hint in proc.stdout + proc.stderr
    assert "did you mean" not in proc.stdout + proc.stderr  # lower --json once suggested '--version'


def test_a_declared_output_shape_inference_contradicts_is_reported_as_onnxruntime_merges_it() -> None:
    relu = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [relu],
        "g",
        [helper.make_tensor_value_info("x", F32, [2, 4, 6])],
        [helper.make_tensor_value_info("y", F32, [2, 4, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    theirs = (
        onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"]).get_outputs()[0].shape
    )
    assert theirs == [2, 4, None]  # onnxruntime 1.32: the dimension declaration and inference disagree on
    assert dmlshim.InferenceSession(model).get_outputs()[0].shape == theirs


def test_export_json_carries_its_schema_version_as_the_other_commands(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    model = Path(__file__).resolve().parents[1] / "onnx_models" / "topk_gather.onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim", "export", str(model), "-o", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["model"] == str(model) and doc["directory"] == str(out)
    assert doc["exported"] and all("operator" in e for e in doc["exported"])
