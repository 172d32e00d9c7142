"""Which of onnxruntime's CPU scatters race on duplicate indices with several intra-op threads: dmlshim's
own sessions take one thread only where one does (``dmlshim.execute.plan.sessions.default_options``).

The expectation is asked of the installed onnxruntime itself: its ScatterElements with two threads must
give its one-thread answer on heavily duplicated indices, run after run, or dmlshim must not let a
ScatterElements session keep two threads.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from dmlshim.execute.plan.sessions import default_options, has_scatter
from tests.oracle import IR_VERSION

N = 1 << 20


def _model(op: str, **attrs: object) -> onnx.ModelProto:
    shape = [N] if op == "ScatterElements" else [1024, N // 1024]
    idx_shape = [N] if op == "ScatterElements" else [N // 1024, 1]
    upd_shape = [N] if op == "ScatterElements" else [N // 1024, N // 1024]
    graph = helper.make_graph(
        [helper.make_node(op, ["d", "i", "u"], ["o"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, idx_shape),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, upd_shape),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_onnxruntime_scatter_elements_is_deterministic_with_two_threads() -> None:
    model = _model("ScatterElements", axis=0).SerializeToString()
    rng = np.random.default_rng(3)
    feeds = {
        "d": rng.standard_normal(N).astype(np.float32),
        "i": rng.integers(0, 512, N).astype(np.int64),  # every target written ~2000 times
        "u": rng.standard_normal(N).astype(np.float32),
    }
    one, two = ort.SessionOptions(), ort.SessionOptions()
    one.intra_op_num_threads, two.intra_op_num_threads = 1, 2
    expected = ort.InferenceSession(model, one, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    session = ort.InferenceSession(model, two, providers=["CPUExecutionProvider"])
    for _ in range(8):
        np.testing.assert_array_equal(session.run(None, feeds)[0], expected)


def test_one_thread_only_for_scatter_nd() -> None:
    elements = _model("ScatterElements", axis=0).graph
    nd = _model("ScatterND").graph
    assert not has_scatter(elements) and has_scatter(nd)
    assert default_options(nd).intra_op_num_threads == 1
    assert default_options(elements).intra_op_num_threads == ort.SessionOptions().intra_op_num_threads
