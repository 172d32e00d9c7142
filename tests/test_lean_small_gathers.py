"""Small gathers in the whole-model check (issue 36, item 2): computed by the kernel and compared with
onnxruntime on a session's first runs, later taken as onnxruntime computed them when every index is in
range on the run (the record notes it), whatever their size; one-node gather models take the check too.
Negative and out-of-range indices behave as before: computed by the kernel, or refused with the same error.
Expected outputs come from onnxruntime CPU (one intra-op thread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan import steps
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from tests.oracle import assert_same_bits, make_node_model, node_notes, ort_run, tamper_with_check
from tests.test_session_models import make_model

CHECK, PARTITIONED = "whole-model check", "partitioned"

X = np.arange(24, dtype=np.float32).reshape(6, 4) * 0.5 - 3.0


def _kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the kernel runs of the emulated nodes (``run_translation``)."""
    calls: list[str] = []
    real = steps.run_translation

    def spy(t: Any, arrays: Any, **kwargs: Any) -> Any:
        calls.append(t.op_type if hasattr(t, "op_type") else "?")
        return real(t, arrays, **kwargs)

    monkeypatch.setattr(steps, "run_translation", spy)
    return calls


def _chain(op: str, attrs: dict[str, Any], idx_shape: list[int]) -> onnx.ModelProto:
    """Relu -> small gather of ``op`` (indices fed) -> Neg: two CPU segments around one emulated gather."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(op, ["r", "idx"], ["g"], name="gather", **attrs),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    return make_model(nodes, {"x": (TensorProto.FLOAT, [6, 4]), "idx": (TensorProto.INT64, idx_shape)}, ["y"])


CASES = {
    "Gather": ({"axis": 0}, np.array([[5, 0], [2, 2]], np.int64)),
    "GatherElements": ({"axis": 1}, np.array([[3, 0], [1, 1], [0, 2], [3, 3], [2, 1], [0, 0]], np.int64)),
    "GatherND": ({}, np.array([[5, 3], [0, 1], [2, 0]], np.int64)),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_small_gather_is_taken_from_onnxruntime_after_the_proved_runs(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attrs, idx = CASES[op]
    model = _chain(op, attrs, list(idx.shape))
    feeds = {"x": X, "idx": idx}
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    for run in range(steps.PROVE_RUNS):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == CHECK and node_notes(session) == [[]]
        assert len(calls) == run + 1, "the first runs compute the gather with the kernel"
    for _ in range(3):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == CHECK and node_notes(session) == [[NOTE_GATHER_GIVEN]]
    assert len(calls) == steps.PROVE_RUNS, "later runs take onnxruntime's output"
    node = session.last_run_record.nodes[0]
    assert node.placement == "dml" and not node.negative_indices
    assert f"first {steps.PROVE_RUNS} runs" in node.notes[0][1]


def test_a_one_node_gather_model_takes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    feeds = {"x": X, "i": np.array([0, 5, 2], np.int64)}
    model = make_node_model("Gather", feeds, {"axis": 0})
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    for _ in range(steps.PROVE_RUNS + 2):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == CHECK
    assert node_notes(session) == [[NOTE_GATHER_GIVEN]]
    assert len(calls) == steps.PROVE_RUNS


def test_a_one_node_scatter_model_keeps_the_partitions() -> None:
    feeds = {
        "data": X,
        "indices": np.array([[1], [4]], np.int64),
        "updates": np.ones((2, 4), np.float32),
    }
    model = make_node_model("ScatterND", feeds)
    session = dmlshim.InferenceSession(model)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert session.last_run_record.path == PARTITIONED


def _proved_session(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **kwargs: Any) -> Any:
    session = dmlshim.InferenceSession(model, **kwargs)
    for _ in range(steps.PROVE_RUNS + 1):
        session.run(None, feeds)
    assert node_notes(session) == [[NOTE_GATHER_GIVEN]]
    return session


@pytest.mark.parametrize("model_of", ["one_node", "chain"])
def test_a_later_negative_index_is_computed_by_the_kernel(
    model_of: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if model_of == "one_node":
        model = make_node_model("Gather", {"x": X, "idx": np.zeros(3, np.int64)}, {"axis": 0})
    else:
        model = _chain("Gather", {"axis": 0}, [3])
    session = _proved_session(model, {"x": X, "idx": np.array([0, 5, 2], np.int64)})
    calls = _kernel_calls(monkeypatch)
    negative = {"x": X, "idx": np.array([0, -1, 2], np.int64)}  # ONNX and DirectML (FL >= 3.0): row 5
    assert_same_bits(session.run(None, negative), ort_run(model, negative))
    (node,) = session.last_run_record.nodes
    assert node.notes == () and node.negative_indices and len(calls) == 1


@pytest.mark.parametrize("bad", [6, -7])
@pytest.mark.parametrize("model_of", ["one_node", "chain"])
def test_a_later_out_of_range_index_is_still_refused(model_of: str, bad: int) -> None:
    if model_of == "one_node":
        model = make_node_model("Gather", {"x": X, "idx": np.zeros(3, np.int64)}, {"axis": 0})
        node = ""  # make_node_model's node has no name: dmlshim names it by position
    else:
        model = _chain("Gather", {"axis": 0}, [3])
        node = "gather"
    session = _proved_session(model, {"x": X, "idx": np.array([0, 5, 2], np.int64)})
    bad_feeds = {"x": X, "idx": np.array([0, bad, 2], np.int64)}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses the index too, in its own class
        ort_run(model, bad_feeds)
    with pytest.raises(dmlshim.IndexOutOfRangeError) as caught:
        session.run(None, bad_feeds)
    message = str(caught.value)
    assert f"index {bad} at idx[1] is out of range: valid range [-6, 5]" in message
    assert "op Gather" in message and "DML_OPERATOR_GATHER" in message
    if node:
        assert caught.value.node == node
    # and the session carries on: in-range indices are given again
    good = {"x": X, "idx": np.array([1, 1, 4], np.int64)}
    assert_same_bits(session.run(None, good), ort_run(model, good))
    assert node_notes(session) == [[NOTE_GATHER_GIVEN]]


def test_a_later_out_of_range_index_is_clamped_in_clamp_mode() -> None:
    model = make_node_model("Gather", {"x": X, "idx": np.zeros(3, np.int64)}, {"axis": 0})
    session = _proved_session(model, {"x": X, "idx": np.array([0, 5, 2], np.int64)}, index_mode="clamp")
    (got,) = session.run(None, {"x": X, "idx": np.array([9, 0, -9], np.int64)})
    # DirectML reads out-of-range indices clamped into [0, 5]
    (want,) = ort_run(model, {"x": X, "idx": np.array([5, 0, 0], np.int64)})
    np.testing.assert_array_equal(got, want)
    assert session.last_run_record.path == PARTITIONED and node_notes(session) == [[]]


@pytest.mark.parametrize("model_of", ["one_node", "chain"])
def test_full_check_computes_every_run(model_of: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    feeds = {"x": X, "idx": np.array([0, 5, 2], np.int64)}
    if model_of == "one_node":
        model = make_node_model("Gather", feeds, {"axis": 0})
    else:
        model = _chain("Gather", {"axis": 0}, [3])
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    runs = steps.PROVE_RUNS + 3
    for _ in range(runs):
        assert_same_bits(session.run(None, feeds), want)
        assert node_notes(session) == [[]]
    assert len(calls) == runs
    # a one-node model keeps the partitions there (the check would compute the gather as well)
    assert session.last_run_record.path == (PARTITIONED if model_of == "one_node" else CHECK)


def test_a_wrong_element_on_a_proved_run_is_caught() -> None:
    model = _chain("Gather", {"axis": 0}, [3])
    feeds = {"x": X, "idx": np.array([0, 5, 2], np.int64)}
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model)

    def change(g: np.ndarray) -> None:
        g.reshape(-1)[1] += 1.0

    tamper_with_check(session, "g", change)
    assert_same_bits(session.run(None, feeds), want)
    assert session.last_run_record.path == PARTITIONED and session.engine._check.agreements == 0


def test_a_one_node_model_whose_gather_is_still_computed_leaves_the_check() -> None:
    # Negative indices: the check must compute the gather on every run (onnxruntime's run and the kernel),
    # where the partitioned steps run the kernel alone; after the proved runs the check is dropped.
    feeds = {"x": X, "idx": np.array([0, -1, 2], np.int64)}
    model = make_node_model("Gather", feeds, {"axis": 0})
    want = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model)
    paths = []
    for _ in range(steps.PROVE_RUNS + 3):
        assert_same_bits(session.run(None, feeds), want)
        paths.append(session.last_run_record.path)
        (node,) = session.last_run_record.nodes
        assert node.negative_indices and node.notes == ()
    assert paths == [CHECK] * (steps.PROVE_RUNS + 1) + [PARTITIONED] * 2
    assert session.engine._check is None
