"""Hostile cases against the scatter proofs made once per input shapes (issue 36, run cost): distinct
writes checked by a Python set, a mark per target or a sort, at and around each threshold, with repeats
hidden by negative coordinates, reductions, int64 extremes and threads. Expected values come from
onnxruntime's CPU session (one thread) of the same model; records from a DMLSHIM_FULL_CHECK=1 session."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto

import dmlshim
from tests.oracle import ort_run, same_bits
from tests.scatter_given_cases import run_pair, scatter_model, session_pair
from tests.test_hostile47_runcost import RUNS_BEFORE, _one_thread, _reference, _same_as_onnxruntime


def _nd_feeds(tuples: np.ndarray, rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "data": rng.standard_normal((rows, 4)).astype(np.float32),
        "idx": tuples,
        "upd": rng.standard_normal((*tuples.shape[:-1], 4)).astype(np.float32),
    }


@pytest.mark.parametrize("count", [63, 64, 65, 200])
def test_scatternd_duplicates_at_the_thresholds(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterND with 63/64/65/200 index tuples (the Python set's limit 64): distinct on the first runs,
    then one repeat, then a -1 and a rows-1 naming the same row: onnxruntime's output and the full
    check's record (duplicate_indices)."""
    rows = count + 3
    model = scatter_model("ScatterND", TensorProto.FLOAT, [[rows, 4], [count, 1], [count, 4]])
    pair = session_pair(model, monkeypatch)
    distinct = np.arange(count, dtype=np.int64)[:, None]
    for seed in range(RUNS_BEFORE):
        run_pair(pair, model, _nd_feeds(np.random.default_rng(seed).permutation(distinct), rows, seed))
    repeat = distinct.copy()
    repeat[-1, 0] = 0
    wrapped = distinct.copy()
    wrapped[0, 0], wrapped[-1, 0] = -1, rows - 1
    for tuples in (repeat, distinct, wrapped, distinct):
        ones = np.zeros((count, 4), np.float32)  # equal updates: the winner is not in question
        feeds = {**_nd_feeds(tuples, rows, 99), "upd": ones}
        node = run_pair(pair, model, feeds)
        assert node.duplicate_indices == (tuples.tolist() != distinct.tolist()), tuples.ravel()[[0, -1]]


@pytest.mark.parametrize("rows", [60, 70000, 600000])
def test_scatternd_two_column_tuples_marks_and_sort(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterND on (rows, 2) with 100 two-coordinate tuples: the target space small (marks) or large
    (a sort) next to the writes; a repeat hidden by a negative first coordinate."""
    count = 100
    model = scatter_model("ScatterND", TensorProto.FLOAT, [[rows, 2], [count, 2], [count]])
    pair = session_pair(model, monkeypatch)
    rng = np.random.default_rng(5)
    flat = rng.choice(rows * 2, count, replace=False)
    tuples = np.stack([flat // 2, flat % 2], axis=-1).astype(np.int64)
    for seed in range(RUNS_BEFORE):
        feeds = {
            "data": np.zeros((rows, 2), np.float32),
            "idx": tuples,
            "upd": np.full(count, float(seed), np.float32),
        }
        run_pair(pair, model, feeds)
    hidden = tuples.copy()
    hidden[1] = (hidden[0, 0] - rows, hidden[0, 1])
    for idx, repeats in ((hidden, 1), (tuples, 0)):
        feeds = {"data": np.zeros((rows, 2), np.float32), "idx": idx, "upd": np.ones(count, np.float32)}
        node = run_pair(pair, model, feeds)
        assert node.duplicate_indices == repeats


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatterelements_reductions_with_aliasing_negatives(
    reduction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ScatterElements with a reduction, -1 and dim-1 on one line: every write counts (onnxruntime's
    values), nothing recorded as overwritten."""
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, [[3, 5], [3, 2], [3, 2]], {"axis": 1, "reduction": reduction}
    )
    pair = session_pair(model, monkeypatch)
    for seed in range(RUNS_BEFORE):
        rng = np.random.default_rng(seed)
        idx = np.array([[0, 1], [2, 3], [4, 0]], np.int64) if seed < 5 else np.array([[-1, 4]] * 3, np.int64)
        feeds = {"data": rng.random((3, 5), np.float32), "idx": idx, "upd": rng.random((3, 2), np.float32)}
        want = ort_run(model, feeds)
        for session in pair:
            assert same_bits(session.run(None, dict(feeds)), want), seed
        default, full = (next(n for n in s.last_run_record.nodes if n.name == "update") for s in pair)
        assert default.duplicate_indices == full.duplicate_indices == 0


@pytest.mark.parametrize("width", [32, 33, 64, 65])
def test_scatterelements_lines_at_the_list_threshold(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterElements (2, width) indices along axis 1 (64 elements or more): one repeat hidden as -1 and
    dim-1, after distinct runs."""
    dim = width + 2
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, [[2, dim], [2, width], [2, width]], {"axis": 1}
    )
    pair = session_pair(model, monkeypatch)
    distinct = np.stack([np.arange(width), np.arange(width)[::-1] + 2]).astype(np.int64)
    for _seed in range(RUNS_BEFORE):
        feeds = {
            "data": np.zeros((2, dim), np.float32),
            "idx": distinct,
            "upd": np.ones((2, width), np.float32),
        }
        run_pair(pair, model, feeds)
    hidden = distinct.copy()
    hidden[1, 0], hidden[1, 1] = -1, dim - 1
    for idx, repeats in ((hidden, 1), (distinct, 0), (np.full((2, width), -1, np.int64), 2 * (width - 1))):
        feeds = {"data": np.zeros((2, dim), np.float32), "idx": idx, "upd": np.ones((2, width), np.float32)}
        node = run_pair(pair, model, feeds)
        assert node.duplicate_indices == repeats


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 2**31, -(2**31) - 1])
def test_int64_extreme_indices_after_steady_runs(value: int) -> None:
    """An int64 extreme index in a steady lane's small-list range proof: refused as onnxruntime does."""
    model = scatter_model("ScatterND", TensorProto.FLOAT, [[6, 4], [3, 1], [3, 4]])
    session = dmlshim.InferenceSession(model.SerializeToString(), sess_options=_one_thread())
    reference = _reference(model)
    good = np.array([[0], [2], [4]], np.int64)
    for seed in range(RUNS_BEFORE):
        _same_as_onnxruntime(session, reference, _nd_feeds(good, 6, seed))
    bad = good.copy()
    bad[1, 0] = value
    _same_as_onnxruntime(session, reference, _nd_feeds(bad, 6, 50))
    _same_as_onnxruntime(session, reference, _nd_feeds(good, 6, 51))


def test_scatterelements_indices_longer_than_the_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterElements (1, 7) indices along an axis of 5: two writes always repeat a place (also when
    written as negatives); onnxruntime's output, two recorded overwrites on every run."""
    model = scatter_model("ScatterElements", TensorProto.FLOAT, [[2, 5], [1, 7], [1, 7]], {"axis": 1})
    pair = session_pair(model, monkeypatch)
    for run in range(RUNS_BEFORE):
        idx = np.array([[0, 1, 2, 3, 4, 0, 1] if run != 6 else [0, 1, 2, 3, 4, -5, -4]], np.int64)
        feeds = {"data": np.zeros((2, 5), np.float32), "idx": idx, "upd": np.ones((1, 7), np.float32)}
        assert run_pair(pair, model, feeds).duplicate_indices == 2


@pytest.mark.parametrize("rows", [3, 5000])
def test_scatternd_repeat_hidden_in_the_second_coordinate(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterND with 65 two-coordinate tuples (past the Python set's limit; marks or a sort): a repeat
    hidden by a negative second coordinate on runs after the steady ones."""
    cols = 40
    model = scatter_model("ScatterND", TensorProto.FLOAT, [[rows, cols], [65, 2], [65]])
    pair = session_pair(model, monkeypatch)
    flat = np.random.default_rng(0).choice(rows * cols, 65, replace=False)
    tuples = np.stack([flat // cols, flat % cols], -1).astype(np.int64)
    for run in range(RUNS_BEFORE + 1):
        idx = tuples.copy()
        if run in (6, 8):
            idx[5] = (idx[0, 0], idx[0, 1] - cols)
        feeds = {"data": np.zeros((rows, cols), np.float32), "idx": idx, "upd": np.ones(65, np.float32)}
        assert run_pair(pair, model, feeds).duplicate_indices == (run in (6, 8))


def test_scatterelements_int32_repeat_as_a_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    """ScatterElements with 65 int32 indices (past the list limit): -67 on an axis of 70 repeats 3."""
    model = scatter_model(
        "ScatterElements", TensorProto.FLOAT, [[70], [65], [65]], {"axis": 0}, index_elem=TensorProto.INT32
    )
    pair = session_pair(model, monkeypatch)
    for run in range(RUNS_BEFORE + 1):
        idx = np.arange(65, dtype=np.int32)
        if run in (6, 8):
            idx[10] = -67
        feeds = {"data": np.zeros(70, np.float32), "idx": idx, "upd": np.ones(65, np.float32)}
        assert run_pair(pair, model, feeds).duplicate_indices == (run in (6, 8))


def test_threads_scatternd_other_shapes_and_repeats() -> None:
    """Threads run one ScatterND session at once with other row counts, tuple counts around the set's
    limit, repeats (with equal updates, so the winner is not in question) and negatives: onnxruntime's
    values on every run."""
    model = scatter_model("ScatterND", TensorProto.FLOAT, [["r", 4], ["c", 1], ["c", 4]])
    session = dmlshim.InferenceSession(model.SerializeToString(), sess_options=_one_thread())
    for seed in range(RUNS_BEFORE):
        feeds = _nd_feeds(np.arange(64, dtype=np.int64)[:, None], 70, seed)
        assert same_bits(session.run(None, feeds), ort_run(model, feeds))
    failures: list[str] = []

    def worker(seed: int) -> None:
        local = np.random.default_rng(seed)
        for i in range(30):
            rows = int(local.choice([70, 70, 70, 130]))
            count = int(local.choice([1, 63, 64, 65, 66]))
            targets = local.choice(rows, count, replace=False)
            if i % 4 == 1 and count > 1:
                targets[-1] = targets[0]  # a repeat
            if i % 4 == 2:
                targets[0] -= rows  # a negative
            idx = targets.astype(np.int64)[:, None]
            data = local.standard_normal((rows, 4)).astype(np.float32)
            upd = (np.mod(idx, rows) * np.ones((1, 4))).astype(np.float32)  # by target: repeats agree
            feeds = {"data": data, "idx": idx, "upd": upd}
            try:
                got = session.run(None, feeds)
            except Exception as exc:
                failures.append(f"seed {seed} run {i}: {exc}")
                continue
            if not same_bits(got, ort_run(model, feeds)):
                failures.append(f"seed {seed} run {i}: rows={rows} count={count}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
