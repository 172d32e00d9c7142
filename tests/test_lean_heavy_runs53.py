"""The lean check of a model with light weights but heavy runs (issue 36, peak memory): once the lean
session takes over, the full check's session is released when the full run fetched more than
``KEEP_FULL_MAX_BYTES`` (onnxruntime's arena of that session would otherwise hold a second copy of the
run's memory beside the lean session's: a GraphSAGE step peaked at 1.9x onnxruntime's). Outputs stay
onnxruntime's bit for bit, before, during and after the switch, and a run the lean proofs cannot answer
goes back to a rebuilt full check. The full session's answers to such runs are copies (onnxruntime's
arrays are views of its arena, which an output the caller keeps would keep alive). Expected values
come from onnxruntime's own CPU session."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.execute.engines import lean_check, whole_model
from dmlshim.execute.plan.steps import PROVE_RUNS
from tests.oracle import same_bits
from tests.test_lean_check import _model  # Relu, ScatterElements, Sigmoid, Gather, Neg; no weights


def _ort(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _feeds(n: int, gidx: list[int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, 4)).astype(np.float32),
        "sidx": np.array([[0, 1, 2, 3], [4, 5, 0, 1]], dtype=np.int64),
        "upd": rng.standard_normal((2, 4)).astype(np.float32),
        "gidx": np.array(gidx if gidx is not None else [5, 0, 2], dtype=np.int64),
    }


@pytest.mark.parametrize("heavy", [True, False])
def test_full_session_released_after_a_heavy_run(heavy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if heavy:  # the runs below fetch a few hundred bytes: a bound below that makes them heavy
        monkeypatch.setattr(whole_model, "KEEP_FULL_MAX_BYTES", 64)
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    for run in range(1, PROVE_RUNS + 4):
        feeds = _feeds(6, seed=run)
        got = session.run(None, feeds)
        assert same_bits(got, reference.run(None, feeds)), run
        if heavy and run <= PROVE_RUNS + 1:
            # the full session's answers are copies: a caller keeping one must not keep its arena alive
            assert got[0].flags.owndata, run
    assert check.lean_runs == 2  # runs 1-3 proved, run 4 given (the switch), runs 5 and 6 lean
    assert check._lean_session is not None
    # light runs keep the full session beside the lean one; heavy ones hold one session at a time
    assert (check._session is None) is heavy
    negative = _feeds(6, gidx=[5, -1, 2], seed=9)
    assert same_bits(session.run(None, negative), reference.run(None, negative))
    assert check._session is not None  # the full check answered that run (rebuilt when released)
    for seed in range(10, 13):
        feeds = _feeds(6, seed=seed)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), seed
    # the heavy session stays on the full check once it came back, as sessions with heavy weights do
    assert check.lean_runs == (2 if heavy else 4)


def test_a_run_past_the_bound_releases_the_full_session() -> None:
    n = lean_check.KEEP_FULL_MAX_BYTES // 16 + 1024  # x alone (n x 4 float32) is past the bound
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = session._engine._check
    feeds = _feeds(n)
    expected = reference.run(None, feeds)
    for run in range(PROVE_RUNS + 2):
        assert same_bits(session.run(None, feeds), expected), run
    assert check.lean_runs == 1 and check._session is None
