"""onnxruntime checks no shape against a graph input declared rank 0: a feed of any rank runs, and the
nodes after it compute at the fed rank. The custom-op engine lowered such a model for a rank-0 value and
restored a scalar, so a Gather on an index fed as ``[1]`` (as a sample file of spox_gather_scalar_index
held it) came back as [4] where onnxruntime gives [4, 1]. Expected values: onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime_extensions")

from dmlshim import InferenceSession


def _model() -> bytes:
    nodes = [
        helper.make_node("Gather", ["x", "k"], ["col"], axis=1),
        helper.make_node("Gather", ["col", "k"], ["one"], axis=0),
        helper.make_node("Neg", ["k"], ["nk"]),
        helper.make_node("Gather", ["x", "nk"], ["row"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "rank0_index",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
            helper.make_tensor_value_info("k", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("col", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("one", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("row", TensorProto.FLOAT, [7]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize(
    "k",
    [np.array(3), np.array([3]), np.array([[1]]), np.array([3, 1])],
    ids=["rank0", "rank1", "rank2", "two"],
)
def test_customop_follows_the_fed_rank_of_a_rank0_input(k: np.ndarray) -> None:
    model = _model()
    feeds = {"x": np.arange(28, dtype=np.float32).reshape(4, 7), "k": k.astype(np.int64)}
    want = _ort(model, feeds)
    sess = InferenceSession(model, engine="customop")
    for _ in range(2):  # the second run reuses what the first built
        got = sess.run(None, feeds)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
        assert sess.last_run_record.path == "custom-op session"
    # and back to a scalar feed after a ranked one
    scalar = {"x": feeds["x"], "k": np.array(2, np.int64)}
    for g, w in zip(sess.run(None, scalar), _ort(model, scalar), strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_default_engine_agrees_on_a_ranked_feed() -> None:
    model = _model()
    feeds = {"x": np.arange(28, dtype=np.float32).reshape(4, 7), "k": np.array([[3, 0]], np.int64)}
    for g, w in zip(InferenceSession(model).run(None, feeds), _ort(model, feeds), strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
