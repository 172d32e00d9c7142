"""What onnxruntime users' programs read and catch, compared call by call with onnxruntime on the same
model and options: each expectation is what onnxruntime itself answers in the same test."""

from __future__ import annotations

import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim


def _model(outputs_declared: bool = True) -> bytes:
    out_shape = ["K", 4] if outputs_declared else None
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["o"], axis=0, name="g"),
            helper.make_node("Relu", ["o"], ["r"], name="relu"),
        ],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["K"]),
        ],
        [
            helper.make_tensor_value_info("o", TensorProto.FLOAT, out_shape),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()


def _options(**overrides: int) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    for name, value in overrides.items():
        so.add_free_dimension_override_by_name(name, value)
    return so


@pytest.mark.parametrize("overrides", [{}, {"K": 3}, {"N": 5, "K": 2}])
@pytest.mark.parametrize("declared", [True, False])
def test_free_dimension_overrides_fix_the_reported_output_shapes(
    overrides: dict[str, int], declared: bool
) -> None:
    model = _model(declared)
    theirs = onnxruntime.InferenceSession(model, _options(**overrides), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(model, _options(**overrides))
    assert [a.shape for a in ours.get_inputs()] == [a.shape for a in theirs.get_inputs()]
    assert [a.shape for a in ours.get_outputs()] == [a.shape for a in theirs.get_outputs()]
    if overrides.get("K") == 3:
        assert [a.shape for a in theirs.get_outputs()] == [[3, 4], [3, 4]]  # the case that was ["K", 4]
    # the model's own declared shapes are left as they were for the next session
    plain = dmlshim.InferenceSession(model, _options())
    assert [a.shape for a in plain.get_outputs()] == [["K", 4], ["K", 4]]
