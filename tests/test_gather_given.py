"""Large gathers in the whole-model check (dmlshim.execute.proofs.gather_given): run and compared with
onnxruntime bit for bit on a session's first runs, later taken as onnxruntime computed them once every
index is proved in range. Expected outputs come from onnxruntime CPU (one intra-op thread)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan import steps
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN, output_is_given
from tests.oracle import IR_VERSION, assert_same_bits, node_notes, ort_run, tamper_with_check
from tests.test_session_models import make_model


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _elements_model() -> onnx.ModelProto:
    """Relu -> GatherElements along the last axis (DeBERTa's relative-position pattern) -> Neg; the
    batch dimension is symbolic."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("GatherElements", ["r", "idx"], ["g"], name="gather", axis=-1),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = make_model(
        nodes, {"x": (TensorProto.FLOAT, ["b", 64, 512]), "idx": (TensorProto.INT64, ["b", 64, 128])}, ["y"]
    )
    assert model.ir_version == IR_VERSION
    return model


def _elements_feeds(batch: int = 24, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, k = np.arange(64)[:, None], np.arange(128)[None, :]
    idx = np.clip(k - q + 256, 0, 511).astype(np.int64)
    return {
        "x": rng.standard_normal((batch, 64, 512)).astype(np.float32),
        "idx": np.ascontiguousarray(np.broadcast_to(idx, (batch, 64, 128))),
    }


def test_a_gather_is_compared_on_the_first_runs_then_taken_from_onnxruntime() -> None:
    model, feeds = _elements_model(), _elements_feeds()
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for _ in range(steps.PROVE_RUNS):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == "whole-model check" and node_notes(session) == [[]]
    assert_same_bits(session.run(None, feeds), want)
    assert session.last_run_record.path == "whole-model check"
    assert node_notes(session) == [[NOTE_GATHER_GIVEN]]
    assert f"first {steps.PROVE_RUNS} runs" in session.last_run_record.nodes[0].notes[0][1]
    # Other shapes start the proof again: the kernel runs for them first.
    other = _elements_feeds(batch=20, seed=1)
    assert_same_bits(session.run(None, other), ort_run(model, other))
    assert node_notes(session) == [[]]


def test_negative_indices_are_always_computed_by_the_kernel() -> None:
    model, feeds = _elements_model(), _elements_feeds()
    feeds["idx"] = feeds["idx"] - 512  # the same elements, written as ONNX's negative indices
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for _ in range(steps.PROVE_RUNS + 2):
        assert_same_bits(session.run(None, feeds), want)
        (node,) = session.last_run_record.nodes
        assert node.notes == () and node.negative_indices


def test_full_check_compares_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    model, feeds = _elements_model(), _elements_feeds()
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for _ in range(steps.PROVE_RUNS + 2):
        assert_same_bits(session.run(None, feeds), want)
        assert node_notes(session) == [[]]

    # A wrong element from onnxruntime is caught by the comparison: the partitions answer, correctly.
    def change(g: np.ndarray) -> None:
        g.reshape(-1)[5] += 1.0

    tamper_with_check(session, "g", change)
    assert_same_bits(session.run(None, feeds), want)
    assert session.last_run_record.path == "partitioned"


def test_an_embedding_gather_is_taken_too() -> None:
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Relu", ["table"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "ids"], ["g"], name="gather", axis=0),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = make_model(
        nodes, {"table": (TensorProto.FLOAT, [1000, 256]), "ids": (TensorProto.INT32, [2, 300])}, ["y"]
    )
    feeds = {
        "table": rng.standard_normal((1000, 256)).astype(np.float32),
        "ids": rng.integers(0, 1000, (2, 300)).astype(np.int32),
    }
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for _ in range(steps.PROVE_RUNS):
        assert_same_bits(session.run(None, feeds), want)
    assert_same_bits(session.run(None, feeds), want)
    assert node_notes(session) == [[NOTE_GATHER_GIVEN]]


def test_output_is_given_only_for_in_range_integer_indices_and_the_nodes_shape() -> None:
    data = np.zeros((4, 8), np.float32)
    idx = np.array([[0, 7], [1, 2], [3, 3], [7, 0]], np.int64)
    out = np.zeros((4, 2), np.float32)
    attrs = {"axis": 1}
    assert output_is_given("GatherElements", attrs, [data, idx], out)
    assert output_is_given("GatherElements", {"axis": -1}, [data, idx.astype(np.uint64)], out)
    assert not output_is_given("GatherElements", attrs, [data, idx - 8], out)  # negative: ONNX wraps
    assert not output_is_given("GatherElements", attrs, [data, idx + 1], out)  # 8 is out of range
    assert not output_is_given("GatherElements", attrs, [data, idx], out.astype(np.float64))
    assert not output_is_given("GatherElements", attrs, [data, idx], out.T)
    assert not output_is_given("GatherElements", {"axis": 2}, [data, idx], out)
    assert not output_is_given("GatherElements", attrs, [data, idx.astype(np.float32)], out)
    assert not output_is_given("ScatterElements", attrs, [data, idx], out)
    rows = np.array([[3, 0, 3]], np.int32)
    assert output_is_given("Gather", {}, [data, rows], np.zeros((1, 3, 8), np.float32))
    assert not output_is_given("Gather", {}, [data, rows], np.zeros((3, 8), np.float32))
    assert not output_is_given("Gather", {}, [data, rows + 1], np.zeros((1, 3, 8), np.float32))
