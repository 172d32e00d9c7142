"""A size-making node in an If branch whose size input is computed inside the branch from outer-scope
constants, and whose other inputs are outer-scope constants too (``Range(z, Mul(a, b), one)`` with ``a``,
``b``, ``z`` and ``one`` main-graph initializers): the folded-sizes pass and the outer constants together
size it, so it counts against the memory limit. Under the limit the model's values are onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.oracle import IR_VERSION

ENGINES = ["partitioned", "cpu", "customop"]


def _model(a: int, b: int) -> onnx.ModelProto:
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("a", a), ("b", b), ("z", 0), ("one", 1))
    ]
    then = helper.make_graph(
        [
            helper.make_node("Mul", ["a", "b"], ["n"], name="count"),
            helper.make_node("Range", ["z", "n", "one"], ["r"], name="make"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("r", T.INT64, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["r2"], value=numpy_helper.from_array(np.array([7], np.int64)))],
        "else",
        [],
        [helper.make_tensor_value_info("r2", T.INT64, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("If", ["c"], ["ranged"], name="branch", then_branch=then, else_branch=other),
            helper.make_node("Gather", ["ranged", "i"], ["out"], name="pick", axis=0),
        ],
        "g",
        [helper.make_tensor_value_info("c", T.BOOL, []), helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("out", T.INT64, None)],
        consts,
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("engine", ENGINES)
def test_range_of_outer_constants_folded_in_a_branch_is_refused(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "100000000")
    with pytest.raises(dmlshim.TooLargeError) as caught:
        dmlshim.InferenceSession(_model(50_000, 1_000).SerializeToString(), engine=engine)
    message = str(caught.value)
    assert "'r'" in message and "[50000000]" in message and "400000000 bytes" in message


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("take", [True, False])
def test_under_the_limit_the_values_are_onnxruntimes(
    monkeypatch: pytest.MonkeyPatch, engine: str, take: bool
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "100000000")
    payload = _model(50, 10).SerializeToString()
    feeds = {"c": np.array(take), "i": np.array([0, -1] if not take else [3, -2], np.int64)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dmlshim.InferenceSession(payload, engine=engine).run(None, feeds)
    assert [w.tolist() for w in want] == [g.tolist() for g in got]
    assert want[0].tolist() == ([3, 498] if take else [7, 7])
