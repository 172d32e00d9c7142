"""Issue 37 (held-out models): a decoder exported with torch.export holds the refused Reshape
(``allowzero=1`` with a -1) in every attention block, ten times in a two-layer Phi-3 step. inspect's
verdict and the directml engine's error name the form once, with the count and the first node names.

The model here has the same structure (five such Reshapes in a chain); that onnxruntime CPU runs it, as
the refusal's wording says, is checked against onnxruntime itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from dmlshim.cli.main import main
from dmlshim.translate.ep_refusals import describe_refusals, session_refusals
from tests.oracle import IR_VERSION

CODE = "EP_REFUSES_RESHAPE_ALLOWZERO"


def _views(count: int) -> onnx.ModelProto:
    """``count`` Reshapes, each ``view(2, -1)`` or ``view(-1, 2)`` with ``allowzero=1``, as torch.export
    writes them."""
    shapes = [
        helper.make_tensor("to_rows", TensorProto.INT64, [2], [2, -1]),
        helper.make_tensor("to_cols", TensorProto.INT64, [2], [-1, 2]),
    ]
    nodes = []
    value = "x"
    for i in range(count):
        out = "y" if i == count - 1 else f"v{i}"
        shape = "to_rows" if i % 2 == 0 else "to_cols"
        nodes.append(helper.make_node("Reshape", [value, shape], [out], allowzero=1, name=f"node_view_{i}"))
        value = out
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        shapes,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_onnxruntime_cpu_runs_the_refused_form() -> None:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(_views(5).SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = sess.run(None, {"x": x})
    assert y.shape == (2, 4)
    np.testing.assert_array_equal(y, x)


def test_one_phrase_per_form_with_count_and_first_names() -> None:
    found = [(name, r.code, r.form) for name, r in session_refusals(_views(5))]
    assert [(n, c) for n, c, _ in found] == [(f"node_view_{i}", CODE) for i in range(5)]
    text = describe_refusals(found)
    assert text.startswith("5 nodes ('node_view_0', 'node_view_1', 'node_view_2' and 2 more): Reshape")
    assert text.count("Reshape with allowzero=1") == 1
    assert text.endswith(f"({CODE})")


def test_two_and_one_nodes_are_named_without_more() -> None:
    two = [(name, r.code, r.form) for name, r in session_refusals(_views(2))]
    assert describe_refusals(two).startswith("2 nodes ('node_view_0', 'node_view_1'): ")
    one = [(name, r.code, r.form) for name, r in session_refusals(_views(1))]
    assert describe_refusals(one).startswith("node 'node_view_0': ")


def test_inspect_verdict_names_the_form_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "views.onnx"
    onnx.save(_views(5), path)
    main(["inspect", str(path)])
    out, _ = capsys.readouterr()
    (line,) = [ln for ln in out.splitlines() if "onnxruntime-directml today" in ln]
    assert "NO (onnxruntime-directml fails on the model (5 nodes ('node_view_0'" in line
    assert line.count("allowzero=1") == 1
    assert "which onnxruntime CPU runs; fails at session creation or first run" in line
