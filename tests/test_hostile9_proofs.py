"""hostile9: the non-negativity proofs (model/nonnegative.py) against adversarial bounds: a Clip whose min
exceeds its max, bounds a caller may feed, bounds from Constant nodes, narrowing and unsigned Casts, Max,
Min, Where, Abs, a Range by a negative step. Each model's gather reads indices that are negative on the
later runs; every run must agree with onnxruntime CPU bit for bit, and a run whose indices are negative
must not be recorded as a gather taken from onnxruntime by a proof (its data is symbolic, so a proved
gather would be taken by its inputs' shapes alone).

The oracle runs unoptimized: onnxruntime's CPU-only GatherToSliceFusion turns ``Range -> Gather`` into a
Slice, which reads a negative Range limit as counting from the end (``Range(2, -1, -1)`` selects rows 2, 1,
0; the Slice selects none) and clamps an index past the axis instead of refusing it. That fusion is not
registered for the DirectML provider, so onnxruntime-directml runs the Gather, as dmlshim does."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.test_hostile8_given_gathers import _model, _outcome

vi = helper.make_tensor_value_info
NOTE = "output_from_onnxruntime"


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """onnxruntime CPU, one thread, no graph optimization (see the module docstring)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _int(name: str, value: Any, dtype: Any = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _node(op: str, inputs: list[str], output: str, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=f"{op}_{output}", **attrs)


K = vi("k", T.INT64, [3])
CASES: dict[str, tuple[list[onnx.NodeProto], list[Any], list[onnx.TensorProto]]] = {
    "clip_min_above_max": ([_node("Clip", ["k", "lo", "hi"], "idx")], [K], [_int("lo", 3), _int("hi", -1)]),
    "clip_max_only": ([_node("Clip", ["k", "", "hi"], "idx")], [K], [_int("hi", 2)]),
    "clip_fed_min": (
        [_node("Clip", ["k", "lo"], "idx")],
        [K, vi("lo", T.INT64, [])],
        [_int("lo", 0)],
    ),
    "clip_min_from_a_fed_max": (
        [_node("Max", ["m", "lo0"], "lo"), _node("Clip", ["k", "lo"], "idx")],
        [K, vi("m", T.INT64, [])],
        [_int("lo0", -5)],
    ),
    "clip_then_narrowing_cast": (
        [_node("Clip", ["k", "lo"], "c"), _node("Cast", ["c"], "idx", to=T.INT32)],
        [K],
        [_int("lo", 0)],
    ),
    "unsigned_then_same_width_signed": (
        [_node("Cast", ["k"], "u", to=T.UINT32), _node("Cast", ["u"], "idx", to=T.INT32)],
        [K],
        [],
    ),
    "max_of_two_unproved": ([_node("Max", ["k", "z"], "idx")], [K], [_int("z", [0, -5, 1])]),
    "min_with_a_nonnegative_constant": ([_node("Min", ["k", "z"], "idx")], [K], [_int("z", 4)]),
    "where_one_branch_unproved": (
        [_node("Clip", ["k", "lo"], "r"), _node("Where", ["c", "r", "k"], "idx")],
        [K, vi("c", T.BOOL, [3])],
        [_int("lo", 0)],
    ),
    "abs": ([_node("Abs", ["k"], "idx")], [K], []),
    "range_by_a_negative_step": (
        [_node("Range", ["s", "l", "d"], "idx")],
        [vi("l", T.INT64, [])],
        [_int("s", 2), _int("d", -1)],
    ),
}


def _feeds(run: int, rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(run)
    k = rng.integers(0, rows, 3) if run < 4 else np.array([np.iinfo(np.int64).min, -1, 2**32 - 1])
    if run == 5:
        k = np.array([-rows, -1, 1])
    return {
        "x": rng.standard_normal((rows, 8)).astype(np.float32),
        "k": k,
        "lo": np.array(0 if run < 4 else -2),
        "m": np.array(0 if run < 4 else -3),
        "c": np.array([True, False, run % 2 == 0]),
        "l": np.array(-1 if run < 4 else -rows - 1),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_bounds_prove_nothing_they_should_not(case: str) -> None:
    nodes, inputs, inits = CASES[case]
    graph_nodes = [
        *nodes,
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = _model(graph_nodes, [vi("x", T.FLOAT, ["N", 8]), *inputs], ["y"], inits)
    names = {v.name for v in model.graph.input}
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString(), feature_level="2_1")
    for run in range(7):
        feeds = {n: v for n, v in _feeds(run, 4).items() if n in names}
        want = _outcome(lambda feeds=feeds: oracle.run(None, feeds))
        got = _outcome(lambda feeds=feeds: session.run(None, feeds))
        assert got[0] == want[0], (case, run, got, want)
        if got[0] != "ok":
            continue
        assert got[1] == want[1], (case, run)
        (node,) = [n for n in session.last_run_record.nodes if n.name == "gather"]
        notes = [note[0] for note in node.notes]
        idx = oracle_indices(model, feeds)
        if idx.size and idx.min() < 0:
            assert NOTE not in notes, (case, run, idx, node)


def oracle_indices(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The gather's indices as onnxruntime computes them."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.add().name = "idx"
    return np.asarray(ort_session(probe).run(None, feeds)[0])


def test_a_range_gather_runs_as_onnx_and_directml_define_it() -> None:
    """Range(2, -1, -1) -> Gather selects rows 2, 1, 0 (ONNX; onnxruntime without optimization). At its
    default level onnxruntime CPU returns no row (the Slice it fused reads -1 as the last row); the fusion
    is CPU-only, so onnxruntime-directml runs the Gather, and dmlshim returns the three rows."""
    nodes, inputs, inits = CASES["range_by_a_negative_step"]
    gather = helper.make_node("Gather", ["x", "idx"], ["y"], axis=0, name="gather")
    model = _model([*nodes, gather], [vi("x", T.FLOAT, ["N", 2]), *inputs], ["y"], inits)
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(4, 2), "l": np.array(-1)}
    (want,) = ort_session(model).run(None, feeds)
    session = dmlshim.InferenceSession(model.SerializeToString())
    for _ in range(5):
        (got,) = session.run(None, feeds)
        assert got.shape == (3, 2) and got.tobytes() == want.tobytes()
