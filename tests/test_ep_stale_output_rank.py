"""onnxruntime-directml's failure on a graph output declared with a stale rank (the held-out GATConv
legacy export's ``/c1/Identity_3``; docs/directml-linux.md), narrowed to three nodes.

The model: ``x`` (no declared shape) -> Relu -> ``h`` -> If(rank of h == 1) whose else branch passes ``h``
through ``inner`` (Identity or Relu) to a branch output declared ``[d]`` (rank 1); fed a ``[4, 2]`` value the
else branch runs with a rank-2 value. onnxruntime CPU runs it (warning that the output shape differs from the
declared one); real DirectML fails at the first run in ``inner``. No load-time row predicts it: whether
the ranks differ is known only at run time; ``directml sweep`` predicts it from onnxruntime CPU's run
(``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE``, ``tests/test_ep_declared_values55.py``). Tests run
DirectML itself and are skipped without the stack; expected values come from onnxruntime CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.errors import DmlShimError
from tests.oracle import IR_VERSION, ort_run

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)

FEEDS = {"x": np.arange(8, dtype=np.float32).reshape(4, 2) - 3}


def _model(inner: str, declared: list[int | str] | None, x_dims: list[int | str] | None) -> onnx.ModelProto:
    then_branch = helper.make_graph(
        [helper.make_node("Squeeze", ["h"], ["t_out"])], "then", [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)],
    )  # fmt: skip
    else_branch = helper.make_graph(
        [helper.make_node(inner, ["h"], ["e_out"], name="inner")], "else", [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, declared)],
    )  # fmt: skip
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Shape", ["h"], ["s"]),
        helper.make_node("Size", ["s"], ["r"]),
        helper.make_node("Equal", ["r", "one"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch, name="if"),
    ]
    graph = helper.make_graph(
        nodes, "stale_rank", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.INT64, [], [1])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _directml(model: onnx.ModelProto) -> np.ndarray:
    session = InferenceSession(model.SerializeToString(), engine="directml")
    return np.asarray(session.run(None, FEEDS)[0])


@real
@pytest.mark.parametrize("inner", ["Identity", "Relu"])
def test_stale_declared_rank_of_an_unranked_value_fails_on_directml(inner: str) -> None:
    model = _model(inner, ["d"], None)
    assert ort_run(model, FEEDS)[0].shape == (4, 2)  # onnxruntime CPU runs it
    with pytest.raises(DmlShimError, match=r"MLOperatorAuthorImpl\.cpp\(2844\).*80070057"):
        _directml(model)


@real
@pytest.mark.parametrize(
    ("declared", "x_dims"),
    [(["a", "b"], None), (None, None), (["d"], ["n", 2])],
    ids=["right_rank", "no_declared_shape", "input_rank_known"],
)
def test_right_or_absent_declaration_or_a_known_rank_runs(
    declared: list[int | str] | None, x_dims: list[int | str] | None
) -> None:
    model = _model("Identity", declared, x_dims)
    np.testing.assert_array_equal(_directml(model), ort_run(model, FEEDS)[0])
