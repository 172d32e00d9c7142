"""Engine build without serializing weights: shape inference on a weightless copy, large initializers
handed to onnxruntime as arrays (placeholders in the serialized models)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.weights.shared import SHARE_MIN_BYTES, SharedWeights, light_copy, placeholder
from dmlshim.model.weightless import without_weights
from dmlshim.translate import infer_shapes
from tests.oracle import IR_VERSION, ort_run

ROWS, COLS = 512, 64  # 128 KiB of float32: above SHARE_MIN_BYTES


def _model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Gather rows of a large table -> MatMul by a large weight -> Tanh -> Gather columns -> Relu."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    weight = (rng.standard_normal((COLS, COLS)) * 0.1).astype(np.float32)
    weight = np.tile(weight, (1, 8))  # (64, 512): 128 KiB
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
        helper.make_node("MatMul", ["rows", "weight"], ["m"], name="matmul"),
        helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
        helper.make_node("Gather", ["t", "cols"], ["g"], name="pick", axis=1),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "weights",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("cols", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    feeds = {"ids": np.array([5, 0, 511, 7], dtype=np.int64), "cols": np.array([0, 511, 100], dtype=np.int64)}
    return model, feeds


def test_weightless_copy_infers_the_same_shapes_without_the_bytes() -> None:
    model, _ = _model()
    light = without_weights(model)
    assert {t.name for t in light.graph.initializer} == set()
    assert {"table", "weight"} <= {v.name for v in light.graph.input}
    assert light.ByteSize() < 4096 < SHARE_MIN_BYTES < model.ByteSize()
    full = {v.name: v.type for v in infer_shapes(model).graph.value_info}
    lean = {v.name: v.type for v in infer_shapes(light).graph.value_info}
    assert full == lean and "m" in full
    assert model.graph.initializer[0].name == "table", "the original model is left as it was"


def test_placeholders_carry_no_bytes_and_onnxruntime_takes_the_arrays() -> None:
    model, feeds = _model()
    shared = SharedWeights({t.name: t for t in model.graph.initializer})
    assert shared.names == {"table", "weight"}
    stub = placeholder(model.graph.initializer[0])
    assert stub.data_location == TensorProto.EXTERNAL and list(stub.dims) == [ROWS, COLS]
    light = light_copy(model, shared)
    assert light.ByteSize() < 4096
    options = ort.SessionOptions()
    shared.attach(options, light)
    session = ort.InferenceSession(light.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_engine_with_shared_weights_matches_onnxruntime() -> None:
    model, feeds = _model()
    session = dmlshim.InferenceSession(model)
    for _ in range(2):
        (got,) = session.run(None, feeds)
        np.testing.assert_array_equal(got, ort_run(model, feeds)[0])
    assert [n.placement for n in session.last_run_record.nodes] == ["dml", "dml"]
    # A second batch size: symbolic shapes translate again, same answer.
    ids = np.array([1, 2], dtype=np.int64)
    (got,) = session.run(None, {**feeds, "ids": ids})
    np.testing.assert_array_equal(got, ort_run(model, {**feeds, "ids": ids})[0])


def test_engine_with_caller_options_serializes_the_weights() -> None:
    model, feeds = _model()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = dmlshim.InferenceSession(model, options)
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])
