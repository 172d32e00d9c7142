"""The model check's arity rule is checked once per (op, inputs, outputs) form, and still finds the one
node of a large graph whose form differs (issue 35, item 3: the chain's 20,000 nodes share one form).
onnxruntime refuses the same model (its own session creation, the authority)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import BadModelError
from dmlshim.model.wellformed import check_well_formed


def _chain(count: int, bad: int | None) -> onnx.ModelProto:
    nodes = []
    for i in range(count):
        inputs = ["x" if i == 0 else f"g{i - 1}", "idx"]
        if i == bad:
            inputs.append("idx")  # Gather takes 2 inputs
        nodes.append(helper.make_node("Gather", inputs, [f"g{i}"], name=f"n{i}", axis=0))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info(f"g{count - 1}", TensorProto.FLOAT, [4, 3])],
        initializer=[numpy_helper.from_array(np.array([3, 1, 0, 2], dtype=np.int64), "idx")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def test_one_node_of_another_arity_is_found_among_many() -> None:
    model = _chain(300, bad=217)
    with pytest.raises(BadModelError) as caught:
        check_well_formed(model, None)
    assert caught.value.node == "n217"
    assert caught.value.value == (3, 1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    with pytest.raises(Exception, match=r"n217|input"):  # onnxruntime refuses the same node
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_a_chain_of_one_form_passes() -> None:
    check_well_formed(_chain(300, bad=None), None)
