"""`validate` says so when every output is empty: MATCH then compares no value (generated inputs whose only
size onnxruntime accepted was 0, as for a fused BERT asked for sequences longer than its position table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

EMPTY_NOTE = "every output is empty (0 elements), so no value was compared"


def _model(folder: Path) -> Path:
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [table],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _validate(model: Path, ids: np.ndarray, folder: Path) -> subprocess.CompletedProcess[str]:
    feeds = folder / "x.npz"
    np.savez(feeds, i=ids)
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", "validate", str(model), "--inputs", str(feeds)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_empty_outputs_are_named_under_the_verdict(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ids = np.zeros(0, np.int64)
    (expected,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"i": ids})
    assert expected.shape == (0, 3)  # onnxruntime's own answer is empty too
    done = _validate(model, ids, tmp_path)
    assert done.returncode == 0, done.stderr
    tail = done.stdout.rstrip().splitlines()[-2:]
    assert tail[0] == "verdict: MATCH - every output agrees with the reference"
    assert tail[1].strip().startswith(EMPTY_NOTE)


def test_outputs_with_values_get_no_such_note(tmp_path: Path) -> None:
    model = _model(tmp_path)
    done = _validate(model, np.array([3, 0], np.int64), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "verdict: MATCH" in done.stdout
    assert EMPTY_NOTE not in done.stdout
