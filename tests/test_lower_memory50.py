"""``dmlshim lower`` with no memory limit peaked at 3-8 times the model's size (a 307 MB embedding table:
985 MB with external data, 1.29 GB inline, 2.48 GB as a Constant node): it read the model whole, parsed it,
lowered a copy and serialized it. It now reads the model without its weights and copies them from the
source's files to the lowered files a chunk at a time. Sizes here are real (a 200 MB table); the values
the lowered file computes are onnxruntime's for the source."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.safety_helpers import run_child

pytest.importorskip("onnxruntime_extensions")

ROWS, COLS = 200_000, 256  # 204.8 MB of float32
MB = 1 << 20


def _save(path: Path, form: str, shared: bool) -> None:
    """A Gather of a table (rows i * 1e-3 + column), then MatMul; with ``shared`` the table also feeds a
    ReduceSum (kept beside the lowering's reshaped alias of it)."""
    table = (np.arange(ROWS, dtype=np.float32)[:, None] * 1e-3 + np.arange(COLS, dtype=np.float32)).astype(
        np.float32
    )
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["g"], name="embed", axis=0),
        helper.make_node("MatMul", ["g", "wm"], ["y"], name="mm"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])]
    if shared:
        nodes.append(helper.make_node("ReduceMax", ["emb"], ["top"], name="top", keepdims=0))
        outputs.append(helper.make_tensor_value_info("top", TensorProto.FLOAT, []))
    inits = [numpy_helper.from_array(np.linspace(-1, 1, COLS * 8, dtype=np.float32).reshape(COLS, 8), "wm")]
    if form == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["emb"], value=numpy_helper.from_array(table, "v")))
    else:
        inits.insert(0, numpy_helper.from_array(table, "emb"))
    del table
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        if form == "external":
            onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
        else:
            onnx.save(model, str(path))
    finally:
        os.chdir(here)


@pytest.mark.parametrize(
    ("form", "shared"), [("external", False), ("external", True), ("inline", False), ("constant", False)]
)
def test_lower_peak_stays_below_the_weights(tmp_path: Path, form: str, shared: bool) -> None:
    from dmlshim.execute.engines.custom_op import session_options_with_custom_ops

    source = tmp_path / "src" / "m.onnx"
    source.parent.mkdir()
    _save(source, form, shared)
    out = tmp_path / "out" / "low.onnx"
    out.parent.mkdir()
    result = run_child(["lower", str(source), "-o", str(out), "-q"])
    assert result.returncode == 0, result.stderr
    # the table is 195 MiB: the process (imports included, about 85-120 MB) never holds it
    assert result.peak_rss < 180 * MB, result.peak_rss
    data = out.parent / "low.onnx.data"
    assert data.exists() == (form == "external")
    if form == "external":  # the table once, even when the source table and the lowering's alias both stay
        assert ROWS * COLS * 4 <= data.stat().st_size < 2 * ROWS * COLS * 4
    else:
        assert out.stat().st_size > ROWS * COLS * 4
    feeds = {"ids": np.array([[0, 5, ROWS - 1], [7, 7, 123_456]], np.int64)}
    want = onnxruntime.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feeds)
    so = session_options_with_custom_ops()
    got = onnxruntime.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        assert w.tobytes() == g.tobytes()
