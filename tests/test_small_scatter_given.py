"""Small scatters in the whole-model check (issue 36, item 2, run cost): computed by the kernel and
compared with onnxruntime on a session's first runs with the same input shapes and dtypes, later taken as
onnxruntime computed them when the run's indices prove the output (in range, non-negative, each place
written once; the record notes it), as large scatters are from their first run. Duplicate writes,
negative indices and ``DMLSHIM_FULL_CHECK=1`` compute and compare on every run, as before. Expected
outputs come from onnxruntime CPU (one intra-op thread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan import steps
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from dmlshim.execute.proofs.scatter_given import SCATTER_GIVEN_MESSAGE
from tests.oracle import assert_same_bits, node_notes, ort_run
from tests.test_session_models import make_model

CHECK = "whole-model check"

X = np.arange(24, dtype=np.float32).reshape(6, 4) * 0.5 - 3.0


def _kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the kernel runs of the emulated nodes (``run_translation``)."""
    calls: list[int] = []
    real = steps.run_translation

    def spy(t: Any, arrays: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(t, arrays, **kwargs)

    monkeypatch.setattr(steps, "run_translation", spy)
    return calls


def _chain(op: str, attrs: dict[str, Any], idx: np.ndarray, upd: np.ndarray) -> onnx.ModelProto:
    """Relu -> small scatter of ``op`` (indices and updates fed) -> Neg: two CPU segments around it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(op, ["r", "idx", "upd"], ["s"], name="scatter", **attrs),
        helper.make_node("Neg", ["s"], ["y"], name="neg"),
    ]
    inputs = {
        "x": (TensorProto.FLOAT, [6, 4]),
        "idx": (TensorProto.INT64, list(idx.shape)),
        "upd": (TensorProto.FLOAT, list(upd.shape)),
    }
    return make_model(nodes, inputs, ["y"])


UPD_ROWS = np.arange(8, dtype=np.float32).reshape(2, 4) + 10.0
UPD_ELEMS = np.arange(6, dtype=np.float32).reshape(6, 1) + 20.0

GIVEN = {
    "ScatterND": ({}, np.array([[4], [1]], np.int64), UPD_ROWS),
    "ScatterElements": ({"axis": 1}, np.array([[3], [0], [2], [1], [0], [3]], np.int64), UPD_ELEMS),
}

COMPUTED = {
    "duplicate rows": ("ScatterND", {}, np.array([[2], [2]], np.int64), UPD_ROWS),
    "negative index": ("ScatterND", {}, np.array([[-1], [1]], np.int64), UPD_ROWS),
}


def _feeds(idx: np.ndarray, upd: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": X, "idx": idx, "upd": upd}


@pytest.mark.parametrize("op", sorted(GIVEN))
def test_a_small_scatter_is_taken_from_onnxruntime_after_the_proved_runs(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attrs, idx, upd = GIVEN[op]
    model = _chain(op, attrs, idx, upd)
    feeds = _feeds(idx, upd)
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    for run in range(steps.PROVE_RUNS):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == CHECK and node_notes(session) == [[]]
        assert len(calls) == run + 1, "the first runs compute the scatter with the kernel"
    for _ in range(3):
        assert_same_bits(session.run(None, feeds), want)
        assert session.last_run_record.path == CHECK and node_notes(session) == [[NOTE_GATHER_GIVEN]]
    assert len(calls) == steps.PROVE_RUNS, "later runs take onnxruntime's output"
    node = session.last_run_record.nodes[0]
    assert node.placement == "dml" and node.duplicate_indices == 0 and not node.negative_indices
    assert node.notes[0][1] == SCATTER_GIVEN_MESSAGE


def test_new_indices_values_are_proved_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the proved runs, a run whose indices write one place twice is computed and compared again
    (its record counts the overwritten writes, as the kernel does); the next unique run is given."""
    attrs, idx, upd = GIVEN["ScatterND"]
    model = _chain("ScatterND", attrs, idx, upd)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    for _ in range(steps.PROVE_RUNS + 1):
        session.run(None, _feeds(idx, upd))
    assert len(calls) == steps.PROVE_RUNS
    twice = np.array([[3], [3]], np.int64)
    assert_same_bits(session.run(None, _feeds(twice, upd)), ort_run(model, _feeds(twice, upd)))
    assert len(calls) == steps.PROVE_RUNS + 1 and node_notes(session) == [[]]
    assert session.last_run_record.nodes[0].duplicate_indices == 1
    other = np.array([[0], [5]], np.int64)
    assert_same_bits(session.run(None, _feeds(other, upd)), ort_run(model, _feeds(other, upd)))
    assert len(calls) == steps.PROVE_RUNS + 1 and node_notes(session) == [[NOTE_GATHER_GIVEN]]


@pytest.mark.parametrize("case", sorted(COMPUTED))
def test_scatters_the_indices_do_not_prove_are_computed_on_every_run(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op, attrs, idx, upd = COMPUTED[case]
    model = _chain(op, attrs, idx, upd)
    feeds = _feeds(idx, upd)
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    runs = steps.PROVE_RUNS + 3
    for _ in range(runs):
        assert_same_bits(session.run(None, feeds), want)
        assert NOTE_GATHER_GIVEN not in [code for code, _ in session.last_run_record.nodes[0].notes]
    assert len(calls) == runs


def test_full_check_computes_small_scatters_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    attrs, idx, upd = GIVEN["ScatterND"]
    model = _chain("ScatterND", attrs, idx, upd)
    feeds = _feeds(idx, upd)
    want = ort_run(model, feeds)
    calls = _kernel_calls(monkeypatch)
    session = dmlshim.InferenceSession(model)
    runs = steps.PROVE_RUNS + 3
    for _ in range(runs):
        assert_same_bits(session.run(None, feeds), want)
        assert node_notes(session) == [[]]
    assert len(calls) == runs
