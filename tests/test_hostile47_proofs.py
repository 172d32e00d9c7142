"""hostile47: more adversarial graphs for the non-negativity proof (model/nonnegative.py), each feeding a
gather whose indices turn negative (or out of range) on later runs: duplicate initializers (onnxruntime
takes the last), a Constant node and an initializer of one name (onnxruntime takes the Constant), a sparse
and a dense initializer of one name, narrowing and unsigned Casts after Relu, a bool Cast, Mod by a
negative divisor, Where with one negated branch, TopK's values, Concat with an unproved part, a gather of
unproved data by proved indices, Pad with a negative constant. Every run must agree with onnxruntime CPU
(unoptimized, one thread) bit for bit, in refusal too, and a run whose indices are negative must not be
recorded as a gather taken from onnxruntime by a proof (feature level 2_1, where DirectML refuses negative
indices). All held when tried; kept as tests. Also: Range -> Gather past the axis, which onnxruntime's
CPU-only GatherToSliceFusion clamps at its default level, refused by default and clamped in clamp mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.test_hostile8_given_gathers import _model, _outcome
from tests.test_hostile9_proofs import NOTE, _int, _node, oracle_indices, ort_session

vi = helper.make_tensor_value_info
K = vi("k", T.INT64, [3])
X = np.arange(32, dtype=np.float32).reshape(4, 8)
RUNS = [np.array([0, 1, 2])] * 4 + [
    np.array([2**32 - 1, 3, 1]),
    np.array([-1, 0, 1]),
    np.array([-(2**63), 0, 1]),
]


def _opset17(model: onnx.ModelProto) -> None:
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 17))


def _append_init(name: str, value: int) -> Callable[[onnx.ModelProto], None]:
    return lambda m: m.graph.initializer.append(_int(name, value))


def _insert_init(name: str, value: int) -> Callable[[onnx.ModelProto], None]:
    return lambda m: m.graph.initializer.insert(0, _int(name, value))


def _sparse_lo(model: onnx.ModelProto) -> None:
    values = numpy_helper.from_array(np.array([-5], np.int64), "lo")
    where = numpy_helper.from_array(np.array([0], np.int64), "")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, where, [1]))


def _cast(src: str, out: str, to: int) -> onnx.NodeProto:
    return _node("Cast", [src], out, to=to)


CASES: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto], Any]] = {
    "duplicate_initializer_last_negative": (
        [_node("Clip", ["k", "lo"], "idx")], [_int("lo", 0)], _append_init("lo", -5)),
    "duplicate_initializer_first_negative": (
        [_node("Clip", ["k", "lo"], "idx")], [_int("lo", 0)], _insert_init("lo", -5)),
    "sparse_and_dense_initializer": (
        [_node("Max", ["k", "lo"], "idx")], [_int("lo", [0])], _sparse_lo),
    "constant_node_shadows_initializer": (
        [helper.make_node("Constant", [], ["lo"], value_int=-5), _node("Max", ["k", "lo"], "idx")],
        [_int("lo", 0)], None),
    "relu_int8_widened": (
        [_cast("k", "k8", T.INT8), _node("Relu", ["k8"], "r"), _cast("r", "idx", T.INT64)], [], None),
    "relu_int32_unsigned_widened": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _cast("r", "u", T.UINT32),
         _cast("u", "idx", T.INT64)], [], None),
    "bool_cast": ([_cast("k", "b", T.BOOL), _cast("b", "idx", T.INT64)], [], None),
    "max_of_relu_and_negation": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _node("Neg", ["k32"], "n"),
         _node("Max", ["n", "r"], "idx")], [], None),
    "mod_by_a_negative_divisor": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _node("Mod", ["r", "m"], "idx")],
        [_int("m", -3, np.int32)], None),
    "where_with_a_negated_branch": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _node("Neg", ["r"], "n"),
         _node("Where", ["c", "r", "n"], "idx")],
        [numpy_helper.from_array(np.array([True, True, False]), "c")], None),
    "topk_values": (
        [_cast("k", "kf", T.FLOAT), helper.make_node("TopK", ["kf", "kk"], ["v", "i"], name="topk"),
         _cast("v", "idx", T.INT64)], [_int("kk", [3])], None),
    "concat_with_an_unproved_part": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _node("Slice", ["k32", "s0", "s1"], "sl"),
         _node("Concat", ["r", "sl"], "idx", axis=0)], [_int("s0", [0]), _int("s1", [1])], None),
    "gather_of_unproved_data_by_proved_indices": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"),
         _node("Gather", ["k32", "r"], "idx", axis=0)], [], None),
    "pad_with_a_negative_constant": (
        [_cast("k", "k32", T.INT32), _node("Relu", ["k32"], "r"), _node("Pad", ["r", "pads", "cv"], "idx")],
        [_int("pads", [1, 0]), _int("cv", -1, np.int32)], None),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_graphs_prove_nothing_they_should_not(case: str) -> None:
    nodes, inits, fix = CASES[case]
    graph_nodes = [
        *nodes,
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = _model(graph_nodes, [vi("x", T.FLOAT, ["N", 8]), K], ["y"], inits)
    _opset17(model)
    if fix is not None:
        fix(model)
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString(), feature_level="2_1")
    for run, k in enumerate(RUNS):
        feeds = {"x": X, "k": k}
        want = _outcome(lambda feeds=feeds: oracle.run(None, feeds))
        got = _outcome(lambda feeds=feeds: session.run(None, feeds))
        assert got[0] == want[0], (case, run, got, want)
        if got[0] != "ok":
            continue
        assert got[1] == want[1], (case, run)
        record = session.last_run_record
        assert record is not None
        (node,) = [n for n in record.nodes if n.name == "gather"]
        idx = oracle_indices(model, feeds)
        if idx.size and idx.min() < 0:
            assert NOTE not in [note[0] for note in node.notes], (case, run, idx)


def _range_gather() -> bytes:
    nodes = [
        helper.make_node("Range", ["s", "l", "d"], ["r"], name="range"),
        helper.make_node("Gather", ["x", "r"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "h47",
        [vi("x", T.FLOAT, ["N", "M"]), vi("l", T.INT64, [])],
        [vi("y", T.FLOAT, None)],
        [_int("s", 0), _int("d", 1)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_range_gather_past_the_axis_is_refused_or_clamped_never_sliced() -> None:
    """onnxruntime at its default level (CPU-only GatherToSliceFusion) returns the 4 rows a Slice keeps;
    unoptimized it refuses index 4, as ONNX and DirectML (error mode) do; clamp mode repeats the last row."""
    model = _range_gather()
    x = np.arange(4 * 600, dtype=np.float32).reshape(4, 600)
    good, bad = {"x": x, "l": np.array(3)}, {"x": x, "l": np.array(10)}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(Exception, match=r"out of data bounds|indices element"):
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, bad)
    error_mode = dmlshim.InferenceSession(model)
    clamp_mode = dmlshim.InferenceSession(model, index_mode="clamp")
    for _ in range(5):
        error_mode.run(None, good)
        clamp_mode.run(None, good)
    with pytest.raises(dmlshim.IndexOutOfRangeError):
        error_mode.run(None, bad)
    (got,) = clamp_mode.run(None, bad)
    assert got.tobytes() == (-x[np.arange(10).clip(0, 3)]).tobytes()
