"""get_outputs() merges a declared output type with inference as onnxruntime does (issue 35 leftover).

onnxruntime merges the type a model declares for a graph output with the type inference gives its
producer: a symbolic or unknown declared dimension takes the inferred size; where the two disagree its
lenient merge leaves the dimension unknown (None), and a rank mismatch leaves no shape ([]). A graph input
listed as an output is reported as the input is declared, an initializer with its own shape. Every
expected value here is onnxruntime's own answer for the same bytes (asked in the test, CPU provider,
default options: no graph optimization rewrites these graphs, so onnxruntime resolves them once).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.model.declared_types import merge_shapes

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _relu(x: list[object], y: list[object] | None) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", F, x)], [vi("y", F, y)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gather(y: list[object]) -> onnx.ModelProto:
    node = helper.make_node("Gather", ["d", "i"], ["y"])
    graph = helper.make_graph(
        [node], "g", [vi("d", F, [5, 4]), vi("i", TensorProto.INT64, [3])], [vi("y", F, y)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reshape_by_initializer() -> onnx.ModelProto:
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [4, 2])
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    graph = helper.make_graph([node], "g", [vi("x", F, [2, 4])], [vi("y", F, [2, 4])], [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _initializer_output(declared_input: list[object] | None) -> onnx.ModelProto:
    w = helper.make_tensor("w", F, [2, 4], np.zeros(8, np.float32))
    inputs = [] if declared_input is None else [vi("w", F, declared_input)]
    graph = helper.make_graph([], "g", inputs, [vi("w", F, [2, 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _input_output() -> onnx.ModelProto:
    graph = helper.make_graph([], "g", [vi("x", F, [2, 4])], [vi("x", F, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "size against size": (_relu([2, 4], [2, 3]), [2, None]),
    "rank 2 declared, 3 inferred": (_relu([2, 4, 5], [2, 4]), []),
    "rank 3 declared, 2 inferred": (_relu([2, 4], [2, 4, 5]), []),
    "rank 0 declared": (_relu([2, 4], []), []),
    "name declared, size inferred": (_relu([2, 4], [2, "N"]), [2, 4]),
    "size declared, name inferred": (_relu([2, "N"], [2, 4]), [2, 4]),
    "size declared, unknown inferred": (_relu([2, None], [2, 4]), [2, 4]),
    "two names": (_relu([2, "M"], [2, "N"]), [2, "N"]),
    "name then a conflict (the strict merge got past the name)": (_relu([2, 4], ["N", 3]), [2, None]),
    "a conflict first (the name after it stays unmerged, then differs)": (
        _relu([2, 4], [3, "N"]),
        [None, None],
    ),
    "three dims": (_relu([2, 4, 5], [2, 3, "N"]), [2, None, None]),
    "no shape declared": (_relu([2, 4], None), [2, 4]),
    "gather": (_gather([3, 5]), [3, None]),
    "gather rank": (_gather([3, 4, 1]), []),
    "reshape by an initializer": (_reshape_by_initializer(), [None, None]),
    "initializer output": (_initializer_output(None), [2, 4]),
    "initializer output declared an input": (_initializer_output([2, None]), [2, None]),
    "input output": (_input_output(), [2, 4]),
}


def _theirs(model: bytes) -> onnxruntime.InferenceSession:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    return onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_shape_is_onnxruntimes_merge(case: str) -> None:
    model, expected = CASES[case]
    data = model.SerializeToString()
    theirs = _theirs(data)
    assert [o.shape for o in theirs.get_outputs()] == [expected]  # onnxruntime's answer, as recorded
    ours = dmlshim.InferenceSession(data)
    assert [(o.name, o.type, o.shape) for o in ours.get_outputs()] == [
        (o.name, o.type, o.shape) for o in theirs.get_outputs()
    ]
    assert [(o.name, o.type, o.shape) for o in ours.get_inputs()] == [
        (o.name, o.type, o.shape) for o in theirs.get_inputs()
    ]
    assert [(o.name, o.shape) for o in ours.get_overridable_initializers()] == [
        (o.name, o.shape) for o in theirs.get_overridable_initializers()
    ]


def test_the_values_run_are_the_inferred_shape() -> None:
    """The merge never claims a size the run contradicts: the run gives the inferred shape."""
    data = _relu([2, 4], [2, 3]).SerializeToString()
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    (ours,) = dmlshim.InferenceSession(data).run(None, {"x": x})
    (theirs,) = _theirs(data).run(None, {"x": x})
    np.testing.assert_array_equal(ours, theirs)


def test_strict_inference_refuses_as_onnxruntime() -> None:
    data = _relu([2, 4], [2, 3]).SerializeToString()
    so = onnxruntime.SessionOptions()
    so.add_session_config_entry("session.strict_shape_type_inference", "1")
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="Can't merge shape info"):
        onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="Can't merge shape info"):
        dmlshim.InferenceSession(data, so)


def test_overridable_initializer_declared_another_shape_is_refused_as_onnxruntime() -> None:
    w = helper.make_tensor("w", F, [2, 4], np.zeros(8, np.float32))
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node], "g", [vi("x", F, [2, 4]), vi("w", F, [2, 3])], [vi("y", F, [2, 4])], [w]
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="Shape of initializer w"):
        _theirs(data)
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="Shape of initializer w"):
        dmlshim.InferenceSession(data)


def test_merge_keeps_the_declaration_as_far_as_the_strict_merge_got() -> None:
    """onnx's mergeInShapeInfo changes the declaration dimension by dimension; onnxruntime's lenient
    merge then compares what it left: ["N", 3] against [2, 4] is [2, None], [3, "N"] is [None, None]."""
    inferred = helper.make_tensor_type_proto(F, [2, 4])
    first = merge_shapes(helper.make_tensor_type_proto(F, ["N", 3]), inferred)
    second = merge_shapes(helper.make_tensor_type_proto(F, [3, "N"]), inferred)
    assert [d.WhichOneof("value") and d.dim_value for d in first.tensor_type.shape.dim] == [2, None]
    assert [d.WhichOneof("value") for d in second.tensor_type.shape.dim] == [None, None]
