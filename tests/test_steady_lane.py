"""The steady lane (issue 36, run cost): after a lean-check run, runs whose feeds have the same names,
dtypes and shapes are one onnxruntime call plus the index proofs. Outputs stay onnxruntime's bit for
bit; every index that stops proving a node (out of range, negative, a place written twice) still goes to
the ordinary path, which refuses or computes it as before.

Expected values come from onnxruntime's own CPU session of the unmodified model (one intra-op thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dmlshim
from tests.oracle import same_bits
from tests.test_lean_check import _feeds, _model, _ort

GIVEN = "output_from_onnxruntime"


@pytest.fixture(scope="module")
def sessions() -> tuple[dmlshim.InferenceSession, Any]:
    model = _model()
    return dmlshim.InferenceSession(model.SerializeToString()), _ort(model)


def _steady(session: dmlshim.InferenceSession) -> Any:
    for _ in range(5):  # proved on runs 1-3, given on run 4, lean on run 5 (which makes the lane)
        session.run(None, _feeds())
    assert session._engine._steady is not None
    return session._engine._check


def test_steady_runs_bit_identical_with_the_lean_record(sessions: tuple[Any, Any]) -> None:
    session, reference = sessions
    check = _steady(session)
    lean_runs, record = check.lean_runs, session.last_run_record
    for run in range(1, 6):
        feeds = _feeds()
        feeds["x"] = np.random.default_rng(run).standard_normal((6, 4)).astype(np.float32)  # same key
        feeds["gidx"] = np.array([run % 6, 5 - run % 6, 3], dtype=np.int64)
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        assert session.last_run_record is record  # answered by the lane: the lean run's record
    assert check.lean_runs == lean_runs + 5
    assert session._engine._steady is not None  # never cleared: the ordinary path (which clears it) never ran
    node = next(n for n in record.nodes if n.op_type == "Gather")
    assert GIVEN in {key for key, _ in node.notes}


def test_out_of_range_index_still_refused(sessions: tuple[Any, Any]) -> None:
    session, reference = sessions
    _steady(session)
    bad = _feeds(gidx=[5, 6, 2])  # 6 is outside [0, 6): ONNX refuses it
    with pytest.raises(Exception) as ours:
        session.run(None, bad)
    with pytest.raises(Exception) as theirs:
        reference.run(None, bad)
    assert isinstance(ours.value, dmlshim.IndexOutOfRangeError)
    assert "6" in str(ours.value) and "6" in str(theirs.value)
    assert same_bits(session.run(None, _feeds()), reference.run(None, _feeds()))  # the session goes on


def test_negative_and_repeated_indices_leave_the_lane(sessions: tuple[Any, Any]) -> None:
    session, reference = sessions
    check = _steady(session)
    lean_runs = check.lean_runs
    negative = _feeds(gidx=[5, -1, 2])
    assert same_bits(session.run(None, negative), reference.run(None, negative))
    node = next(n for n in session.last_run_record.nodes if n.op_type == "Gather")
    assert node.negative_indices and GIVEN not in {key for key, _ in node.notes}  # computed
    _steady(session)
    twice = _feeds(sidx=[[0, 1, 2, 3], [0, 5, 0, 1]])
    assert same_bits(session.run(None, twice), reference.run(None, twice))
    node = next(n for n in session.last_run_record.nodes if n.op_type == "ScatterElements")
    assert node.duplicate_indices == 1 and GIVEN not in {key for key, _ in node.notes}
    assert check.lean_runs >= lean_runs


def test_feeds_of_another_dtype_or_shape_are_validated(sessions: tuple[Any, Any]) -> None:
    session, reference = sessions
    _steady(session)
    wrong = _feeds()
    wrong["gidx"] = wrong["gidx"].astype(np.int32)
    with pytest.raises(dmlshim.BadInputError):
        session.run(None, wrong)
    wider = _feeds(n=9, gidx=[8, 0, 2, 7])
    assert same_bits(session.run(None, wider), reference.run(None, wider))
    assert session._engine._steady is None  # other shapes: the ordinary path (proved again)


def _scatter_cases() -> list[tuple[str, dict[str, Any], tuple[int, ...], tuple[int, ...], np.ndarray]]:
    rng = np.random.default_rng(36)
    cases = []
    for _ in range(60):
        data_shape = (3, 4)
        values = [-5, -1, 0, 1, 2, 3, 4, 7]
        if rng.integers(2):
            shape = tuple(int(x) for x in rng.choice([(1, 1), (1, 2), (2, 1), (0, 2)][rng.integers(4)], 2))
            cases.append(("ScatterND", {}, data_shape, shape, rng.choice(values, shape).astype(np.int64)))
        else:
            shape = [(1, 4), (1, 1), (2, 4), (3, 1)][rng.integers(4)]
            cases.append(
                (
                    "ScatterElements",
                    {"axis": 0},
                    data_shape,
                    shape,
                    rng.choice(values, shape).astype(np.int64),
                )
            )
    return cases


def test_steady_scatter_proof_agrees_with_the_whole_proof() -> None:
    """The reduced proof (one write per place by shape) answers as the whole proof on every value."""
    from dmlshim.execute.proofs.proved_again import steady_proof
    from dmlshim.execute.proofs.scatter_given import scatter_output_is_given

    reduced_used = 0
    for op, attrs, data_shape, shape, indices in _scatter_cases():
        data = np.zeros(data_shape, np.float32)
        updates_shape = shape[:-1] + data_shape[shape[-1] :] if op == "ScatterND" else shape
        updates = np.zeros(updates_shape, np.float32)
        key = ((data_shape, data.dtype), (shape, indices.dtype), (updates_shape, updates.dtype))
        proof = steady_proof(op, attrs, key, None)
        reduced_used += getattr(proof, "__name__", "") != "proof"
        whole = scatter_output_is_given(op, attrs, [data, indices, updates], data)
        assert proof(indices) == whole, (op, shape, indices.tolist())
    assert reduced_used > 0


def _constant_index_model(index: int) -> Any:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Gather", ["a", "last"], ["g"], axis=1),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constant_index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("last", TensorProto.INT64, [], [index])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_constant_negative_index_given_after_its_proved_runs() -> None:
    """A select of index -1 (a decoder's last position): computed and compared on the proved runs, then
    onnxruntime's output on the proof that the indices are that constant, at a feature level where
    DirectML wraps negative indices as ONNX does; the record still says negative indices were seen."""
    model = _constant_index_model(-1)
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(7)
    for run in range(1, 9):
        feeds = {"x": rng.standard_normal((2, 5)).astype(np.float32)}
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        node = next(n for n in session.last_run_record.nodes if n.op_type == "Gather")
        assert node.negative_indices
        assert (GIVEN in {key for key, _ in node.notes}) == (run > 3), run
    assert session._engine._steady is not None


def test_constant_negative_index_rule_needs_the_constant_and_the_level() -> None:
    from dmlshim.dml.enums import FeatureLevel
    from dmlshim.execute.proofs.gather_given import constant_indices_given, given_shape

    data = np.zeros((2, 5), np.float32)
    constant = np.array(-1, dtype=np.int64)
    constant.flags.writeable = False
    arrays = [data, constant]
    expected = given_shape("Gather", {"axis": 1}, arrays)
    assert expected is not None and not expected.indices_in_range(constant)
    given = constant_indices_given(expected, "Gather", {"axis": 1}, arrays, constant, FeatureLevel.FL_5_0)
    assert given is not None and given.indices_in_range(constant)
    fed = np.array(-1, dtype=np.int64)  # the same value fed: not the constant, not given
    assert not given.indices_in_range(fed)
    assert (
        constant_indices_given(expected, "Gather", {"axis": 1}, arrays, constant, FeatureLevel.FL_2_1) is None
    )
    outside = np.array(-6, dtype=np.int64)  # outside [-5, 5): ONNX refuses it
    outside.flags.writeable = False
    assert (
        constant_indices_given(expected, "Gather", {"axis": 1}, [data, outside], outside, FeatureLevel.FL_5_0)
        is None
    )
