"""Gathers whose indices the graph makes non-negative (dmlshim.model.nonnegative): the whole-model check
takes their output from onnxruntime and fetches only their inputs' shapes (dmlshim.execute.proofs.gather_given
``lean_gathers``). Expected outputs and refusals come from onnxruntime CPU (one intra-op thread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import DmlShimError
from dmlshim.execute.engines.whole_model import captured_names
from dmlshim.execute.plan.segments import folded_constants
from dmlshim.execute.proofs.gather_given import LEAN_MESSAGE, NOTE_GATHER_GIVEN, SHAPE_SUFFIX
from dmlshim.model.nonnegative import nonnegative_prover
from tests.oracle import IR_VERSION, assert_same_bits, ort_run

SPAN = 256


def _model(clip_min: int = 0, clip_max: int = 2 * SPAN - 1, op: str = "GatherElements") -> onnx.ModelProto:
    """DeBERTa's relative-position gather: positions from the query and key lengths, shifted by the span,
    clipped, expanded over batch and heads, and used along the last axis of the scores."""
    c = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("span", SPAN), ("lo", clip_min), ("hi", clip_max), ("zero", 0), ("one", 1))
    ]
    nodes = [
        helper.make_node("Shape", ["q"], ["qshape"], name="qs"),
        helper.make_node("Gather", ["qshape", "two"], ["qlen"], name="ql", axis=0),
        helper.make_node("Range", ["zero", "qlen", "one"], ["qpos"], name="qr"),
        helper.make_node("Unsqueeze", ["qpos", "axis1"], ["qcol"], name="qu"),
        helper.make_node("Sub", ["qcol", "qpos"], ["rel"], name="rel"),
        helper.make_node("Add", ["rel", "span"], ["shifted"], name="shift"),
        helper.make_node("Clip", ["shifted", "lo", "hi"], ["clipped"], name="clip"),
        helper.make_node("Shape", ["scores"], ["sshape"], name="ss"),
        helper.make_node("Slice", ["sshape", "s0", "s3"], ["lead"], name="lead"),
        helper.make_node("Shape", ["clipped"], ["cshape"], name="cs"),
        helper.make_node("Slice", ["cshape", "c1", "c2"], ["tail"], name="tail"),
        helper.make_node("Concat", ["lead", "tail"], ["eshape"], name="cat", axis=0),
        helper.make_node("Expand", ["clipped", "eshape"], ["idx"], name="expand"),
        helper.make_node("Relu", ["scores"], ["r"], name="relu"),
    ]
    if op == "GatherElements":
        nodes.append(helper.make_node("GatherElements", ["r", "idx"], ["g"], name="gather", axis=-1))
    else:  # a Gather along the last axis with the clipped positions
        nodes.append(helper.make_node("Gather", ["r", "clipped"], ["g"], name="gather", axis=-1))
    nodes.append(helper.make_node("Neg", ["g"], ["y"], name="neg"))
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("two", 2), ("axis1", [1]), ("s0", [0]), ("s3", [3]), ("c1", [1]), ("c2", [2]))
    ]
    graph = helper.make_graph(
        nodes,
        "lean",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["b", 12, "s", 2 * SPAN]),
            helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 12, "s", 64]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        c + consts,
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(batch: int = 2, seq: int = 128, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "scores": rng.standard_normal((batch, 12, seq, 2 * SPAN)).astype(np.float32),
        "q": rng.standard_normal((batch, 12, seq, 64)).astype(np.float32),
    }


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _notes(session: Any) -> list[str]:
    """The notes of the record of the node named "gather"."""
    node = next(n for n in session.last_run_record.nodes if n.name == "gather")
    return [code for code, _ in node.notes]


@pytest.mark.parametrize("op", ["GatherElements", "Gather"])
def test_a_gather_of_clipped_positions_is_onnxruntimes_from_the_first_run(op: str) -> None:
    model = _model(op=op)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for batch, seq in ((2, 128), (1, 200)):
        feeds = _feeds(batch, seq)
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        record = session.last_run_record
        assert record.path == "whole-model check"
        assert _notes(session) == [NOTE_GATHER_GIVEN]
        node = next(n for n in record.nodes if n.name == "gather")
        assert node.operator == f"DML_OPERATOR_{'GATHER_ELEMENTS' if op == 'GatherElements' else 'GATHER'}"
        assert node.notes[0][1] == LEAN_MESSAGE


def test_the_check_fetches_shapes_not_the_gathers_values() -> None:
    model = _model()
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    fetched = session.engine._check._fetch  # type: ignore[attr-defined]
    assert sorted(fetched) == ["idx" + SHAPE_SUFFIX, "r" + SHAPE_SUFFIX, "y"]


def test_a_negative_clip_bound_keeps_the_kernel_and_the_comparison() -> None:
    model = _model(clip_min=-3)
    feeds = _feeds()
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert _notes(session) == []  # computed by the kernel and compared on this first run
    assert "r" in session.engine._check._fetch  # type: ignore[attr-defined]


def test_full_check_computes_the_lean_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    model, feeds = _model(), _feeds()
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert _notes(session) == []


def test_an_index_past_the_axis_is_refused_as_onnxruntime_refuses_it() -> None:
    model = _model(clip_max=4 * SPAN)  # positions up to 2 * SPAN + seq: past the axis of 2 * SPAN
    feeds = _feeds(seq=300)
    cpu = ["CPUExecutionProvider"]
    theirs = ort.InferenceSession(model.SerializeToString(), _one_thread(), providers=cpu)
    with pytest.raises(Exception, match=r"[Oo]ut of range|out of bounds"):
        theirs.run(None, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    with pytest.raises(DmlShimError, match="gather"):
        session.run(None, feeds)
    small = _feeds(seq=100)  # in range again: the same session answers as onnxruntime does
    assert_same_bits(session.run(None, small), ort_run(model, small))


def _prover(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [4])
    graph = helper.make_graph(nodes, "p", [x], [], inits)
    consts = {t.name: t for t in inits}
    consts.update(folded_constants(graph))
    types = {"x": TensorProto.INT64, "x32": TensorProto.INT32, "big": TensorProto.INT64}
    return nonnegative_prover(graph, consts, types)


def test_what_the_graph_proves_non_negative() -> None:
    zero, minus = (
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(-1, np.int64), "minus"),
    )
    nodes = [
        helper.make_node("Clip", ["x", "zero"], ["clipped"]),
        helper.make_node("Clip", ["x", "minus"], ["clipped_neg"]),
        helper.make_node("Clip", ["x"], ["unbounded"]),
        helper.make_node("ArgMax", ["x"], ["argmax"]),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"]),
        helper.make_node("Reshape", ["clipped", "shape"], ["reshaped"]),
        helper.make_node("Concat", ["clipped", "argmax"], ["both"], axis=0),
        helper.make_node("Concat", ["clipped", "x"], ["mixed"], axis=0),
        helper.make_node("Max", ["x", "zero"], ["max0"]),
        helper.make_node("Cast", ["clipped"], ["x32"], to=TensorProto.INT32),  # int64 -> int32 can wrap
        helper.make_node("Cast", ["x32"], ["big"], to=TensorProto.INT64),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([0, 3], np.int64))),
        helper.make_node("Neg", ["clipped"], ["negated"]),
        helper.make_node("Shape", ["x"], ["n"]),
        helper.make_node("Range", ["zero", "n", "k"], ["positions"]),
        helper.make_node("Range", ["n", "zero", "minus"], ["countdown"]),
    ]
    inits = [zero, minus, numpy_helper.from_array(np.array([1], np.int64), "k"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "shape")]  # fmt: skip
    proved = _prover(nodes, inits)
    yes = ["clipped", "argmax", "indices", "reshaped", "both", "max0", "c", "zero", "positions"]
    no = ["x", "clipped_neg", "unbounded", "values", "mixed", "x32", "big", "negated", "minus", "nope"]
    no.append("countdown")
    assert [n for n in yes if not proved(n)] == []
    assert [n for n in no if proved(n)] == []


def test_captured_names_keep_values_another_emulated_node_reads() -> None:
    class IO:
        def __init__(self, inputs: tuple[str, ...], output: str) -> None:
            self.inputs, self.output = inputs, output

    steps = [IO(("d", "i"), "g"), IO(("g", "j"), "h")]
    names = captured_names(steps, set(), ["h"], lean=frozenset({"g"}))
    assert names == ["d" + SHAPE_SUFFIX, "i" + SHAPE_SUFFIX, "g", "j"]


def _mask_model() -> onnx.ModelProto:
    """``x[x[:, 0] > 0]`` as exporters write boolean-mask indexing: NonZero, Transpose, GatherND."""
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    nodes = [
        helper.make_node("Gather", ["x", "zero"], ["first"], name="col", axis=1),
        helper.make_node("Greater", ["first", "fzero"], ["mask"], name="gt"),
        helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
        helper.make_node("Transpose", ["nz"], ["idx"], name="t", perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["rows"], name="gather"),
        helper.make_node("Relu", ["rows"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [zero, numpy_helper.from_array(np.array(0, np.float32), "fzero")],
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 13)])


def test_a_boolean_mask_gathernd_is_lean_and_an_empty_selection_still_answers() -> None:
    model = _mask_model()
    rng = np.random.default_rng(3)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for rows, sign in ((300, 1.0), (200, -1.0), (300, 1.0)):
        x = rng.standard_normal((rows, 4096)).astype(np.float32)
        if sign < 0:
            x[:, 0] = -np.abs(x[:, 0])  # nothing selected: an empty output
        feeds = {"x": x}
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        record = session.last_run_record
        assert record.path == "whole-model check"
        node = next(n for n in record.nodes if n.name == "gather")
        if sign < 0:  # no DirectML operator for an empty selection: recorded as the partitioned run would
            assert node.placement == "onnxruntime-cpu" and node.notes == ()
        else:
            assert node.operator == "DML_OPERATOR_GATHER_ND1" and _notes(session) == [NOTE_GATHER_GIVEN]


def _constant_index_model(index: Any, op: str = "Gather") -> onnx.ModelProto:
    """Neg -> a gather of rows by a constant index -> Abs; the row count is symbolic, so onnxruntime
    checks the index only when the run comes (or never, where it folds the gather into a Slice)."""
    nodes = [
        helper.make_node("Neg", ["x"], ["nx"], name="neg"),
        helper.make_node(op, ["nx", "i"], ["g"], name="gather", **({"axis": 0} if op == "Gather" else {})),
        helper.make_node("Abs", ["g"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "constant_index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 131072])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(index, np.int64), "i")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


@pytest.mark.parametrize(("op", "index"), [("Gather", [1]), ("Gather", 1), ("GatherND", [[1]])])
def test_a_constant_index_in_range_is_lean_and_one_past_the_axis_is_refused(op: str, index: Any) -> None:
    x = np.random.default_rng(4).standard_normal((2, 131072)).astype(np.float32)
    model = _constant_index_model(index, op)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    assert_same_bits(session.run(None, {"x": x}), ort_run(model, {"x": x}))
    assert session.last_run_record.path == "whole-model check" and _notes(session) == [NOTE_GATHER_GIVEN]
    # One row fewer: the constant index is past the axis; onnxruntime refuses the run, and so does dmlshim
    # (the check proves the constant in range on every run, and hands this one to the kernel).
    short = x[:1]
    cpu = ["CPUExecutionProvider"]
    with pytest.raises(Exception, match=r"out of (range|data bounds)|invalid ind(ex|ice)"):
        ort.InferenceSession(model.SerializeToString(), _one_thread(), providers=cpu).run(None, {"x": short})
    with pytest.raises(DmlShimError, match=r"index 1 .*out of range"):
        session.run(None, {"x": short})
    assert_same_bits(session.run(None, {"x": x}), ort_run(model, {"x": x}))


def test_a_negative_constant_index_keeps_the_kernel() -> None:
    x = np.random.default_rng(5).standard_normal((3, 131072)).astype(np.float32)
    model = _constant_index_model([-1])
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for _ in range(2):
        assert_same_bits(session.run(None, {"x": x}), ort_run(model, {"x": x}))
        assert _notes(session) == [] and session.last_run_record.nodes[0].negative_indices
