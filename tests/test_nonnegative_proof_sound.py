"""Every non-negativity proof is sound or absent (issue 35, part 4): the proof follows Clip, Max, Min,
Range, Concat, Where, Cast and the element movers exactly, with adversarial bounds: ``Clip(min=0,
max=-1)`` is -1 everywhere (max wins when min > max), and a bound that is an initializer the caller can
override (also a graph input) proves nothing. Values checked against onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.plan.segments import folded_constants
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from dmlshim.model.nonnegative import nonnegative_prover
from tests.oracle import IR_VERSION, ort_node, ort_run
from tests.oracle import assert_same_bits as _same
from tests.test_gather_lean import _feeds, _model, _notes, _one_thread


def _int(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _proved(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], fed: tuple[str, ...] = ()) -> object:
    """The prover of a graph with input ``x`` (int64 [4]) and the initializers ``fed`` also inputs."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.INT64, [4])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in fed]
    graph = helper.make_graph(nodes, "p", inputs, [], inits)
    consts = {t.name: t for t in inits}
    consts.update(folded_constants(graph))
    return nonnegative_prover(graph, consts, {"x": TensorProto.INT64, "r": TensorProto.INT64})


def test_clip_with_min_above_max_yields_max_in_onnxruntime() -> None:
    """What the proof must follow: onnxruntime's Clip gives max where min > max."""
    x = np.array([-5, 0, 3, 9], np.int64)
    got = ort_node("Clip", {"x": x, "min": np.array(0, np.int64), "max": np.array(-1, np.int64)}, opset=13)
    np.testing.assert_array_equal(got, [-1, -1, -1, -1])
    # the attribute form (before opset 11) with min > max is refused by onnxruntime outright
    with pytest.raises(Exception, match="min_ <= max_"):
        ort_node("Clip", {"x": x.astype(np.float32)}, {"min": 0.0, "max": -1.0}, opset=6)


CASES = [
    # (name, node, proved?)
    ("clip_lo_hi", helper.make_node("Clip", ["x", "zero", "three"], ["clip_lo_hi"]), True),
    ("clip_min_above_max", helper.make_node("Clip", ["x", "zero", "minus"], ["clip_min_above_max"]), False),
    ("clip_hi_only", helper.make_node("Clip", ["x", "", "three"], ["clip_hi_only"]), False),
    ("clip_lo_fed", helper.make_node("Clip", ["x", "lo_fed"], ["clip_lo_fed"]), False),
    ("clip_hi_fed", helper.make_node("Clip", ["x", "zero", "hi_fed"], ["clip_hi_fed"]), False),
    ("max_const", helper.make_node("Max", ["x", "zero"], ["max_const"]), True),
    ("max_fed", helper.make_node("Max", ["x", "lo_fed"], ["max_fed"]), False),
    ("max_two_bad", helper.make_node("Max", ["x", "minus"], ["max_two_bad"]), False),
    ("min_both", helper.make_node("Min", ["clip_lo_hi", "zero"], ["min_both"]), True),
    ("min_one_bad", helper.make_node("Min", ["clip_lo_hi", "minus"], ["min_one_bad"]), False),
    ("min_fed", helper.make_node("Min", ["clip_lo_hi", "lo_fed"], ["min_fed"]), False),
    ("range_ok", helper.make_node("Range", ["zero", "three", "one"], ["range_ok"]), True),
    ("range_fed_start", helper.make_node("Range", ["lo_fed", "three", "one"], ["range_fed_start"]), False),
    ("range_fed_step", helper.make_node("Range", ["zero", "three", "step_fed"], ["range_fed_step"]), False),
    ("concat_fed", helper.make_node("Concat", ["clip_lo_hi", "lo_fed1"], ["concat_fed"], axis=0), False),
    ("where_fed", helper.make_node("Where", ["cond", "clip_lo_hi", "lo_fed1"], ["where_fed"]), False),
    ("expand_fed", helper.make_node("Expand", ["lo_fed", "shape"], ["expand_fed"]), False),
    ("cast_fed", helper.make_node("Cast", ["lo_fed"], ["cast_fed"], to=TensorProto.INT64), False),
    ("relu", helper.make_node("Relu", ["x"], ["relu"]), True),
    ("fed_itself", None, False),
]


def test_each_operator_with_adversarial_bounds() -> None:
    inits = [
        _int("zero", 0), _int("one", 1), _int("three", 3), _int("minus", -1), _int("lo_fed", 0),
        _int("hi_fed", 2), _int("step_fed", 1), _int("lo_fed1", [0]), _int("shape", [4]),
        numpy_helper.from_array(np.array([True, False, True, False]), "cond"),
    ]  # fmt: skip
    nodes = [node for _, node, _ in CASES if node is not None]
    proved = _proved(nodes, inits, fed=("lo_fed", "hi_fed", "step_fed", "lo_fed1"))
    wrong = [name for name, _, expected in CASES if name != "fed_itself" and proved(name) != expected]
    assert wrong == []
    assert not proved("lo_fed")  # a default the caller may replace


def test_clip_min_above_max_keeps_the_kernel_and_matches_onnxruntime() -> None:
    """Every index is -1 (max wins): never recorded as "cannot be negative"; the kernel computes the
    gather and the check compares it, with onnxruntime's values."""
    model = _model(clip_min=0, clip_max=-1)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for batch, seq in ((2, 128), (1, 64)):
        feeds = _feeds(batch, seq)
        _same(session.run(None, feeds), ort_run(model, feeds))
        assert NOTE_GATHER_GIVEN not in _notes(session)


def _overridable(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT64, []))
    return out


@pytest.mark.parametrize(("bound", "fed"), [("lo", -3), ("hi", -1)])
def test_a_clip_bound_the_caller_feeds_negative_proves_nothing(bound: str, fed: int) -> None:
    model = _overridable(_model(), bound)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    feeds = {**_feeds(), bound: np.array(fed, np.int64)}
    theirs = ort.InferenceSession(
        model.SerializeToString(), _one_thread(), providers=["CPUExecutionProvider"]
    )
    _same(session.run(None, feeds), theirs.run(None, feeds))
    assert NOTE_GATHER_GIVEN not in _notes(session)


def test_a_max_bound_the_caller_feeds_negative_proves_nothing() -> None:
    """Max(positions, c) with ``c`` an overridable initializer: fed negative, indices go negative."""
    model = _model(clip_min=-(2**20))  # the Clip proves nothing itself
    graph = model.graph
    clip = next(n for n in graph.node if n.op_type == "Clip")
    clip.output[0] = "clipped0"
    graph.node.insert(
        list(graph.node).index(clip) + 1, helper.make_node("Max", ["clipped0", "c"], ["clipped"])
    )
    graph.initializer.append(_int("c", 0))
    model = _overridable(model, "c")
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    feeds = {**_feeds(), "c": np.array(-7, np.int64)}
    theirs = ort.InferenceSession(
        model.SerializeToString(), _one_thread(), providers=["CPUExecutionProvider"]
    )
    _same(session.run(None, feeds), theirs.run(None, feeds))
    assert NOTE_GATHER_GIVEN not in _notes(session)
    assert model.ir_version == IR_VERSION
