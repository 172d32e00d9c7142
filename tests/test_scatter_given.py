"""Large scatters in the whole-model check (dmlshim.execute.proofs.scatter_given): verified against the
DirectML kernel on a session's first runs, later taken as onnxruntime computed them when the indices prove
that ONNX and DirectML define the same output. Expected outputs come from onnxruntime CPU (one thread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan import steps
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from dmlshim.execute.proofs.scatter_given import scatter_output_is_given
from tests.oracle import IR_VERSION, assert_same_bits, ort_run, tamper_with_check
from tests.test_session_models import make_model

HEADS, MAX_LEN, DIM = 4, 256, 128  # a 512 KiB float32 cache: the size the check verifies in place


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _elements_cache_model(tokens: int = 1) -> onnx.ModelProto:
    """A static KV-cache update as Llama exports write it: the positions unsqueezed and expanded over
    heads and head_dim, ScatterElements along the sequence axis, the cache an output and read on."""
    nodes = [
        helper.make_node("Unsqueeze", ["pos", "axes"], ["p4"], name="unsqueeze"),
        helper.make_node("Expand", ["p4", "shape"], ["idx"], name="expand"),
        helper.make_node("ScatterElements", ["cache", "idx", "new"], ["present"], name="update", axis=2),
        helper.make_node("ReduceSum", ["present"], ["total"], name="sum", keepdims=0),
    ]
    model = make_model(
        nodes,
        {
            "cache": (TensorProto.FLOAT, [1, HEADS, MAX_LEN, DIM]),
            "pos": (TensorProto.INT64, [tokens]),
            "new": (TensorProto.FLOAT, [1, HEADS, tokens, DIM]),
        },
        ["present", "total"],
    )
    model.graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.array([0, 1, 3], np.int64), "axes"),
            onnx.numpy_helper.from_array(np.array([1, HEADS, tokens, DIM], np.int64), "shape"),
        ]
    )
    assert model.ir_version == IR_VERSION
    return model


def _nd_cache_model() -> onnx.ModelProto:
    """The same update as ScatterND over (batch, head) rows of a [heads, max_len, dim] cache: index tuples
    (head, position); the cache read through a Neg, so that the model has a segment before the scatter."""
    nodes = [
        helper.make_node("Neg", ["cache"], ["past"], name="neg"),
        helper.make_node("ScatterND", ["past", "idx", "new"], ["present"], name="update"),
        helper.make_node("ReduceSum", ["present"], ["total"], name="sum", keepdims=0),
    ]
    return make_model(
        nodes,
        {
            "cache": (TensorProto.FLOAT, [HEADS, MAX_LEN, DIM]),
            "idx": (TensorProto.INT64, [HEADS, 2]),
            "new": (TensorProto.FLOAT, [HEADS, DIM]),
        },
        ["present", "total"],
    )


def _feeds(positions: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "cache": rng.standard_normal((1, HEADS, MAX_LEN, DIM)).astype(np.float32),
        "pos": np.array(positions, np.int64),
        "new": rng.standard_normal((1, HEADS, len(positions), DIM)).astype(np.float32),
    }


def _nd_feeds(positions: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    heads = np.arange(HEADS) % len(positions) if len(set(positions)) < len(positions) else np.arange(HEADS)
    return {
        "cache": rng.standard_normal((HEADS, MAX_LEN, DIM)).astype(np.float32),
        "idx": np.stack([heads, np.resize(np.array(positions), HEADS)], axis=1).astype(np.int64),
        "new": rng.standard_normal((HEADS, DIM)).astype(np.float32),
    }


def _update(session: Any) -> Any:
    (node,) = [n for n in session.last_run_record.nodes if n.op_type.startswith("Scatter")]
    return node


@pytest.mark.parametrize("nd", [False, True], ids=["ScatterElements", "ScatterND"])
def test_a_kv_cache_scatter_is_taken_from_onnxruntime_when_its_indices_prove_it(nd: bool) -> None:
    model = _nd_cache_model() if nd else _elements_cache_model()
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for step in range(steps.PROVE_RUNS + 2):
        feeds = _nd_feeds([17 + step], seed=step) if nd else _feeds([17 + step], seed=step)
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        node = _update(session)
        assert session.last_run_record.path == "whole-model check"
        assert node.placement == "dml" and node.duplicate_indices == 0 and not node.negative_indices
        assert node.operator == ("DML_OPERATOR_SCATTER_ND" if nd else "DML_OPERATOR_SCATTER")
        assert [code for code, _ in node.notes] == [NOTE_GATHER_GIVEN]
        assert "in range (onnxruntime refuses any other), non-negative and written once" in node.notes[0][1]


def test_repeated_and_negative_positions_are_verified_by_the_kernel() -> None:
    model = _elements_cache_model(tokens=2)
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    # Both tokens written to position 5: onnxruntime and the kernel agree (the last write wins), and the
    # record counts the overwritten writes (one per head and head_dim element) instead of taking it.
    for seed in range(steps.PROVE_RUNS + 1):
        feeds = _feeds([5, 5], seed=seed)
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        node = _update(session)
        assert session.last_run_record.path == "whole-model check"
        assert node.duplicate_indices == HEADS * DIM
        assert NOTE_GATHER_GIVEN not in [code for code, _ in node.notes]
    # ONNX's negative positions: verified by the kernel, and reported.
    feeds = _feeds([-1, -2], seed=8)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    node = _update(session)
    assert node.negative_indices and NOTE_GATHER_GIVEN not in [code for code, _ in node.notes]
    # Distinct non-negative positions: taken.
    feeds = _feeds([9, 10], seed=9)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert [code for code, _ in _update(session).notes] == [NOTE_GATHER_GIVEN]


def test_full_check_verifies_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    model = _elements_cache_model()
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for step in range(steps.PROVE_RUNS + 2):
        feeds = _feeds([step], seed=step)
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        assert _update(session).notes == ()

    # A wrong element from onnxruntime is caught by the kernel: the partitions answer, correctly.
    def change(present: np.ndarray) -> None:
        present[0, 1, 3, 0] += 1.0  # an element the scatter did not write

    tamper_with_check(session, "present", change)
    feeds = _feeds([7], seed=7)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert session.last_run_record.path == "partitioned"


def test_scatter_output_is_given_only_when_the_indices_prove_it() -> None:
    data = np.zeros((4, 8), np.float32)
    upd = np.ones((4, 2), np.float32)
    idx = np.array([[0, 7], [1, 2], [3, 4], [7, 0]], np.int64)
    out = np.zeros((4, 8), np.float32)
    given = scatter_output_is_given
    assert given("ScatterElements", {"axis": 1}, [data, idx, upd], out)
    assert given("ScatterElements", {"axis": -1}, [data, idx.astype(np.uint32), upd], out)
    assert not given("ScatterElements", {"axis": 1, "reduction": b"add"}, [data, idx, upd], out)
    assert not given("ScatterElements", {"axis": 1}, [data, idx - 8, upd], out)  # negative
    assert not given("ScatterElements", {"axis": 1}, [data, idx + 1, upd], out)  # 8 is past the axis
    assert not given("ScatterElements", {"axis": 1}, [data, idx[:, ::-1] * 0, upd], out)  # repeated
    assert not given("ScatterElements", {"axis": 1}, [data, idx, upd], out[:, :4])
    assert not given("ScatterElements", {"axis": 1}, [data, idx, upd], out.astype(np.float64))
    assert not given("GatherElements", {"axis": 1}, [data, idx, upd], out)
    # Along axis 0 the same column may repeat a row index in another column: distinct places.
    assert given("ScatterElements", {"axis": 0}, [data, np.array([[1, 1], [2, 2]]), upd[:2]], out)
    rows = np.zeros((4, 8), np.float32)
    assert given("ScatterND", {}, [rows, np.array([[0, 1], [3, 7]]), np.ones(2, np.float32)], rows)
    assert not given("ScatterND", {}, [rows, np.array([[3, 7], [3, 7]]), np.ones(2, np.float32)], rows)
    assert not given("ScatterND", {}, [rows, np.array([[4, 0]]), np.ones(1, np.float32)], rows)
    assert not given("ScatterND", {}, [rows, np.array([[0, -1]]), np.ones(1, np.float32)], rows)
    assert given("ScatterND", {}, [rows, np.array([[1], [2]]), np.ones((2, 8), np.float32)], rows)
    assert not given("ScatterND", {}, [rows, np.array([[2], [2]]), np.ones((2, 8), np.float32)], rows)
