"""``SessionOptions.add_initializer`` on a weight some nodes read through a node onnxruntime constant-folds
(issue 35, part 5): onnxruntime folds ``Relu(w)`` with the model's own ``w`` (it applies added values after
optimizing), while a node reading ``w`` directly gets the added value; with optimizations disabled every
node reads the added value. Every engine, compared with onnxruntime CPU under the same options."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import IR_VERSION

MODEL_W = np.array([10, 20, 30, 40, 50], np.float32)
ADDED = np.array([-1, -2, -3, -4, -5], np.float32)


def _model(kind: str) -> onnx.ModelProto:
    relu = helper.make_node("Relu", ["w"], ["r"])
    if kind == "relu_then_gather":
        nodes = [relu, helper.make_node("Gather", ["r", "i"], ["y"])]
    elif kind == "both":  # one Gather through the folded Relu, one reading w itself
        nodes = [
            relu,
            helper.make_node("Gather", ["r", "i"], ["g"]),
            helper.make_node("Gather", ["w", "i"], ["h"]),
            helper.make_node("Add", ["g", "h"], ["y"]),
        ]
    elif kind == "chain":  # Relu then Mul by w itself: the whole chain is folded
        nodes = [
            relu,
            helper.make_node("Mul", ["r", "w"], ["m"]),
            helper.make_node("GatherElements", ["m", "i"], ["y"], axis=0),
        ]
    else:  # gather first: nothing folded
        nodes = [helper.make_node("Gather", ["w", "i"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "added",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(MODEL_W, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _options(level: ort.GraphOptimizationLevel, value: ort.OrtValue) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    so.add_initializer("w", value)
    return so


ENGINES = {
    "partitioned": {},
    "cpu": {"providers": ["CPUExecutionProvider"]},
    "customop": {"engine": "customop"},
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize(
    "level", [ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL]
)
@pytest.mark.parametrize("kind", ["relu_then_gather", "both", "chain", "gather_then_relu"])
def test_added_values_reach_the_nodes_onnxruntime_gives_them(
    kind: str, level: ort.GraphOptimizationLevel, engine: str
) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = _model(kind)
    value = ort.OrtValue.ortvalue_from_numpy(ADDED)
    feeds = {"i": np.array([2, 3, 4], np.int64)}
    theirs = ort.InferenceSession(
        model.SerializeToString(), _options(level, value), providers=["CPUExecutionProvider"]
    ).run(None, feeds)[0]
    ours = dmlshim.InferenceSession(model, _options(level, value), **ENGINES[engine]).run(None, feeds)[0]
    assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), (ours, theirs)


def test_the_folded_relu_reads_the_models_value_in_onnxruntime() -> None:
    """The fact followed: at the default level onnxruntime's Relu(w) is the model's w, not the added."""
    model = _model("relu_then_gather")
    value = ort.OrtValue.ortvalue_from_numpy(ADDED)
    feeds = {"i": np.array([2, 3, 4], np.int64)}
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    got = ort.InferenceSession(
        model.SerializeToString(), _options(level, value), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_array_equal(got.run(None, feeds)[0], [30, 40, 50])
