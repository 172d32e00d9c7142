"""Small gathers whose indices the graph proves non-negative (issue 36, item 2): once the full check has
computed and compared them on their proved runs, the lean session takes them by their inputs' shapes, as
large lean gathers are: no proof of their indices on any later run (onnxruntime refuses an index outside
``[-dim, dim)``, and the graph proves none is negative). Indices the graph does not prove (a feed, a
Clip whose bound a caller can override, a Range, a constant) keep their per-run proof.

Expected values come from onnxruntime's own CPU session of the unmodified model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.engines.lean_check import lean_after_proof
from tests.oracle import same_bits

LEAN = "output_from_onnxruntime"


def _topk_model(source: str = "topk") -> onnx.ModelProto:
    """GatherElements(x, Expand(Unsqueeze(indices))) along axis 1 of a (2, 10, 8) feed, the indices a
    TopK's over a score of ``x`` (``source="topk"``), a Clip of that score with a ``lo`` the caller may
    override (``"clip"``), or a feed (``"feed"``)."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes2"], ["score"], keepdims=0),  # (2, 10)
        helper.make_node("TopK", ["score", "k"], ["top", "topi"], axis=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 10, 8])]
    inits = [
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axes2"),
        numpy_helper.from_array(np.array([3], dtype=np.int64), "k"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axes_u"),
        numpy_helper.from_array(np.array([2, 3, 8], dtype=np.int64), "shape"),
    ]
    if source == "topk":
        idx = "topi"
    elif source == "clip":
        nodes.append(helper.make_node("Clip", ["topi", "lo"], ["clipped"]))
        inits.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "lo"))
        inputs.append(helper.make_tensor_value_info("lo", TensorProto.INT64, []))  # overridable
        idx = "clipped"
    else:
        inputs.append(helper.make_tensor_value_info("fidx", TensorProto.INT64, [2, 3]))
        idx = "fidx"
    nodes += [
        helper.make_node("Unsqueeze", [idx, "axes_u"], ["u"]),
        helper.make_node("Expand", ["u", "shape"], ["e"]),
        helper.make_node("GatherElements", ["x", "e"], ["g"], axis=1),
        helper.make_node("Mul", ["g", "g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "lean_after", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int, source: str = "topk") -> dict[str, Any]:
    feeds: dict[str, Any] = {"x": np.random.default_rng(seed).standard_normal((2, 10, 8)).astype(np.float32)}
    if source == "feed":
        feeds["fidx"] = np.array([[seed % 10, 1, 2], [3, 9, seed % 7]], dtype=np.int64)
    return feeds


def _sessions(model: onnx.ModelProto) -> tuple[dmlshim.InferenceSession, ort.InferenceSession]:
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dmlshim.InferenceSession(model.SerializeToString()), reference


def test_topk_indices_proved_at_build_time_cost_no_proof_per_run() -> None:
    session, reference = _sessions(_topk_model())
    for seed in range(12):  # proved runs, given, lean, then the steady lane
        feeds = _feeds(seed)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), seed
    lane = session._engine._steady
    assert lane is not None and lane.proofs == () and lane.ranges == ()  # nothing proved per run
    node = next(n for n in session.last_run_record.nodes if n.op_type == "GatherElements")
    assert LEAN in {key for key, _ in node.notes}


@pytest.mark.parametrize("source", ["clip", "feed"])
def test_indices_the_graph_does_not_prove_keep_their_proof(source: str) -> None:
    model = _topk_model(source)
    session, reference = _sessions(model)
    for seed in range(12):
        feeds = _feeds(seed, source)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), seed
    lane = session._engine._steady
    assert lane is None or lane.proofs or lane.ranges  # the indices are proved on every run
    if source == "clip":  # a caller's negative lo reaches the gather: computed as before, same values
        feeds = {**_feeds(3, source), "lo": np.array(-12, dtype=np.int64)}
        assert same_bits(session.run(None, feeds), reference.run(None, feeds))


def _io(model: onnx.ModelProto) -> list[Any]:
    from dmlshim.execute.plan.checks import EmulatedIO

    return [
        EmulatedIO(n.name or n.output[0], n.op_type, tuple(n.input), n.output[0])
        for n in model.graph.node
        if n.op_type.startswith("Gather")
    ]


def test_only_feed_computed_proved_indices_qualify() -> None:
    from dmlshim.translate import infer_shapes
    from dmlshim.translate.shapes_info import tensor_infos

    for source, expected in (("topk", {"g"}), ("clip", set()), ("feed", set())):
        model = _topk_model(source)
        infos = tensor_infos(infer_shapes(model).graph)
        constants = {t.name: t for t in model.graph.initializer}
        found, _ = lean_after_proof(_io(model), (), infos, model.graph, constants)
        assert set(found) == expected, source
    # a Range's output (a Range -> Gather may become a Slice, which refuses nothing) does not qualify
    model = _topk_model()
    graph = model.graph
    for node in graph.node:
        if node.op_type == "Unsqueeze":
            node.input[0] = "r"
    graph.node.insert(2, helper.make_node("Range", ["zero", "topk_n", "one"], ["r0"]))
    graph.node.insert(3, helper.make_node("Reshape", ["r0", "two_three"], ["r"]))
    graph.node.insert(2, helper.make_node("ReduceMax", ["topi"], ["topk_n"], keepdims=0))
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
            numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
            numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "two_three"),
        ]
    )
    for node in graph.node:  # the Gather reads the Range directly
        if node.op_type == "Unsqueeze":
            node.input[0] = "r0"
    infos = tensor_infos(infer_shapes(model).graph)
    constants = {t.name: t for t in graph.initializer}
    io = [i for i in _io(model)]
    found, _ = lean_after_proof(
        [type(i)(i.name, i.op_type, ("x", "r0"), i.output) for i in io], (), infos, graph, constants
    )
    assert found == {}
