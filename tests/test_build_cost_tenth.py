"""Build-cost cuts of the tenth pass (issue 36, item 1): data propagation's lazily typed initializers, the
fed sizes typed on demand, one-set-per-node walks. Each answer is compared with one computed from the model
itself (its declarations, onnx's inference with data propagation, the values the graph's nodes reach)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.execute.engines.lean_check import _fed_values
from dmlshim.execute.plan.checks import downstream_of
from dmlshim.model.data_prop import _graph_types, infer_with_data_prop
from dmlshim.model.weightless import tensor_nbytes

vi = helper.make_tensor_value_info


def _ints(values: list[int], name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _graph() -> onnx.GraphProto:
    """``w`` is an initializer also declared as an input (its declaration wins), ``v`` an initializer
    declared without a type (its own type stands), ``k`` an initializer only."""
    untyped = onnx.ValueInfoProto(name="v")
    return helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [vi("x", TensorProto.FLOAT, [2, 3]), vi("w", TensorProto.FLOAT, ["n", 3]), untyped],
        [vi("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.zeros((2, 3), np.float32), "w"),
            numpy_helper.from_array(np.zeros((4,), np.float16), "v"),
            _ints([1, 2, 3], "k"),
        ],
    )


def _expected(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """The types as the graph states them: initializers' from their data type and dims, then every
    typed declaration over them."""
    out = {t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in graph.initializer}
    for v in (*graph.input, *graph.value_info, *graph.output):
        if v.type.WhichOneof("value") is not None:
            out[v.name] = v.type
    return out


def test_graph_types_give_the_declared_and_initializer_types() -> None:
    graph = _graph()
    types = _graph_types(graph)
    expected = _expected(graph)
    assert set(types) == set(expected) and len(types) == len(expected)
    for name, tp in expected.items():
        assert name in types
        assert types[name] == tp and types.get(name) == tp
    assert types["w"].tensor_type.shape.dim[0].dim_param == "n"  # the declaration, not the initializer
    assert types.get("nothing") is None and "nothing" not in types
    with pytest.raises(KeyError):
        types["nothing"]
    assert types.get("k") is types["k"]  # made once


def _reshape_model(target: list[int]) -> onnx.ModelProto:
    """Reshape(x, Concat(Shape(x)[0], target)): a shape only data propagation sizes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Concat", ["b1", "target"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", TensorProto.FLOAT, ["batch", 4, 6])],
        [vi("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            _ints([0], "axes0"),
            _ints(target, "target"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_data_propagation_equals_onnx_with_lazy_initializer_types() -> None:
    model = _reshape_model([24])
    ours = infer_with_data_prop(model)
    theirs = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    out = {v.name: v for v in ours.graph.output}["y"]
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", 24]


def test_one_set_walks_reach_what_the_nodes_reach() -> None:
    nodes = [
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Add", ["b", ""], ["c"]),  # an omitted input reads nothing
        helper.make_node("Neg", ["k"], ["d"]),
        helper.make_node("Split", ["c"], ["e", ""], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [vi("a", TensorProto.FLOAT, [2]), vi("k", TensorProto.FLOAT, [2])], [], [_ints([1], "k")]
    )
    assert downstream_of(graph, {"a"}) == {"b", "c", "e"}
    assert downstream_of(graph, set()) == set()
    assert _fed_values(graph) == {"a", "b", "c", "e"}  # "k" is an initializer: not fed


def test_tensor_nbytes_is_dims_times_item_size() -> None:
    assert tensor_nbytes(numpy_helper.from_array(np.zeros((3, 5), np.float16), "t")) == 3 * 5 * 2
    assert tensor_nbytes(_ints([1, 2], "i")) == 16
    assert tensor_nbytes(numpy_helper.from_array(np.array(1.0, np.float64), "s")) == 8
    assert tensor_nbytes(helper.make_tensor("str", TensorProto.STRING, [2], [b"a", b"b"])) == 0
