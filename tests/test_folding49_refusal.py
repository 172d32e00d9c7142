"""onnxruntime's constant folding of gathers and scatters of constant, out-of-range indices: whichever
onnxruntime runs the test, every engine refuses the model at creation exactly when onnxruntime CPU does
(some releases fail the session there, others skip folding the node and fail its run), with
onnxruntime's class and a message naming the node, op, index, position and valid range; otherwise the
run fails as onnxruntime's does, and in-range constants give onnxruntime's values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.translate import folding_refusal as fr

ENGINES = ["partitioned", "cpu", "customop"]
LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# op: (out-of-range indices, their first bad value, its position, valid range), in-range indices; data [4, 3]
_CASES: dict[str, tuple[list[Any], int, list[int], str, list[Any]]] = {
    "Gather": ([0, 9], 9, [1], "[-4, 3]", [-4, 3]),
    "GatherElements": ([[0, 1, 2], [0, -5, 0]], -5, [1, 1], "[-4, 3]", [[3, -1, 0]]),
    "GatherND": ([[1, 3]], 3, [0, 1], "[-3, 2]", [[-1, -3]]),
    "ScatterElements": ([[6, 0, 0]], 6, [0, 0], "[-4, 3]", [[-1, 0, 1]]),
    "ScatterND": ([[-5]], -5, [0, 0], "[-4, 3]", [[-4]]),
}


def _options(level: Any) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    so.graph_optimization_level = level
    return so


def _model(op: str, idx: list[Any], *, constant_node: bool = False) -> onnx.ModelProto:
    indices = np.array(idx, np.int64)
    inits = [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")]
    nodes = []
    if constant_node:  # the indices as a Constant node's output
        nodes.append(helper.make_node("Constant", [], ["I"], value=numpy_helper.from_array(indices, "I")))
    else:
        inits.append(numpy_helper.from_array(indices, "I"))
    names = ["W", "I"]
    if op.startswith("Scatter"):
        shape = list(indices.shape) if op == "ScatterElements" else [*indices.shape[:-1], 3]
        inits.append(numpy_helper.from_array(np.full(shape, 5, np.float32), "U"))
        names.append("U")
    nodes += [helper.make_node(op, names, ["y"], name="folded"), helper.make_node("Add", ["y", "x"], ["out"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


_FEEDS = {"x": np.array(1.0, np.float32)}


def _ort(data: bytes, level: Any) -> tuple[Any, BaseException | None]:
    try:
        return ort.InferenceSession(data, _options(level), providers=["CPUExecutionProvider"]), None
    except Exception as exc:  # onnxruntime refuses the model at creation
        return None, exc


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("level", list(LEVELS), ids=list(LEVELS))
@pytest.mark.parametrize("op", list(_CASES))
def test_out_of_range_refused_where_onnxruntime_refuses(op: str, level: str, engine: str) -> None:
    idx, bad, position, valid, _ = _CASES[op]
    for constant_node in (False, True):
        data = _model(op, idx, constant_node=constant_node).SerializeToString()
        ref, refused = _ort(data, LEVELS[level])
        if refused is not None:
            with pytest.raises(dmlshim.DmlShimError) as caught:
                dmlshim.InferenceSession(data, _options(LEVELS[level]), engine=engine)
            assert isinstance(caught.value, type(refused))  # onnxruntime's class
            text = str(caught.value)
            for part in ("'folded'", op, f"constant index {bad}", f"I{position}", valid):
                assert part in text, (part, text)
            continue
        session = dmlshim.InferenceSession(data, _options(LEVELS[level]), engine=engine)
        with pytest.raises(Exception, match="'folded'") as theirs:  # the run of that node fails
            ref.run(None, _FEEDS)
        with pytest.raises(dmlshim.DmlShimError) as ours:
            session.run(None, _FEEDS)
        assert isinstance(ours.value, type(theirs.value))  # onnxruntime's class


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("level", list(LEVELS), ids=list(LEVELS))
@pytest.mark.parametrize("op", list(_CASES))
def test_in_range_constants_build_and_match(op: str, level: str, engine: str) -> None:
    data = _model(op, _CASES[op][4]).SerializeToString()
    ref, refused = _ort(data, LEVELS[level])
    assert refused is None
    session = dmlshim.InferenceSession(data, _options(LEVELS[level]), engine=engine)
    np.testing.assert_array_equal(session.run(None, _FEEDS)[0], ref.run(None, _FEEDS)[0])


def test_no_probe_without_an_out_of_range_constant() -> None:
    """The check costs no session for a model without such a node (in range, or indices fed)."""
    before = fr._folding_refuses.cache_info()
    for op in _CASES:
        assert fr.folding_refusal(_model(op, _CASES[op][4]), _options(LEVELS["all"])) is None
    assert fr._folding_refuses.cache_info() == before


def test_not_all_constant_is_left_to_the_run() -> None:
    """Data fed as an input: onnxruntime folds nothing, so nothing is refused at creation."""
    model = _model("Gather", [9])
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]))
    assert fr.folding_refusal(model, None) is None
