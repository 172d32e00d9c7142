"""Big cuts of one type share fresh graph inputs in bounded data propagation (issue 35, item 3): the
answer stays onnx's own ``infer_shapes(..., data_prop=True)`` of the same small model, with the data
budget lowered so that these small values are cut as a 20,000-node chain's are."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.model import data_cuts, data_prop
from dmlshim.model.data_prop import infer_with_data_prop


@pytest.fixture(autouse=True)
def _propagate_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """These models have no node reading propagated data (inference skips propagation for them, see
    tests/test_prop_readers.py): the bounded propagation under test is forced, as a model with a shape
    reader (Reshape, Expand, ...) gets it."""
    monkeypatch.setattr(data_prop, "propagation_unread", lambda model, *_: False)


vi = helper.make_tensor_value_info


def _model(nodes: list[onnx.NodeProto], inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _two_lengths() -> onnx.ModelProto:
    """Two computed values of one element type and different lengths (600, 700) read by one node, and one
    value read twice: both cut to the same type ([cut] float), so they may not share one input there."""
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["y"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=0),
        helper.make_node("Concat", ["b", "a", "b"], ["bab"], axis=0),
        helper.make_node("Add", ["a", "a"], ["aa"]),
        helper.make_node("Cast", ["ab"], ["c"], to=TensorProto.INT64),
        helper.make_node("Cast", ["bab"], ["d"], to=TensorProto.INT64),
    ]
    return _model(
        nodes,
        [vi("x", TensorProto.INT32, [600]), vi("y", TensorProto.INT32, [700])],
        [
            vi("c", TensorProto.INT64, None),
            vi("d", TensorProto.INT64, None),
            vi("aa", TensorProto.FLOAT, None),
        ],
    )


def _cast_chain(count: int = 60, length: int = 100) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Cast", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}"], to=TensorProto.FLOAT)
        for i in range(count)
    ]
    nodes.append(helper.make_node("Gather", [f"c{count - 1}", "idx"], ["y"], axis=0))
    idx = numpy_helper.from_array(np.array([0, 5, 7], dtype=np.int64), "idx")
    return _model(nodes, [vi("x", TensorProto.FLOAT, [length])], [vi("y", TensorProto.FLOAT, [3])], [idx])


def _in_if_branch() -> onnx.ModelProto:
    """The same reads inside an If's then-branch (outer values and the branch's own), the else-branch
    declaring a value of the same name with another length."""
    then_nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["a", "b"], ["t"], axis=0),
    ]
    else_nodes = [
        helper.make_node("Cast", ["y"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["a", "a"], ["t"], axis=0),
    ]
    then_g = helper.make_graph(then_nodes, "then", [], [vi("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph(else_nodes, "else", [], [vi("t", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Cast", ["y"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Concat", ["b", "b"], ["bb"], axis=0),
    ]
    return _model(
        nodes,
        [
            vi("x", TensorProto.INT32, [600]),
            vi("y", TensorProto.INT32, [700]),
            vi("cond", TensorProto.BOOL, []),
        ],
        [vi("out", TensorProto.FLOAT, None), vi("bb", TensorProto.FLOAT, None)],
    )


def _canonical(model: onnx.ModelProto) -> bytes:
    """The model with every graph's value_info in name order and onnx's generated dimension names
    (``unk__N``) numbered by first appearance: where the cuts add value_info (the pins) and how many names
    onnx generated before are not what inference answers."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    pending = [copy.graph]
    while pending:
        graph = pending.pop()
        infos = sorted(graph.value_info, key=lambda v: v.name)
        infos = [onnx.ValueInfoProto.FromString(v.SerializeToString()) for v in infos]
        del graph.value_info[:]
        graph.value_info.extend(infos)
        pending.extend(a.g for n in graph.node for a in n.attribute if a.HasField("g"))
    names: dict[bytes, bytes] = {}
    return re.sub(
        rb"unk__\d+",
        lambda m: names.setdefault(m.group(0), b"unk__%d" % len(names)),
        copy.SerializeToString(deterministic=True),
    )


@pytest.mark.parametrize("build", [_two_lengths, _cast_chain, _in_if_branch])
def test_shared_cuts_give_onnx_types(build, monkeypatch: pytest.MonkeyPatch) -> None:
    model = build()
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    made: list[tuple[int, int]] = []  # (fresh inputs, big cuts) of each cut copy
    cut_copy = data_prop.cut_copy

    def counted(model_, paths, plan, *rest):
        copy, renamed = cut_copy(model_, paths, plan, *rest)
        made.append((len(renamed), sum(kind == data_cuts.BIG for kind, _ in plan.values())))
        return copy, renamed

    monkeypatch.setattr(data_prop, "cut_copy", counted)
    monkeypatch.setattr(data_prop, "DATA_BUDGET", 150)  # every read of 100 or more elements is cut
    ours = infer_with_data_prop(model)
    assert _canonical(ours) == _canonical(expected)
    assert made and all(big > 0 for _, big in made)  # the budget did cut
    if build is _cast_chain:
        assert made[-1] == (1, 60)  # 60 cut reads of one type (the Gather's read is within the budget)


def test_one_node_reading_two_values_of_one_cut_type_reads_two_inputs() -> None:
    model = _two_lengths()
    paths = [()]
    types = data_prop._types(onnx.shape_inference.infer_shapes(model), paths)
    inits = data_prop._initializers(model, paths)
    sites = data_prop._sites(model, paths)
    plan = {s: (data_cuts.BIG, data_prop._cut_type(types[()][s.value], data_cuts.BIG).SerializeToString())
            for s in sites if s.value in ("a", "b")}  # fmt: skip
    copy, renamed = data_cuts.cut_copy(model, paths, plan, types, inits)
    by_name = {n.output[0]: list(n.input) for n in copy.graph.node}
    ab, bab, aa = by_name["ab"], by_name["bab"], by_name["aa"]
    assert len(set(ab)) == 2 and set(ab) <= renamed.keys()
    assert bab[0] == bab[2] != bab[1]  # the pattern of names as read: b, a, b
    assert aa[0] == aa[1]
    # Across nodes the shared inputs are the same few: one per (cut type, slot), not one per value.
    assert len(renamed) == 2
    # The pins hold each node's own types from its full inputs: Concat([600], [700]) is [1300].
    pinned = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*copy.graph.value_info, *copy.graph.output)
    }
    assert pinned["ab"] == [1300] and pinned["bab"] == [2000] and pinned["aa"] == [600]
