"""``graph.op_types_among`` answers as the walk (``op_types(graph) & wanted``) does, and walks only when
the graph's bytes spell one of the op types it looks for (issue 35, item 3: the If/Loop look-up of
``translate.infer_shapes`` on a 20,000-node chain)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import graph as graph_mod
from dmlshim.graph import op_types, op_types_among

vi = helper.make_tensor_value_info
WANTED = ("If", "Loop", "L" * 200)  # the last: a length of two varint bytes


def _body(nodes: list[onnx.NodeProto], name: str = "body") -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [vi("t", TensorProto.FLOAT, None)])


def _loop_body() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["v"], ["v_out"])],
        "loop_body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", TensorProto.FLOAT, [2])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [2])],
    )


def _graphs() -> dict[str, onnx.GraphProto]:
    idx = numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "idx")
    chain = helper.make_graph(
        [
            helper.make_node("Gather", ["x" if i == 0 else f"g{i - 1}", "idx"], [f"g{i}"], axis=0)
            for i in range(50)
        ],
        "chain",
        [vi("x", TensorProto.FLOAT, [2, 3])],
        [vi("g49", TensorProto.FLOAT, [2, 3])],
        initializer=[idx],
    )
    loop = helper.make_node("Loop", ["n", "cond", "v0"], ["v_final"], body=_loop_body())
    if_with_loop = helper.make_node(
        "If",
        ["cond"],
        ["t"],
        then_branch=_body([loop, helper.make_node("Identity", ["v_final"], ["t"])], "then"),
        else_branch=_body([helper.make_node("Identity", ["v0"], ["t"])], "else"),
    )
    outer = [
        vi("n", TensorProto.INT64, []),
        vi("cond", TensorProto.BOOL, []),
        vi("v0", TensorProto.FLOAT, [2]),
    ]
    nested = helper.make_graph([if_with_loop], "nested", outer, [vi("t", TensorProto.FLOAT, None)])
    loop_only = helper.make_graph([loop], "loop", outer, [vi("v_final", TensorProto.FLOAT, None)])
    # The bytes of an If node's op_type field inside a doc string, a node name and a tensor name: the
    # search matches and the walk decides (no If there).
    decoy = helper.make_graph(
        [helper.make_node("Identity", ["\x22\x02If"], ["y"], name="\x22\x04Loop", doc_string="\x22\x02If")],
        "decoy",
        [vi("\x22\x02If", TensorProto.FLOAT, [2])],
        [vi("y", TensorProto.FLOAT, [2])],
    )
    custom = helper.make_graph(
        [helper.make_node("If", ["x"], ["y"], domain="my.domain"), helper.make_node("L" * 200, ["y"], ["z"])],
        "custom",
        [vi("x", TensorProto.FLOAT, [2])],
        [vi("z", TensorProto.FLOAT, [2])],
    )
    # An If under an attribute declared INT (malformed): the walk does not look there, nor does the answer.
    hidden = onnx.GraphProto()
    hidden.CopyFrom(chain)
    attr = hidden.node[0].attribute[0]
    attr.g.CopyFrom(_body([helper.make_node("If", ["c"], ["t"])]))
    return {"chain": chain, "nested": nested, "loop_only": loop_only, "decoy": decoy, "custom": custom,
            "hidden": hidden}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_graphs()))
def test_same_answer_as_the_walk(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _graphs()[name]
    expected = op_types(graph) & frozenset(WANTED)
    walks: list[int] = []
    walk = graph_mod.op_types
    monkeypatch.setattr(graph_mod, "op_types", lambda g: walks.append(1) or walk(g))
    assert op_types_among(graph, WANTED) == expected
    # a graph that spells none of the ops (in any field) is not walked
    spelled = any(graph_mod._op_type_field(op) in graph.SerializeToString() for op in WANTED)
    assert bool(walks) == spelled
    if name in ("chain",):
        assert not walks


def test_expected_answers() -> None:
    graphs = _graphs()
    assert op_types_among(graphs["chain"], WANTED) == frozenset()
    assert op_types_among(graphs["nested"], WANTED) == {"If", "Loop"}
    assert op_types_among(graphs["loop_only"], WANTED) == {"Loop"}
    assert op_types_among(graphs["decoy"], WANTED) == frozenset()
    assert op_types_among(graphs["custom"], WANTED) == {"If", "L" * 200}
    assert op_types_among(graphs["hidden"], WANTED) == frozenset()


def test_a_graph_over_the_scan_bound_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_mod, "_SCAN_MAX_BYTES", 10)
    walks: list[int] = []
    walk = graph_mod.op_types
    monkeypatch.setattr(graph_mod, "op_types", lambda g: walks.append(1) or walk(g))
    assert op_types_among(_graphs()["chain"], WANTED) == frozenset()
    assert walks == [1]


def test_op_type_field_is_what_protobuf_writes() -> None:
    for op in ("If", "Loop", "L" * 200):
        node = onnx.NodeProto(op_type=op)
        assert node.SerializeToString() == graph_mod._op_type_field(op)
