"""hostile9: names dmlshim gives the values it adds to a model never take a name the model uses."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.test_hostile8_given_gathers import _agree, _model

vi = helper.make_tensor_value_info


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
def test_an_added_initializer_read_by_a_fold_beside_a_value_named_like_its_copy(engine: str) -> None:
    """onnxruntime folds Relu(w) with the model's own w, not the add_initializer value; dmlshim points
    such a fold at a copy of the model's w named 'w__dmlshim_model_value'. With the model's own value of
    that name (a graph output), the partitioned engine returned the copy of w ([5, 4]) for it instead of
    Neg(x), and the other engines refused the model ('Duplicate definition')."""
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    w = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(5, 4) - 10, "w")
    nodes = [
        helper.make_node("Relu", ["w"], ["rw"], name="relu"),
        helper.make_node("Gather", ["rw", "i"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["x"], ["w__dmlshim_model_value"], name="neg"),
    ]
    model = _model(
        nodes, [vi("i", T.INT64, [2]), vi("x", T.FLOAT, [2])], ["g", "w__dmlshim_model_value"], [w]
    )
    added = ort.OrtValue.ortvalue_from_numpy(np.full((5, 4), 3.0, np.float32))
    feeds = {"i": np.array([0, 4]), "x": np.array([1.0, 2.0], np.float32)}

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.add_initializer("w", added)
        return so

    want = ort.InferenceSession(model.SerializeToString(), options(), providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model.SerializeToString(), options(), engine=engine)
    for _ in range(2):
        got, expected = session.run(None, feeds), want.run(None, feeds)
        assert [(a.shape, a.tobytes()) for a in got] == [(b.shape, b.tobytes()) for b in expected]


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
def test_a_sparse_constant_read_directly_by_a_gather(engine: str) -> None:
    """A Constant with a sparse_value read by a Gather as its indices (or data): the partitioned engine
    fetched it as an output of onnxruntime's sessions, which onnxruntime cannot return ('Currently do not
    support dims higher than 2'), and refused every run onnxruntime runs."""
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([3], np.int64), "v"),
        numpy_helper.from_array(np.array([1], np.int64), "p"),
        [2],
    )
    table = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "tv"),
        numpy_helper.from_array(np.array([1, 6], np.int64), "tp"),
        [4, 2],
    )
    nodes = [
        helper.make_node("Constant", [], ["i"], sparse_value=sparse, name="indices"),
        helper.make_node("Constant", [], ["t"], sparse_value=table, name="table"),
        helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="gather"),
        helper.make_node("Gather", ["t", "i"], ["h"], axis=0, name="lookup"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = _model(nodes, [vi("x", T.FLOAT, ["N", 4])], ["y", "h"])
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    _agree(model, [{"x": x}] * 4 + [{"x": x[:3]}, {"x": x[:4]}], engine=engine)
