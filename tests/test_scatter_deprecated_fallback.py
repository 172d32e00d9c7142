"""Deprecated Scatter: from opset 11 on onnxruntime refuses the model, and so does dmlshim (exit 2 /
BadModelError naming the node); at opset 10 it runs. ``for_onnxruntime`` (still used for models dmlshim
builds itself) rewrites it as the equivalent ScatterElements without touching the caller's model.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.errors import BadModelError
from dmlshim.execute.plan.fallback import REASON_SCATTER_AS_SCATTER_ELEMENTS, for_onnxruntime
from tests.oracle import IR_VERSION, make_node_model, ort_node, ort_run

ENGINES = ["partitioned"]
if importlib.util.find_spec("onnxruntime_extensions") is not None:
    ENGINES.append("customop")

RNG = np.random.default_rng(1503)
RANK9 = (2, 1, 3, 1, 2, 1, 2, 1, 2)


def _rank9() -> dict[str, np.ndarray]:
    idx_shape = (1, *RANK9[1:])
    return {
        "data": RNG.standard_normal(RANK9).astype(np.float32),
        "indices": RNG.integers(-2, 2, idx_shape).astype(np.int64),
        "updates": RNG.standard_normal(idx_shape).astype(np.float32),
    }


CASES: dict[str, tuple[dict[str, np.ndarray], dict[str, int], str, str]] = {
    # name: (inputs, attributes, feature level, the translation's reason for the fallback)
    "empty_indices": (
        {
            "data": RNG.standard_normal((3, 4)).astype(np.float32),
            "indices": np.zeros((0, 4), dtype=np.int64),
            "updates": np.zeros((0, 4), dtype=np.float32),
        },
        {"axis": 0},
        "5_0",
        "EMPTY_TENSOR",
    ),
    "rank9": (_rank9(), {"axis": 0}, "5_0", "RANK_TOO_LARGE"),
    "int32_at_1_0": (
        {
            "data": RNG.integers(-9, 9, (3, 3)).astype(np.int32),
            "indices": np.array([[1, -3, 2]], dtype=np.int64),
            "updates": np.array([[7, 8, 9]], dtype=np.int32),
        },
        {"axis": 1},
        "1_0",
        "DATA_TYPE_UNSUPPORTED",
    ),
}


def _assert_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", list(CASES))
def test_scatter_11_is_refused_as_onnxruntime_refuses_it(case: str, engine: str) -> None:
    inputs, attrs, level, _ = CASES[case]
    model = make_node_model("Scatter", inputs, attrs, 11)
    with pytest.raises(Exception, match="deprecated"):
        ort_run(model, inputs)  # onnxruntime refuses the model
    with pytest.raises(BadModelError) as info:
        InferenceSession(model, feature_level=level, engine=engine)
    assert info.value.op_type == "Scatter" and info.value.node == "Scatter_0"
    assert "opset 11" in str(info.value) and "ScatterElements" in str(info.value)


def _if_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An If whose then-branch holds a Scatter-11 (control flow runs in onnxruntime as a whole)."""
    branch_out = [helper.make_tensor_value_info("branch_y", TensorProto.FLOAT, [3, 4])]
    then_branch = helper.make_graph(
        [helper.make_node("Scatter", ["x", "idx", "upd"], ["branch_y"], name="scatter_then", axis=1)],
        "then",
        [],
        branch_out,
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["branch_y"], name="keep")], "else", [], branch_out
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "If", ["cond"], ["y"], name="choose", then_branch=then_branch, else_branch=else_branch
            )
        ],
        "if_scatter",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        initializer=[
            numpy_helper.from_array(np.array([[3, 0], [1, -4], [0, 2]], dtype=np.int64), "idx"),
            numpy_helper.from_array(RNG.standard_normal((3, 2)).astype(np.float32), "upd"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=IR_VERSION)
    return model, {"cond": np.array(True), "x": RNG.standard_normal((3, 4)).astype(np.float32)}


def test_scatter_11_inside_an_if_body_is_refused_naming_the_node() -> None:
    model, _ = _if_model()
    with pytest.raises(BadModelError) as info:
        InferenceSession(model)
    assert info.value.node == "choose/then_branch/scatter_then" and info.value.op_type == "Scatter"


def test_opset_10_scatter_is_left_alone() -> None:
    inputs, attrs, _, _ = CASES["empty_indices"]
    model = make_node_model("Scatter", inputs, attrs, 10)
    assert for_onnxruntime(model) is model
    session = InferenceSession(model)
    (got,) = session.run(None, inputs)
    _assert_bits(got, ort_node("Scatter", inputs, attrs, 10))
    record = session.last_run_record
    assert record is not None
    assert REASON_SCATTER_AS_SCATTER_ELEMENTS not in [c for c, _ in record.nodes[0].reasons]


def test_the_rewrite_does_not_touch_the_callers_model() -> None:
    model, _ = _if_model()
    before = model.SerializeToString()
    rewritten = for_onnxruntime(model)
    assert model.SerializeToString() == before
    scatter = next(a.g for a in rewritten.graph.node[0].attribute if a.name == "then_branch").node[0]
    assert scatter.op_type == "ScatterElements" and scatter.name == "scatter_then"
    assert [a.name for a in scatter.attribute] == ["axis"]
