"""A model with heavy weights holds one check session at a time: its full session is released when the
lean check takes over. onnxruntime's arrays are views of its arena, so an output of a full-check run that
the caller keeps held that arena beside the lean session's (Mask R-CNN R50-FPN at real size, caller
keeping the previous run's outputs: 2855 MB against onnxruntime's 1434 MB). Its full-check runs that fetch
more than ``KEEP_FULL_MAX_BYTES`` answer with copies on its first ``COPY_RUNS`` runs, the runs before the
lean check can take over (issue 36, memory). Expected values come from onnxruntime's own CPU session."""

from __future__ import annotations

import pytest

import dmlshim
from dmlshim.execute.engines import partitioned, whole_model
from tests.oracle import ort_session, same_bits
from tests.test_lean_check import _model  # Relu, ScatterElements, Sigmoid, Gather, Neg; no weights
from tests.test_lean_heavy_runs53 import _feeds


@pytest.mark.parametrize("heavy_runs", [True, False])
def test_heavy_weights_copy_until_the_lean_check(heavy_runs: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)  # no weights is above it: heavy weights
    if heavy_runs:  # the runs below fetch a few hundred bytes: a bound below that makes them heavy
        monkeypatch.setattr(whole_model, "KEEP_FULL_MAX_BYTES", 64)
    model = _model()
    reference = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    for run in range(1, whole_model.COPY_RUNS + 4):
        feeds = _feeds(6, seed=run)
        got = session.run(None, feeds)
        assert same_bits(got, reference.run(None, feeds)), run
        if heavy_runs and run <= whole_model.COPY_RUNS:
            # a heavy full-check run: its answers own their memory (onnxruntime 1.32 hands back views)
            assert got[0].flags.owndata, run
    assert check.lean_runs == 3  # runs 1-3 proved, run 4 given (the switch), runs 5-7 lean
    assert check._session is None  # heavy weights: one session at a time


def test_copy_runs_end_where_the_lean_check_can_begin() -> None:
    from dmlshim.execute.plan.step_given import PROVE_RUNS

    assert whole_model.COPY_RUNS == PROVE_RUNS + 1


def test_copy_runs_is_the_proved_runs_and_the_switch() -> None:
    """COPY_RUNS is written as a number (importing the plan package would load dmlshim.inputs into
    inspect); it must follow PROVE_RUNS."""
    from dmlshim.execute.plan.step_given import PROVE_RUNS

    assert whole_model.COPY_RUNS == PROVE_RUNS + 1
