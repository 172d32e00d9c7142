"""A lean check whose list of extra outputs is the full check's own runs that very session (issue 36,
run cost): nothing more is built, the steady lane answers, the outputs stay onnxruntime's bit for bit,
and an index out of range is still refused. Expected values come from onnxruntime's CPU session."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import same_bits

WEIGHT = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)


def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "idx"], ["y"], axis=0)],
        "one_gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 16])],
        [numpy_helper.from_array(WEIGHT, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def test_lean_check_on_the_full_session_answers_with_onnxruntimes_bits() -> None:
    model = _model()
    session = dmlshim.InferenceSession(model)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for run in range(10):
        feeds = {"idx": rng.integers(0, 64, (2, 6))}
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
    check = session._engine._check
    assert session._engine._steady is not None and check.lean_runs > 0
    assert check._lean_session.session is check._session  # no second session built
    bad = {"idx": np.array([[0, 1, 2, 3, 4, 64]] * 2)}
    with pytest.raises(dmlshim.IndexOutOfRangeError):
        session.run(None, bad)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses it too, in its own words
        reference.run(None, bad)
    negative = {"idx": np.array([[0, -1, 2, 3, 4, 5]] * 2)}
    assert same_bits(session.run(None, negative), reference.run(None, negative))
    feeds = {"idx": rng.integers(0, 64, (2, 6))}
    assert same_bits(session.run(None, feeds), reference.run(None, feeds))
