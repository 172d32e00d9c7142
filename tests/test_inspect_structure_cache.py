"""The caches that let ``inspect`` do per-structure work once on large graphs (issue 35, item 3) never merge
two nodes that differ in anything their result reads.

- ``translate_model`` translates nodes of one structure once (key: op, opset, attributes as bytes, input
  types): two nodes differing in one attribute (or one input type) each get their own translation, the
  one they get when translated alone, whichever comes first.
- data propagation's cut nodes are typed once per structure (``node_types._same_node_types``): a chain of
  Casts whose ``to`` differs from node to node keeps every value's type as onnx's own inference gives it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.model import data_prop, node_types
from dmlshim.translate.model_translation import translate_model

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
XI = helper.make_tensor_value_info("xi", TensorProto.INT32, [4, 3])
IDX = numpy_helper.from_array(np.array([0, 2], dtype=np.int64), "idx")
IDX2 = numpy_helper.from_array(np.array([[0, 2, 1], [3, 0, 2]], dtype=np.int64), "idx2")
ND = numpy_helper.from_array(np.array([[0], [2], [1], [3]], dtype=np.int64), "nd")
UPD = numpy_helper.from_array(np.ones((2, 3), dtype=np.float32), "upd")
UPD_ND = numpy_helper.from_array(np.ones((4, 3), dtype=np.float32), "upd_nd")

# (op, inputs, attributes of node A, attributes of node B, opset): A and B differ in one thing only.
PAIRS = [
    ("Gather", ["x", "idx"], {"axis": 0}, {"axis": 1}, 13),
    ("Gather", ["x", "idx"], {"axis": 1}, {"axis": -1}, 13),  # same axis, other bytes: translated twice
    ("GatherElements", ["x", "idx2"], {"axis": 0}, {"axis": 1}, 13),
    ("GatherND", ["x", "nd"], {"batch_dims": 0}, {}, 13),
    ("ScatterElements", ["x", "idx2", "upd"], {"axis": 0, "reduction": "none"},
     {"axis": 0, "reduction": "add"}, 16),
    ("ScatterND", ["x", "nd", "upd_nd"], {"reduction": "none"}, {"reduction": "mul"}, 16),
]  # fmt: skip


def _model(nodes: list[onnx.NodeProto], opset: int) -> onnx.ModelProto:
    outputs = [helper.make_tensor_value_info(n.output[0], TensorProto.UNDEFINED, None) for n in nodes]
    graph = helper.make_graph(nodes, "pair", [X, XI], outputs, initializer=[IDX, IDX2, ND, UPD, UPD_ND])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _translations(nodes: list[onnx.NodeProto], opset: int) -> dict[str, dict[str, object]]:
    return {t.name: t.to_json() for t in translate_model(_model(nodes, opset)).nodes}


def _pair(op: str, inputs: list[str], a: dict, b: dict) -> tuple[onnx.NodeProto, onnx.NodeProto]:
    return (
        helper.make_node(op, inputs, ["ya"], name="A", **a),
        helper.make_node(op, inputs, ["yb"], name="B", **b),
    )


@pytest.mark.parametrize(("op", "inputs", "a", "b", "opset"), PAIRS)
def test_nodes_differing_in_one_attribute_are_not_merged(op, inputs, a, b, opset):
    node_a, node_b = _pair(op, inputs, a, b)
    alone = {**_translations([node_a], opset), **_translations([node_b], opset)}
    assert _translations([node_a, node_b], opset) == alone  # A first: B is not given A's translation
    assert _translations([node_b, node_a], opset) == alone  # B first
    if a.get("axis", 0) % 2 != b.get("axis", 0) % 2 or a.get("reduction") != b.get("reduction"):
        assert alone["A"]["operator"] != alone["B"]["operator"]


def test_gather_axis_reaches_the_descriptor_of_each_node():
    node_a, node_b = _pair("Gather", ["x", "idx"], {"axis": 0}, {"axis": 1})
    got = _translations([node_a, node_b], 13)
    # numpy's take gives the output shapes the two axes mean
    data, idx = np.zeros((4, 3), np.float32), np.array([0, 2])
    for name, axis in (("A", 0), ("B", 1)):
        desc = got[name]["operator"]["desc"]
        assert desc["Axis"] == axis
        assert desc["OutputTensor"]["Sizes"] == list(np.take(data, idx, axis=axis).shape)


def test_nodes_differing_in_one_input_type_are_not_merged():
    node_a = helper.make_node("Gather", ["x", "idx"], ["ya"], name="A", axis=0)
    node_b = helper.make_node("Gather", ["xi", "idx"], ["yb"], name="B", axis=0)
    got = _translations([node_a, node_b], 13)
    assert got["A"]["operator"]["desc"]["InputTensor"]["DataType"] == "DML_TENSOR_DATA_TYPE_FLOAT32"
    assert got["B"]["operator"]["desc"]["InputTensor"]["DataType"] == "DML_TENSOR_DATA_TYPE_INT32"
    assert got == {**_translations([node_b], 13), **_translations([node_a], 13)}


def _cast_chain(targets: list[int], length: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Cast", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}"], to=to)
        for i, to in enumerate(targets)
    ]
    graph = helper.make_graph(
        nodes,
        "casts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
        [helper.make_tensor_value_info(f"c{len(targets) - 1}", targets[-1], None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def _value_types(model: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...]]]:
    return {
        v.name: (v.type.tensor_type.elem_type, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
        for v in (*model.graph.value_info, *model.graph.output)
    }


def test_cut_casts_of_other_targets_keep_their_own_types(monkeypatch):
    # 1,200 Casts of a 1,000-element value hold 1.2M elements of data: past the 2^20 budget, so most reads
    # are cut and their nodes typed from their inputs' types; the targets cycle, so the cached typing
    # sees nodes differing only in ``to`` and nodes differing only in their input's type.
    targets = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE, TensorProto.INT64] * 300
    model = _cast_chain(targets, 1000)
    asked: list[str] = []
    original = node_types._node_types

    def counting(node, *args):
        asked.append(node.output[0])
        return original(node, *args)

    monkeypatch.setattr(node_types, "_node_types", counting)
    # nothing reads these Casts' data (inference skips propagation for such a model: see
    # tests/test_prop_readers.py); the bounded propagation is forced, as a model with a shape reader gets it
    monkeypatch.setattr(data_prop, "propagation_unread", lambda model, *_: False)
    ours = _value_types(data_prop.infer_with_data_prop(model))
    theirs = _value_types(onnx.shape_inference.infer_shapes(model))  # onnx's own types, no data needed
    assert ours == theirs
    assert {ours[f"c{i}"][0] for i in range(4)} == {TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE}
    assert 4 <= len(asked) < 100  # typed per structure, not per node (hundreds were cut)


def test_nodes_sharing_a_translation_keep_their_own_names():
    # x [4,3] -> [2,3] -> [2,3] -> [2,3]: the third node is a renamed copy of the second one's translation
    nodes = [
        helper.make_node("Gather", ["x" if i == 0 else f"g{i - 1}", "idx"], [f"g{i}"], name=f"n{i}", axis=0)
        for i in range(3)
    ]
    got = translate_model(_model(nodes, 13)).nodes
    for node, t in zip(nodes, got, strict=True):
        assert t.name == node.name
        assert [b.onnx_name for b in t.inputs] == [node.input[b.onnx_index] for b in t.inputs]
        assert t.output is not None and t.output.onnx_name == node.output[0]
