"""``dmlshim.model.last_inference.infer_shapes``: onnx's own answer, a fresh copy on every call."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim.model import last_inference


def _model(axis: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["x", "i"], ["z"], axis=axis),
         helper.make_node("Identity", ["z"], ["w"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.INT64, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def test_same_answer_as_onnx_and_fresh_copies() -> None:
    for data_prop in (False, True):
        model = _model(1)
        theirs = onnx.shape_inference.infer_shapes(model, data_prop=data_prop).SerializeToString()
        first = last_inference.infer_shapes(model, data_prop=data_prop)
        assert first.SerializeToString() == theirs
        first.graph.value_info.add().name = "changed by the caller"
        second = last_inference.infer_shapes(model, data_prop=data_prop)  # remembered (without data_prop)
        assert second.SerializeToString() == theirs
    # another model (or other flags) is inferred anew, not answered from the last one
    assert _dims(last_inference.infer_shapes(_model(0)), "s") == [2]
    assert _dims(last_inference.infer_shapes(_model(0), data_prop=True), "z") == [4, 3]
    assert _dims(last_inference.infer_shapes(_model(1), data_prop=True), "z") == [2, 4]


def _dims(model: onnx.ModelProto, name: str) -> list[int]:
    for v in (*model.graph.value_info, *model.graph.output):
        if v.name == name and v.type.tensor_type.HasField("shape") and v.type.tensor_type.shape.dim:
            return [d.dim_value for d in v.type.tensor_type.shape.dim]
    raise AssertionError(f"no shape for {name}")


def _conflicting() -> onnx.ModelProto:
    model = _model(1)
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 7  # w is [2, 4, 3] for onnx
    return model


def test_errors_told_with_the_lenient_answer() -> None:
    for model, wrong in ((_model(1), False), (_conflicting(), True)):
        theirs = onnx.shape_inference.infer_shapes(model).SerializeToString()
        for _ in range(2):  # the second answer is the remembered one, the error remembered with it
            errors: list[str] = []
            assert last_inference.infer_shapes(model, errors=errors).SerializeToString() == theirs
            assert bool(errors) == wrong
        # an answer remembered without asking for errors is computed again when they are asked for
        last_inference.infer_shapes(_model(0))
        last_inference.infer_shapes(model)
        errors = []
        assert last_inference.infer_shapes(model, errors=errors).SerializeToString() == theirs
        assert bool(errors) == wrong
    with pytest.raises(onnx.shape_inference.InferenceError) as caught:  # onnx's own words, first line
        onnx.shape_inference.infer_shapes(_conflicting(), strict_mode=True)
    assert errors[0] == str(caught.value).strip().splitlines()[0]
