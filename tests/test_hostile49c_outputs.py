"""Hostile round 49c: get_outputs() against onnxruntime's own answer for the same bytes (the value_info,
contrib-op and local-function cases: tests/test_outputs50_onnxruntime.py has them from files too).

Each case builds a model whose declared output (or value_info) types disagree with, or say less than, what
inference gives, and compares (name, type, shape) with onnxruntime CPU's ``get_outputs()``. Cases whose
answer depends on whether onnxruntime's optimizations rewrite the graph are compared with onnxruntime at
``ORT_DISABLE_ALL`` (dmlshim reports the first resolve, docs/python-api.md).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim

F = TensorProto.FLOAT
I64 = TensorProto.INT64
vi = helper.make_tensor_value_info


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: tuple[onnx.TensorProto, ...] | list[onnx.TensorProto] = (),
    opset: int = 17,
    value_info: tuple[onnx.ValueInfoProto, ...] | list[onnx.ValueInfoProto] = (),
    extra: tuple[onnx.OperatorSetIdProto, ...] | list[onnx.OperatorSetIdProto] = (),
    functions: tuple[onnx.FunctionProto, ...] | list[onnx.FunctionProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset), *extra]
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def _relu2() -> list[onnx.NodeProto]:
    return [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]


def _if(
    then_out: list[object] | None, else_in: list[object], declared: list[object] | None
) -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, then_out)])
    other = helper.make_graph([helper.make_node("Neg", ["z"], ["e"])], "else", [], [vi("e", F, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    inputs = [vi("c", TensorProto.BOOL, []), vi("x", F, [2, 4]), vi("z", F, else_in)]
    return _model([node], inputs, [vi("y", F, declared)])


def _untyped(name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.name = name
    return out


W = helper.make_tensor("w", F, [2, 4], np.zeros(8, np.float32))
OPTIONAL = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2, 3]))

CASES = {
    # an output read by another output: the first's lenient merge is what the second is inferred from
    "chain of outputs": _model(_relu2(), [vi("x", F, [2, 4])], [vi("y", F, [2, 3]), vi("z", F, [2, 4])]),
    "value_info agreeing": _model(
        _relu2(), [vi("x", F, [2, 4])], [vi("z", F, [2, 3])], value_info=[vi("y", F, [2, 4])]
    ),
    # one value listed twice: both entries are the value typed by its first declaration
    "output listed twice": _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", F, [2, 4])],
        [vi("y", F, [2, 3]), vi("y", F, [2, 4])],
    ),
    "output listed twice, first without shape": _model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, 4])], [vi("y", F, None), vi("y", F, [2, 3])]
    ),
    "optional output": _model(
        [helper.make_node("Optional", ["x"], ["o"])],
        [vi("x", F, [2, 4])],
        [helper.make_value_info("o", OPTIONAL)],
        opset=18,
    ),
    "optional read": _model(
        [helper.make_node("Optional", ["x"], ["o"]), helper.make_node("OptionalGetElement", ["o"], ["y"])],
        [vi("x", F, [2, 4])],
        [vi("y", F, [2, 3])],
        opset=18,
    ),
    "element of a sequence": _model(
        [
            helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
            helper.make_node("SequenceAt", ["s", "i"], ["y"]),
        ],
        [vi("x", F, [2, 4]), vi("i", I64, [])],
        [vi("y", F, [2, 3])],
    ),
    # an input with an initializer, listed as an output declared otherwise (onnx's inference refuses it)
    "input and initializer listed as output": _model(
        [helper.make_node("Relu", ["w"], ["y"])],
        [vi("w", F, ["N", 4])],
        [vi("w", F, [2, 3]), vi("y", F, [2, 3])],
        [W],
    ),
    "constant node output": _model(
        [helper.make_node("Constant", [], ["y"], value=W)], [], [vi("y", F, [2, 3])]
    ),
    "if output": _if([2, 4], [2, 4], [2, 3]),
    "if, branches differ": _if(None, [3, 4], [2, 5]),
    "if, branch ranks differ": _if(None, [3], [2, 5]),
    "if, nothing declared": _if(None, [3], None),
    "untyped output": _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, 4])], [_untyped("y")]),
    "bool output": _model(
        [helper.make_node("Not", ["x"], ["y"])],
        [vi("x", TensorProto.BOOL, [2, 4])],
        [vi("y", TensorProto.BOOL, [2, 3])],
    ),
    "string output": _model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [vi("x", TensorProto.STRING, [2, 4])],
        [vi("y", TensorProto.STRING, [2, 3])],
    ),
    "gather, negative axis, scalar index": _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=-1)],
        [vi("d", F, [5, 4]), vi("i", I64, [])],
        [vi("y", F, [3])],
    ),
}

# the graph is rewritten by onnxruntime's default optimizations, which infer again (docs/python-api.md)
UNOPTIMIZED = {
    "reshape by a Shape": _model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])],
        [vi("x", F, [2, 4])],
        [vi("y", F, [2, 3])],
    ),
    "expand by a Shape with start": _model(
        [helper.make_node("Shape", ["x"], ["s"], start=-1), helper.make_node("Expand", ["x", "s"], ["y"])],
        [vi("x", F, [2, 4])],
        [vi("y", F, [2, 3])],
    ),
}


def _theirs(data: bytes, optimized: bool = True) -> list[tuple[str, str, list[object]]]:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return [(o.name, o.type, o.shape) for o in session.get_outputs()]


def _ours(data: bytes) -> list[tuple[str, str, list[object]]]:
    return [(o.name, o.type, o.shape) for o in dmlshim.InferenceSession(data).get_outputs()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_are_onnxruntimes(case: str) -> None:
    data = CASES[case].SerializeToString()
    assert _ours(data) == _theirs(data)


@pytest.mark.parametrize("case", sorted(UNOPTIMIZED))
def test_outputs_are_onnxruntimes_first_resolve(case: str) -> None:
    data = UNOPTIMIZED[case].SerializeToString()
    assert _ours(data) == _theirs(data, optimized=False)


def _contrib() -> onnx.ModelProto:
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    return _model(
        [node], [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], extra=[helper.make_opsetid("com.microsoft", 1)]
    )


def _local_function() -> onnx.ModelProto:
    fn = helper.make_function(
        "local",
        "MyRelu",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    node = helper.make_node("MyRelu", ["x"], ["y"], domain="local")
    return _model(
        [node],
        [vi("x", F, [2, 4])],
        [vi("y", F, [2, 3])],
        extra=[helper.make_opsetid("local", 1)],
        functions=[fn],
    )


VALUE_INFO = {
    "output declared": _model(
        _relu2(), [vi("x", F, [2, 4])], [vi("z", F, [2, 4])], value_info=[vi("y", F, [2, 3])]
    ),
    "output without shape": _model(
        _relu2(), [vi("x", F, [2, 4])], [vi("z", F, None)], value_info=[vi("y", F, [2, 3])]
    ),
}


@pytest.mark.parametrize("case", sorted(VALUE_INFO))
def test_value_info_conflict(case: str) -> None:
    data = VALUE_INFO[case].SerializeToString()
    assert _ours(data) == _theirs(data)


def test_contrib_op_output() -> None:
    data = _contrib().SerializeToString()
    assert _ours(data) == _theirs(data)


def test_local_function_output() -> None:
    data = _local_function().SerializeToString()
    assert _ours(data) == _theirs(data, optimized=False)
