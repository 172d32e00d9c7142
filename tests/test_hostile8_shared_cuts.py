"""hostile8: bounded data propagation's shared cut inputs (model/data_cuts.py) on models built to confuse
the sharing: two cut values of one type read by a local function (twice, swapped, and one value twice), by
Shape nodes whose data builds a Reshape target, by a broadcasting Add, by a Loop body and by both If
branches. The answer must be onnx's own ``infer_shapes(..., data_prop=True)`` (all held when written)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.model import data_cuts, data_prop
from dmlshim.model.data_prop import infer_with_data_prop
from tests.oracle import IR_VERSION
from tests.test_shared_cuts import _canonical


@pytest.fixture(autouse=True)
def _propagate_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """These models have no node reading propagated data (inference skips propagation for them, see
    tests/test_prop_readers.py): the bounded propagation under test is forced, as a model with a shape
    reader (Reshape, Expand, ...) gets it."""
    monkeypatch.setattr(data_prop, "propagation_unread", lambda model, *_: False)


vi = helper.make_tensor_value_info
OPSET = [helper.make_opsetid("", 17)]


def _casts(x: list[int], y: list[int]) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=T.FLOAT),
        helper.make_node("Cast", ["y"], ["b"], to=T.FLOAT),
    ]
    return nodes, [vi("x", T.INT32, x), vi("y", T.INT32, y)]


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str], **kw: object
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [vi(n, T.FLOAT, None) for n in outputs])
    opsets = [*OPSET, helper.make_opsetid("local", 1)] if kw.get("functions") else OPSET
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, **kw)


def _function() -> onnx.ModelProto:
    cat = helper.make_function(
        "local", "cat", ["p", "q"], ["r"], [helper.make_node("Concat", ["p", "q"], ["r"], axis=0)], OPSET
    )
    nodes, inputs = _casts([600], [700])
    nodes += [
        helper.make_node("cat", pair, [out], domain="local")
        for pair, out in ((["a", "b"], "ab"), (["b", "a"], "ba"), (["a", "a"], "aa"))
    ]
    return _model(nodes, inputs, ["ab", "ba", "aa"], functions=[cat])


def _function_shapes() -> onnx.ModelProto:
    body = [
        helper.make_node("Shape", ["p"], ["s1"]),
        helper.make_node("Shape", ["q"], ["s2"]),
        helper.make_node("Concat", ["s1", "s2"], ["s"], axis=0),
        helper.make_node("Reshape", ["z", "s"], ["r"]),
    ]
    shp = helper.make_function("local", "shp", ["p", "q", "z"], ["r"], body, OPSET)
    nodes, inputs = _casts([600], [700])
    nodes.append(helper.make_node("shp", ["a", "b", "zz"], ["r"], domain="local"))
    return _model(nodes, [*inputs, vi("zz", T.FLOAT, [420000])], ["r"], functions=[shp])


def _shape_concat() -> onnx.ModelProto:
    nodes, inputs = _casts([600], [700])
    nodes += [
        helper.make_node("Shape", ["a"], ["s1"]),
        helper.make_node("Shape", ["b"], ["s2"]),
        helper.make_node("Concat", ["s1", "s2"], ["s"], axis=0),
        helper.make_node("Reshape", ["zz", "s"], ["r"]),
    ]
    return _model(nodes, [*inputs, vi("zz", T.FLOAT, [420000])], ["r"])


def _loop() -> onnx.ModelProto:
    body_nodes = [
        helper.make_node("Concat", ["a", "b"], ["t"], axis=0),
        helper.make_node("Identity", ["c"], ["co"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, [])],
        [vi("co", T.BOOL, []), vi("t", T.FLOAT, None)],
    )
    nodes, inputs = _casts([600], [700])
    nodes.append(helper.make_node("Loop", ["n", "c0"], ["outs"], body=body))
    return _model(nodes, [*inputs, vi("n", T.INT64, []), vi("c0", T.BOOL, [])], ["outs"])


def _if() -> onnx.ModelProto:
    then = helper.make_graph(
        [helper.make_node("Concat", ["a", "b", "a"], ["t"], axis=0)], "then", [], [vi("t", T.FLOAT, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Concat", ["b", "b"], ["t"], axis=0)], "else", [], [vi("t", T.FLOAT, None)]
    )
    nodes, inputs = _casts([600], [700])
    nodes.append(helper.make_node("If", ["cond"], ["o"], then_branch=then, else_branch=other))
    return _model(nodes, [*inputs, vi("cond", T.BOOL, [])], ["o"])


@pytest.mark.parametrize("build", [_function, _function_shapes, _shape_concat, _loop, _if])
def test_confusing_shared_cuts_give_onnx_types(build, monkeypatch: pytest.MonkeyPatch) -> None:
    model = build()
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    big_cuts: list[int] = []
    cut_copy = data_prop.cut_copy

    def counted(model_, paths, plan, *rest):
        big_cuts.append(sum(kind == data_cuts.BIG for kind, _ in plan.values()))
        return cut_copy(model_, paths, plan, *rest)

    monkeypatch.setattr(data_prop, "cut_copy", counted)
    monkeypatch.setattr(data_prop, "DATA_BUDGET", 150)  # every read of 150 or more elements is cut
    assert _canonical(infer_with_data_prop(model)) == _canonical(expected)
    assert big_cuts and all(big_cuts)  # the budget did cut, and shared inputs were made
