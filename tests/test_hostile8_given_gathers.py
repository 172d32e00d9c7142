"""hostile8: small gathers given by onnxruntime after the proved runs (execute/proofs/gather_given.py),
driven past run 3 with what a hostile caller changes between runs. Every run's outputs (or its refusal)
must be onnxruntime CPU's (one intra-op thread) bit for bit; clamp mode is left out (it differs from ONNX on
purpose, docs/semantics.md). All of these held when written: they guard the given path."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.oracle import IR_VERSION, ort_session

X = np.arange(24, dtype=np.float32).reshape(6, 4) * 0.5 - 3.0
GOOD = np.array([5, 0, 2], np.int64)
vi = helper.make_tensor_value_info


def _model(
    nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[str], inits: Any = ()
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "h8", inputs, [vi(n, T.UNDEFINED, None) for n in outputs], list(inits))
    for out in graph.output:
        out.ClearField("type")
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def _chain(
    op: str, attrs: dict[str, Any], dshape: list[Any], ishape: list[Any], *, both: bool = False
) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(op, ["r", "idx"], ["g"], name="gather", **attrs),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    inputs = [vi("x", T.FLOAT, dshape), vi("idx", T.INT64, ishape)]
    return _model(nodes, inputs, ["y", "g"] if both else ["y"])


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "ok", [(np.asarray(a).dtype, np.asarray(a).shape, np.asarray(a).tobytes()) for a in run()]
    except Exception as exc:
        return "refused", type(exc).__name__


def _agree(model: onnx.ModelProto, runs: list[dict[str, Any]], **kwargs: Any) -> dmlshim.InferenceSession:
    oracle = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString(), **kwargs)
    for i, feeds in enumerate(runs):
        want = _outcome(lambda feeds=feeds: oracle.run(None, feeds))
        got = _outcome(lambda feeds=feeds: session.run(None, feeds))
        assert got[0] == want[0], (i, got, want)
        if want[0] == "ok":
            assert got[1] == want[1], i
    return session


@pytest.mark.parametrize("level", ["2_1", "3_0", "5_0"])
def test_negative_then_out_of_range_after_the_proved_runs(level: str) -> None:
    model = _chain("Gather", {"axis": 0}, [6, 4], [3], both=True)
    runs = [{"x": X, "idx": GOOD}] * 4
    runs += [
        {"x": X, "idx": np.array([5, -1, 2])},
        {"x": X, "idx": np.array([6, 0, 0])},
        {"x": X, "idx": GOOD},
    ]
    runs += [
        {"x": X[::-1], "idx": GOOD},
        {"x": np.asfortranarray(X), "idx": GOOD[::-1]},
        {"x": X, "idx": GOOD},
    ]
    _agree(model, runs, feature_level=level)


@pytest.mark.parametrize("level", ["2_1", "3_0"])
def test_gathernd_batch_dims_negative_on_run_5(level: str) -> None:
    model = _chain("GatherND", {"batch_dims": 1}, [3, 4, 2], [3, 2, 1])
    data = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    idx = np.array([[[0], [3]], [[1], [2]], [[3], [3]]], np.int64)
    runs = [{"x": data, "idx": idx}] * 4 + [{"x": data, "idx": -1 - idx}, {"x": data, "idx": idx + 1}]
    _agree(model, [*runs, {"x": data, "idx": idx}], feature_level=level)


def test_shapes_changing_between_runs() -> None:
    model = _chain("Gather", {"axis": 1}, ["N", "M"], ["K"])
    rng = np.random.default_rng(8)
    runs = []
    for i in range(12):
        n, m = [(2, 3), (2, 3), (3, 5)][i % 3]
        runs.append(
            {"x": rng.standard_normal((n, m)).astype(np.float32), "idx": rng.integers(0, m, i % 4 + 1)}
        )
    runs += [{"x": np.ones((2, 3), np.float32), "idx": np.array([3])}, {"x": X, "idx": np.array([-4, 3])}]
    _agree(model, runs)


def test_returned_outputs_and_feeds_mutated_between_runs() -> None:
    model = _chain("GatherElements", {"axis": 1}, [6, 4], [6, 2], both=True)
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    x, idx = X.copy(), np.tile(np.array([[3, 1]], np.int64), (6, 1))
    for _ in range(7):
        got, want = session.run(None, {"x": x, "idx": idx}), oracle.run(None, {"x": x, "idx": idx})
        assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))
        for g in got:
            g[...] = 99.0
        x += 1.0


def test_ortvalue_feeds_after_the_proved_runs() -> None:
    model = _chain("Gather", {"axis": 0}, [6, 4], [3])
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    for i in range(7):
        idx = GOOD if i < 5 else np.array([5, -1, 2], np.int64)
        feeds = {"x": ort.OrtValue.ortvalue_from_numpy(X), "idx": ort.OrtValue.ortvalue_from_numpy(idx)}
        (got,) = session.run(None, feeds)
        (want,) = oracle.run(None, {"x": X, "idx": idx})
        assert np.asarray(got).tobytes() == want.tobytes()


def test_threads_racing_through_the_proved_runs() -> None:
    model = _chain("GatherElements", {"axis": 1}, [6, 4], [6, 2])
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    wrong: list[Any] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(12):
            x = rng.standard_normal((6, 4)).astype(np.float32)
            idx = rng.integers(-4 if i % 5 == 0 else 0, 4, (6, 2))
            (got,) = session.run(None, {"x": x, "idx": idx})
            (want,) = oracle.run(None, {"x": x, "idx": idx})
            if got.tobytes() != want.tobytes():
                wrong.append((seed, i))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_overridable_initializer_indices_fed_on_later_runs() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Gather", ["r", "idx"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    init = numpy_helper.from_array(np.array([1, 2], np.int64), "idx")
    model = _model(nodes, [vi("x", T.FLOAT, [6, 4]), vi("idx", T.INT64, [2])], ["y"], [init])
    runs: list[dict[str, Any]] = [{"x": X}] * 4
    runs += [{"x": X, "idx": np.array([5, 0])}, {"x": X}, {"x": X, "idx": np.array([-1, 0])}]
    _agree(model, [*runs, {"x": X, "idx": np.array([6, 0])}, {"x": X}])


def test_gathers_in_if_branches() -> None:
    then = helper.make_graph(
        [helper.make_node("Gather", ["x", "idx"], ["t"], axis=0)], "then", [], [vi("t", T.FLOAT, None)]
    )
    other = helper.make_node("GatherElements", ["x", "idx2"], ["t"], axis=1)
    orelse = helper.make_graph([other], "else", [], [vi("t", T.FLOAT, None)])
    nodes = [
        helper.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse),
        helper.make_node("Neg", ["o"], ["y"]),
    ]
    inputs = [
        vi("x", T.FLOAT, [6, 4]),
        vi("idx", T.INT64, [2]),
        vi("idx2", T.INT64, [6, 1]),
        vi("c", T.BOOL, []),
    ]
    model = _model(nodes, inputs, ["y"])

    def feeds(c: bool, idx: list[int], idx2: list[int]) -> dict[str, Any]:
        return {
            "x": X,
            "c": np.array(c),
            "idx": np.array(idx, np.int64),
            "idx2": np.array(idx2, np.int64).reshape(6, 1),
        }

    later = [
        feeds(False, [1, 2], [3, 2, 1, 0, -1, 0]),
        feeds(True, [-1, 2], [0] * 6),
        feeds(False, [0, 0], [4] * 6),
    ]
    _agree(model, [feeds(True, [1, 2], [0] * 6)] * 4 + later * 2)


def test_quantized_gather_with_a_symbol_shared_by_another_input() -> None:
    # The gather's data shape is resolved from the feed that declares N first; onnxruntime checks no
    # symbol across inputs, so that feed may disagree with the data's rows.
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "sc")
    zero = numpy_helper.from_array(np.array(3, np.uint8), "zp")
    nodes = [
        helper.make_node("Shape", ["z"], ["zs"]),
        helper.make_node("DequantizeLinear", ["xq", "sc", "zp"], ["xf"]),
        helper.make_node("Gather", ["xf", "idx"], ["g"], axis=0),
        helper.make_node("QuantizeLinear", ["g", "sc", "zp"], ["y"]),
    ]
    inputs = [vi("z", T.FLOAT, ["N"]), vi("xq", T.UINT8, ["N", 4]), vi("idx", T.INT64, ["K"])]
    model = _model(nodes, inputs, ["y", "zs"], [scale, zero])
    xq = np.arange(24, dtype=np.uint8).reshape(6, 4)

    def feeds(n: int, idx: list[int]) -> dict[str, Any]:
        return {"z": np.zeros(n, np.float32), "xq": xq, "idx": np.array(idx, np.int64)}

    runs = [feeds(6, [5, 0])] * 4 + [feeds(3, [5, 0]), feeds(9, [7, 0]), feeds(9, [-1, 0]), feeds(3, [-6, 0])]
    _agree(model, runs)


@pytest.mark.parametrize("level", ["2_1", "3_0"])
def test_gathernd_columns_at_their_dim_after_the_proved_runs(level: str) -> None:
    model = _chain("GatherND", {}, [6, 4], [3, 2])
    good = np.array([[5, 3], [0, 1], [2, 0]], np.int64)
    later = [[[5, 4]], [[6, 0]], [[0, 5]], [[-6, -4]], [[1, 7]]]
    runs = [{"x": X, "idx": good}] * 4
    runs += [{"x": X, "idx": np.concatenate([np.array(r, np.int64), good[1:]])} for r in later]
    _agree(model, [*runs, {"x": X, "idx": good}], feature_level=level)


@pytest.mark.parametrize("level", ["2_1", "3_0"])
def test_gather_elements_through_a_window_at_its_dim(level: str) -> None:
    model = _chain("GatherElements", {"axis": 0}, [6, 4], [2, 3])  # indices smaller on the other axis
    good = np.array([[5, 3, 0], [0, 1, 2]], np.int64)
    later = [[[6, 0, 0], [0, 0, 0]], [[-6, 0, 0], [0, 0, -1]], [[-7, 0, 0], [0, 0, 0]]]
    runs = [{"x": X, "idx": good}] * 4 + [{"x": X, "idx": np.array(r, np.int64)} for r in later]
    _agree(model, [*runs, {"x": X, "idx": good}], feature_level=level)


@pytest.mark.parametrize("level", ["2_1", "3_0"])
def test_index_extremes_after_the_proved_runs(level: str) -> None:
    model = _chain("Gather", {"axis": 0}, ["N", 4], ["K"])
    runs: list[dict[str, Any]] = [{"x": X, "idx": np.array([1, 2], np.int64)}] * 4
    for bad in (2**63 - 1, -(2**63), 2**32 + 1, -(2**32) + 1):
        runs.append({"x": X, "idx": np.array([bad, 0], np.int64)})
    runs += [
        {"x": X, "idx": np.zeros(0, np.int64)},
        {"x": np.zeros((0, 4), np.float32), "idx": np.zeros(0, np.int64)},
    ]
    _agree(model, [*runs, {"x": X, "idx": np.array([1, 2], np.int64)}], feature_level=level)
