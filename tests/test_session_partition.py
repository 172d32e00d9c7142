"""Graph analysis of the partitioned engine: segments, their inputs and outputs."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from dmlshim import BadModelError
from dmlshim.execute.plan.partition import CpuSegment, EmulatedNode, outer_scope_inputs, partition_graph
from tests.test_session_models import chain_model, loop_model, make_model


def test_chain_partitions() -> None:
    model, _ = chain_model()
    p = partition_graph(model.graph, {1, 4}, available=["x", "upd"])
    kinds = [type(s).__name__ for s in p.steps]
    assert kinds == ["CpuSegment", "EmulatedNode", "CpuSegment", "EmulatedNode", "CpuSegment"]
    first, second, third = p.segments
    assert (first.nodes, first.inputs, first.outputs) == ((0,), ("x",), ("a",))
    assert (second.nodes, second.inputs, second.outputs) == ((2, 3), ("g",), ("r",))
    assert (third.nodes, third.inputs, third.outputs) == ((5,), ("s",), ("y",))
    assert p.steps[1] == EmulatedNode(1)


def test_independent_branches_share_segments() -> None:
    # Two gathers on x, each followed by a Relu, joined by an Add: one segment after both gathers.
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g1"], axis=0),
        helper.make_node("Gather", ["x", "j"], ["g2"], axis=0),
        helper.make_node("Relu", ["g1"], ["r1"]),
        helper.make_node("Relu", ["g2"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["y"]),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [3]), "i": (TensorProto.INT64, [2]), "j": (TensorProto.INT64, [2])},
        ["y"],
    )
    p = partition_graph(model.graph, {0, 1}, available=["x", "i", "j"])
    assert p.steps[:2] == (EmulatedNode(0), EmulatedNode(1))
    (seg,) = p.segments
    assert seg.nodes == (2, 3, 4) and set(seg.inputs) == {"g1", "g2"} and seg.outputs == ("y",)


def test_initializers_and_outer_scope_values() -> None:
    model, _ = loop_model()
    loop = model.graph.node[1]
    assert outer_scope_inputs(loop) == {"rows"}
    p = partition_graph(model.graph, {2}, available=["x", "acc0"])
    seg = p.segments[0]
    assert isinstance(seg, CpuSegment)
    assert set(seg.initializers) == {"trip", "cond"}
    assert "rows" not in seg.inputs  # produced inside the segment by Neg
    assert set(seg.outputs) == {"acc"}


def test_missing_value_is_a_bad_model() -> None:
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"])], {"x": (TensorProto.FLOAT, [1])}, ["y"])
    with pytest.raises(BadModelError, match="nowhere"):
        partition_graph(model.graph, set(), available=["x"])
