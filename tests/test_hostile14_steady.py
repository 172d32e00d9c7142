"""Hostile runs against the steady lane (issue 36): a lane made from one thread's lean run while another
thread's run of other shapes moved a node's given run on; feeds that are the same dtype and shape as an
accepted feed but laid out otherwise (strided, Fortran-order, zero-strided, unaligned, read-only,
mutated in place).

Expected values come from onnxruntime's own CPU session of the unmodified model (one intra-op thread);
a place written twice is recorded as ``duplicate_indices`` (the kernel's, not onnxruntime's output).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dmlshim
from dmlshim.execute.engines import partitioned_runs
from tests.oracle import same_bits
from tests.test_lean_check import _feeds, _model, _ort

GIVEN = "output_from_onnxruntime"


@pytest.fixture(scope="module")
def sessions() -> tuple[dmlshim.InferenceSession, Any]:
    model = _model()
    return dmlshim.InferenceSession(model.SerializeToString()), _ort(model)


def _steady(session: Any, **kwargs: Any) -> None:
    for _ in range(5):  # proved on runs 1-3, given on run 4, lean on run 5 (which makes the lane)
        session.run(None, _feeds(**kwargs))
    assert session._engine._steady is not None


def _scatter(session: dmlshim.InferenceSession) -> Any:
    return next(n for n in session.last_run_record.nodes if n.op_type == "ScatterElements")


def _one_row(n: int) -> dict[str, np.ndarray]:
    feeds = _feeds(n=n, sidx=[[0, 1, 2, 3]])
    feeds["upd"] = feeds["upd"][:1].copy()
    return feeds


def test_lane_made_after_another_shapes_given_run(
    sessions: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads, two shapes: thread B's lean run (6 rows, 2 update rows) ends, and before it makes its
    lane thread A's runs of 8 rows with one update row make the scatter given at those shapes, whose
    proof is the range alone (one write per column: none can meet). The lane B makes must not carry that
    proof: a later run of B's shapes writing one place twice was answered with onnxruntime's output and
    a record of no duplicates."""
    session, reference = sessions
    made: list[tuple[Any, ...]] = []
    real = partitioned_runs.steady_lane

    def capture(*args: Any) -> Any:
        made.append(args)
        return real(*args)

    monkeypatch.setattr(partitioned_runs, "steady_lane", capture)
    _steady(session)
    b_run = made[-1]  # thread B's lean run, its lane not yet made
    for _ in range(5):  # thread A: other shapes, given on its run 4
        assert same_bits(session.run(None, _one_row(8)), reference.run(None, _one_row(8)))
    session._engine._steady = real(*b_run)  # B makes its lane now
    twice = _feeds(sidx=[[0, 1, 2, 3], [0, 5, 0, 1]])
    assert same_bits(session.run(None, twice), reference.run(None, twice))
    node = _scatter(session)
    assert node.duplicate_indices == 1 and GIVEN not in {key for key, _ in node.notes}


def _layouts() -> list[tuple[str, dict[str, np.ndarray]]]:
    def unaligned(a: np.ndarray) -> np.ndarray:
        out = np.zeros(a.nbytes + 1, np.uint8)[1:].view(a.dtype).reshape(a.shape)
        out[...] = a
        return out

    def read_only(a: np.ndarray) -> np.ndarray:
        a.flags.writeable = False
        return a

    twice, once = [[0, 1, 2, 3], [0, 5, 0, 1]], [[0, 1, 2, 3], [4, 1, 0, 1]]
    x = np.zeros((6, 8), np.float32)
    x[:, ::2] = np.arange(24, dtype=np.float32).reshape(6, 4)
    return [
        ("strided indices out of range", {**_feeds(), "gidx": np.array([5, 9, 0, 9, 7, 9])[::2]}),
        ("zero-strided indices out of range", {**_feeds(), "gidx": np.broadcast_to(np.array(6), (3,))}),
        ("zero-strided indices", {**_feeds(), "gidx": np.broadcast_to(np.array(3), (3,))}),
        ("unaligned negative indices", {**_feeds(), "gidx": unaligned(np.array([5, -1, 2]))}),
        ("Fortran-order repeated writes", {**_feeds(), "sidx": np.asfortranarray(twice)}),
        ("read-only repeated writes", {**_feeds(), "sidx": read_only(np.array(once))}),
        ("strided data", {**_feeds(), "x": x[:, ::2]}),
        ("zero-strided data with NaN", {**_feeds(), "x": np.broadcast_to(np.float32(np.nan), (6, 4))}),
    ]


@pytest.mark.parametrize("case", range(len(_layouts())), ids=[name for name, _ in _layouts()])
def test_same_key_other_layout(sessions: tuple[Any, Any], case: int) -> None:
    session, reference = sessions
    _steady(session)
    _, feeds = _layouts()[case]
    try:
        expected = reference.run(None, feeds)
    except Exception:  # onnxruntime refuses it (an index out of range): so must we
        with pytest.raises(dmlshim.IndexOutOfRangeError):
            session.run(None, feeds)
        return
    assert same_bits(session.run(None, feeds), expected)
    repeated = feeds["sidx"][1, 1] == feeds["sidx"][0, 1] or feeds["sidx"][1, 0] == feeds["sidx"][0, 0]
    assert (_scatter(session).duplicate_indices > 0) == bool(repeated)


def test_indices_mutated_in_place_between_runs(sessions: tuple[Any, Any]) -> None:
    """The same arrays fed again after writing new indices into them: each run proves what they hold."""
    session, reference = sessions
    _steady(session)
    feeds = _feeds()
    for value, refused in ((4, False), (-6, False), (6, True), (-7, True), (1, False)):
        feeds["gidx"][1] = value
        if refused:
            with pytest.raises(dmlshim.IndexOutOfRangeError, match=str(value)):
                session.run(None, feeds)
            continue
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), value
    feeds["sidx"][1, 0] = 0  # writes row 0 twice in column 0
    assert same_bits(session.run(None, feeds), reference.run(None, feeds))
    assert _scatter(session).duplicate_indices == 1
