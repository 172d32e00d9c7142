"""A graph output that is a graph input of sequence type comes back as onnxruntime returns it (a list of
arrays) in every engine, beside a Gather the engines emulate; the partitioned engine's is the caller's own."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.oracle import ort_session

ENGINES = ("partitioned", "customop", "cpu")


def _model() -> bytes:
    seq = helper.make_tensor_sequence_value_info("S", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="gather")],
        "seq_passthrough",
        [seq, helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [seq, helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_ragged_sequence_input_returned_as_an_output(engine: str) -> None:
    model = _model()
    ragged = [np.ones(2, np.float32), np.zeros(3, np.float32)]
    feeds = {"S": ragged, "x": np.arange(8, dtype=np.float32).reshape(4, 2), "i": np.array([0, 3, -1])}
    want_seq, want_y = ort_session(model).run(None, feeds)
    session = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(5):  # past the proved runs too
        got_seq, got_y = session.run(None, feeds)
        assert isinstance(got_seq, list) and len(got_seq) == len(want_seq)
        for got, want in zip(got_seq, want_seq, strict=True):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        assert got_y.tobytes() == want_y.tobytes()
        if engine == "partitioned":
            # dmlshim's own answer is the caller's (the cpu and custom-op engines return what onnxruntime
            # returns, which on 1.24 is the feed's own arrays)
            got_seq[0][0] = 42.0
            assert ragged[0][0] == 1.0
