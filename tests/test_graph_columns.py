"""The shortcuts read from a graph's columns (``model.graph_columns``: one C parse, issue 35 item 3) answer
as the walks they skip: ``_add_ort_types``' test for node outputs lacking a rank, ``unknown_operators`` and
``session_refusals`` (the latter skipped by ``op_types_among``), on chains, unsorted nodes, If and Loop
bodies, local functions, onnxruntime-only and unknown ops."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.model import ort_errors
from dmlshim.model.graph_columns import declared_types, flat_ops
from dmlshim.translate import ep_refusals, shapes_info
from tests.oracle import IR_VERSION

vi = helper.make_tensor_value_info
F = TensorProto.FLOAT


def _model(graph: onnx.GraphProto, **kwargs: object) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    opsets += kwargs.pop("extra_opsets", [])  # type: ignore[operator]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, **kwargs)


def _chain(count: int = 30, reverse: bool = False) -> onnx.ModelProto:
    idx = numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "idx")
    nodes = [
        helper.make_node("Gather", ["x" if i == 0 else f"g{i - 1}", "idx"], [f"g{i}"], axis=0)
        for i in range(count)
    ]
    if reverse:
        nodes.reverse()  # unsorted: each node's input is produced by the node after it
    graph = helper.make_graph(nodes, "chain", [vi("x", F, [2, 3])], [vi(f"g{count - 1}", F, None)], [idx])
    return _model(graph)


def _if_model() -> onnx.ModelProto:
    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], ["t"])], name, [], [vi("t", F, None)])

    node = helper.make_node(
        "If", ["c"], ["y"], then_branch=branch("then", "Relu"), else_branch=branch("else", "Neg")
    )
    graph = helper.make_graph(
        [node], "if", [vi("c", TensorProto.BOOL, []), vi("x", F, [2])], [vi("y", F, None)]
    )
    return _model(graph)


def _loop_model(body_op: str = "Identity", body_domain: str = "") -> onnx.ModelProto:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node(body_op, ["v"], ["v_out"], domain=body_domain),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", F, [2])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", F, [2])],
    )
    node = helper.make_node("Loop", ["n", "c0", "v0"], ["v_last"], body=body)
    graph = helper.make_graph(
        [node],
        "loop",
        [vi("n", TensorProto.INT64, []), vi("c0", TensorProto.BOOL, []), vi("v0", F, [2])],
        [vi("v_last", F, None)],
    )
    return _model(graph, extra_opsets=[helper.make_opsetid(body_domain, 1)] if body_domain else [])


def _function_model() -> onnx.ModelProto:
    fn = helper.make_function(
        "local.fns", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 18)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["y"], domain="local.fns"), helper.make_node("Relu", ["y"], ["z"])],
        "fn",
        [vi("x", F, [2])],
        [vi("z", F, None)],
    )
    return _model(graph, functions=[fn], extra_opsets=[helper.make_opsetid("local.fns", 1)])


def _op_model(op: str, domain: str, explicit: bool = False) -> onnx.ModelProto:
    """``Relu`` then an op of ``domain`` (onnx's inference cannot type its output); ``explicit``: the
    Relu's domain spelled ``ai.onnx``."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], domain="ai.onnx" if explicit else ""),
        helper.make_node(op, ["r"], ["y"], domain=domain),
    ]
    graph = helper.make_graph(nodes, "op", [vi("x", F, [2, 3])], [vi("y", F, None)])
    extra = [helper.make_opsetid(domain, 1)] if domain not in ("", "com.microsoft") else []
    if explicit:
        extra.append(helper.make_opsetid("ai.onnx", 18))
    return _model(graph, extra_opsets=extra)


def _reshape_allowzero() -> onnx.ModelProto:
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [2, -1])
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1, name="view")
    graph = helper.make_graph([node], "rs", [vi("x", F, ["n", 4])], [vi("y", F, None)], [shape])
    return _model(graph)


MODELS = {
    "chain": _chain,
    "unsorted": lambda: _chain(reverse=True),
    "if": _if_model,
    "loop": _loop_model,
    "loop_unknown_op": lambda: _loop_model("Mystery", "foo.bar"),
    "function": _function_model,
    "ort_only": lambda: _op_model("Gelu", "com.microsoft"),
    "unknown": lambda: _op_model("Mystery", "foo.bar"),
    "ai_onnx_domain": lambda: _op_model("Neg", "", explicit=True),
    "reshape_allowzero": _reshape_allowzero,
}


def _walk_missing(graph: onnx.GraphProto) -> list[str]:
    """The node outputs ``_add_ort_types`` walks for: untyped or of unknown rank, not initializers."""
    typed = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
    inits = {t.name for t in graph.initializer}
    return [
        name
        for node in graph.node
        for name in node.output
        if name and name not in inits and shapes_info._lacks_rank(typed.get(name))
    ]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_rank_shortcut_answers_as_the_walk(name: str) -> None:
    model = MODELS[name]()
    for graph in (model.graph, onnx.shape_inference.infer_shapes(model).graph):
        assert shapes_info._may_lack_ranks(graph) == bool(_walk_missing(graph))
        outputs, typed = declared_types(graph)  # type: ignore[misc]
        assert outputs == [o for n in graph.node for o in n.output]
        walked = {
            v.name: v.type.SerializeToString() for v in (*graph.input, *graph.value_info, *graph.output)
        }
        assert typed == walked


def test_rank_shortcut_sees_the_untyped_outputs() -> None:
    inferred = onnx.shape_inference.infer_shapes(MODELS["ort_only"]()).graph
    assert _walk_missing(inferred) == ["y"]  # onnx cannot type com.microsoft's Gelu
    assert shapes_info._may_lack_ranks(inferred)
    assert not shapes_info._may_lack_ranks(onnx.shape_inference.infer_shapes(_chain()).graph)


def test_columns_refuse_a_value_without_its_type() -> None:
    graph = onnx.shape_inference.infer_shapes(_chain()).graph
    graph.value_info.add().name = "bare"  # no type field: names and types would not pair up
    assert declared_types(graph) is None
    assert shapes_info._may_lack_ranks(graph)  # the walk decides


def test_flat_ops_only_for_a_graph_without_subgraphs() -> None:
    assert flat_ops(MODELS["if"]().graph) is None
    assert flat_ops(MODELS["loop"]().graph) is None
    assert flat_ops(MODELS["function"]().graph) == ({"Twice", "Relu"}, {"local.fns", ""})
    assert flat_ops(MODELS["ai_onnx_domain"]().graph) == ({"Relu", "Neg"}, {"ai.onnx", ""})


@pytest.mark.parametrize("name", sorted(MODELS))
def test_unknown_operators_answers_as_the_walk(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS[name]()
    fast = ort_errors.unknown_operators(model)
    monkeypatch.setattr(ort_errors, "flat_ops", lambda graph: None)
    assert fast == ort_errors.unknown_operators(model)


def test_unknown_operators_still_finds_an_unknown_op() -> None:
    found = ort_errors.unknown_operators(MODELS["unknown"]())
    assert [(u.domain, u.op_type) for u in found] == [("foo.bar", "Mystery")]
    found = ort_errors.unknown_operators(MODELS["loop_unknown_op"]())
    assert [(u.domain, u.op_type) for u in found] == [("foo.bar", "Mystery")]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_session_refusals_answers_as_the_walk(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS[name]()
    fast = ep_refusals.session_refusals(model)
    monkeypatch.setattr(ep_refusals, "op_types_among", lambda graph, wanted: frozenset(wanted))
    assert fast == ep_refusals.session_refusals(model)


def test_session_refusals_still_finds_a_refused_form() -> None:
    found = ep_refusals.session_refusals(MODELS["reshape_allowzero"]())
    assert [(node, r.code) for node, r in found] == [("view", "EP_REFUSES_RESHAPE_ALLOWZERO")]
