"""Nodes that run in onnxruntime's CPU provider inside the whole-model check (issue 36, real-size
detectors): at an empty pyramid level Mask R-CNN's RoI pooling gathers no rows and scatters no updates, and
DirectML has no operator for empty tensors, so those nodes ran alone in a one-node onnxruntime session on
every run and were never given: the lean check never took over and every run fetched each emulated node's
values (689 MB per run on Mask R-CNN R50-FPN). Their output is now the check session's when their indices
prove it (a gather after its proved runs, a scatter with no place written twice), so the lean check takes
over; a run the proof does not cover is computed alone as before. Expected values come from onnxruntime's
own CPU session."""

from __future__ import annotations

import numpy as np
import pytest

import dmlshim
from dmlshim.execute.plan.step_given import CPU_GIVEN_MESSAGE
from dmlshim.execute.plan.steps import PROVE_RUNS
from dmlshim.execute.record import PLACEMENT_CPU, PLACEMENT_DML, NodeRecord
from tests.oracle import ort_session, same_bits
from tests.test_lean_check import _model  # Relu, ScatterElements, Sigmoid, Gather, Neg; no weights


def _feeds(seed: int, gidx: list[int] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((6, 4)).astype(np.float32),
        "sidx": np.zeros((0, 4), dtype=np.int64),  # no updates: DirectML has no empty tensors
        "upd": np.zeros((0, 4), dtype=np.float32),
        "gidx": np.array(gidx if gidx is not None else [], dtype=np.int64),
    }


def _records(session: dmlshim.InferenceSession) -> dict[str, NodeRecord]:
    return {n.op_type: n for n in session.last_run_record.nodes if n.op_type in ("Gather", "ScatterElements")}


def test_empty_gather_and_scatter_are_given_and_the_lean_check_takes_over() -> None:
    model = _model()
    reference = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    for run in range(1, PROVE_RUNS + 4):
        feeds = _feeds(run)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        records = _records(session)
        assert {r.placement for r in records.values()} == {PLACEMENT_CPU}, records
        notes = {key: text for r in records.values() for key, text in r.notes}
        if run > PROVE_RUNS:
            assert CPU_GIVEN_MESSAGE in notes.values(), (run, records)
    assert check.lean_runs == 2  # runs 1-3 proved, run 4 given (the switch), runs 5 and 6 lean
    # rows again: the lean proof no longer holds (other shapes), the full check answers
    feeds = _feeds(20, gidx=[5, 0, 2])
    feeds["sidx"] = np.array([[0, 1, 2, 3]], dtype=np.int64)
    feeds["upd"] = np.ones((1, 4), dtype=np.float32)
    assert same_bits(session.run(None, feeds), reference.run(None, feeds))
    assert {r.placement for r in _records(session).values()} == {PLACEMENT_DML}


def test_full_check_computes_the_cpu_nodes_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    model = _model()
    reference = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    for run in range(1, PROVE_RUNS + 4):
        feeds = _feeds(run)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        notes = {text for r in _records(session).values() for _, text in r.notes}
        assert CPU_GIVEN_MESSAGE not in notes, run
    assert check.lean_runs == 0


def test_a_negative_index_on_the_cpu_is_computed_alone() -> None:
    """An empty scatter beside a gather of rows whose index is negative: the gather's proof does not hold
    (its indices are not all in [0, dim)), so the lean check never takes over and the gather is computed
    alone on every run, with onnxruntime's values."""
    model = _model()
    reference = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    for run in range(1, PROVE_RUNS + 4):
        feeds = _feeds(run, gidx=[-1, 2])
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
    assert check.lean_runs == 0
