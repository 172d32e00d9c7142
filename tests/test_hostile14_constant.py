"""Hostile runs against the constant negative index rule (a Gather's constant indices given at feature
level 3_0 and later, where DirectML wraps a negative signed index as ONNX does): below 3_0, and when a
feed overrides the initializer (even with the same value), the node is computed on every run, never
taken from onnxruntime, on the steady lane too.

Expected values come from onnxruntime's own CPU session of the unmodified model (one intra-op thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.oracle import same_bits
from tests.test_lean_check import _ort

GIVEN = "output_from_onnxruntime"


def _model(op: str) -> Any:
    """Relu -> op(constant indices -1, overridable: also a graph input) -> Neg."""
    indices = [[-1], [-1]] if op == "GatherElements" else [-1]
    shape = [2, 1]
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node(op, ["a", "last"], ["g"], axis=1),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constant_negative",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("last", TensorProto.INT64, list(np.shape(indices))),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [helper.make_tensor("last", TensorProto.INT64, list(np.shape(indices)), np.ravel(indices).tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.fixture(scope="module", params=["Gather", "GatherElements"])
def models(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    model = _model(request.param)
    return request.param, model.SerializeToString(), _ort(model)


def _runs(session: dmlshim.InferenceSession, reference: Any, op: str, fed: np.ndarray | None) -> list[bool]:
    given = []
    rng = np.random.default_rng(3)
    for run in range(7):
        feeds = {"x": rng.standard_normal((2, 5)).astype(np.float32)}
        if fed is not None:
            feeds["last"] = fed.copy()
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        node = next(n for n in session.last_run_record.nodes if n.op_type == op)
        assert node.negative_indices or node.status == "fallback", run  # GatherElements needs 2_1
        given.append(GIVEN in {key for key, _ in node.notes})
    return given


@pytest.mark.parametrize("level", ["1_0", "2_1"])
def test_below_3_0_computed_on_every_run(models: tuple[str, Any, Any], level: str) -> None:
    op, model, reference = models
    session = dmlshim.InferenceSession(model, feature_level=level)
    assert not any(_runs(session, reference, op, None))


def test_the_same_value_fed_is_computed(models: tuple[str, Any, Any]) -> None:
    """A feed equal to the initializer is not the model's constant (the caller may change it)."""
    op, model, reference = models
    session = dmlshim.InferenceSession(model)
    fed = np.full((2, 1) if op == "GatherElements" else (1,), -1, dtype=np.int64)
    assert not any(_runs(session, reference, op, fed))
    assert _runs(session, reference, op, None)[-1]  # not fed: the constant, given after its proved runs
