"""The partitioned engine's whole-model check: one onnxruntime run of the whole model, every emulated
node's kernel run on the inputs onnxruntime computed for it and compared bit for bit; the partitions
answer whenever a kernel disagrees or onnxruntime refuses the run."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.engines import whole_model
from dmlshim.execute.plan import steps
from tests.oracle import ort_run
from tests.test_session_models import chain_model, make_model


def _gather_chain() -> tuple[object, dict[str, np.ndarray]]:
    """Relu -> Gather(indices fed by the caller) -> Neg -> Gather -> Abs: three CPU segments."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "idx"], ["g"], name="gather_rows", axis=0),
        helper.make_node("Neg", ["g"], ["n"], name="neg"),
        helper.make_node("Gather", ["n", "cols"], ["h"], name="gather_cols", axis=1),
        helper.make_node("Abs", ["h"], ["y"], name="abs"),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [5, 4]), "idx": (TensorProto.INT64, [3])},
        ["y"],
        {"cols": np.array([3, 0], dtype=np.int64)},
    )
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((5, 4)).astype(np.float32), "idx": np.array([4, 0, 2], dtype=np.int64)}
    return model, feeds


def test_agreeing_kernels_answer_with_one_onnxruntime_run() -> None:
    model, feeds = chain_model()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # the partitions may be tried
    session = dmlshim.InferenceSession(model, sess_options=so)
    check = session.engine._check
    assert check is not None, "three CPU segments: the whole-model check is built"
    paths = []
    for _ in range(3):
        got = session.run(None, feeds)
        paths.append(session.last_run_record.path)
    expected = ort_run(model, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and np.array_equal(g, e, equal_nan=True)
    # The first runs alternate between the check and the partitioned steps (tests/test_path_choice.py).
    assert paths == ["whole-model check", "partitioned", "whole-model check"]
    assert (check.agreements, check.disagreements) == (2, 0)
    record = session.last_run_record
    assert record is not None
    assert [(n.name, n.placement) for n in record.nodes] == [("gather", "dml"), ("scatter", "dml")]


def test_a_disagreeing_kernel_hands_the_run_to_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _gather_chain()
    session = dmlshim.InferenceSession(model)
    check = session.engine._check
    assert check is not None
    monkeypatch.setattr(whole_model, "identical", lambda ours, theirs: False)
    monkeypatch.setattr(steps, "same_bits", lambda ours, theirs: False)  # a gather's proof runs compare there
    expected = ort_run(model, feeds)[0]
    for _ in range(whole_model.GIVE_UP_AFTER + 2):
        (got,) = session.run(None, feeds)
        np.testing.assert_array_equal(got, expected)
    # Each disagreeing run cost a whole-model run; after GIVE_UP_AFTER of them the check stops trying.
    assert (check.agreements, check.disagreements) == (0, whole_model.GIVE_UP_AFTER)
    assert [n.placement for n in session.last_run_record.nodes] == ["dml", "dml"]


def test_out_of_range_index_gets_the_partitioned_error() -> None:
    model, feeds = _gather_chain()
    session = dmlshim.InferenceSession(model)
    with pytest.raises(dmlshim.IndexOutOfRangeError) as caught:
        session.run(None, {**feeds, "idx": np.array([4, 5, 0], dtype=np.int64)})
    assert caught.value.node == "gather_rows"


def test_clamped_index_mode_is_answered_by_the_partitions() -> None:
    # onnxruntime refuses index 9 on 5 rows; the partitions answer with DirectML's clamped read.
    model, feeds = _gather_chain()
    session = dmlshim.InferenceSession(model, index_mode="clamp")
    (got,) = session.run(None, {**feeds, "idx": np.array([9, 0, -1], dtype=np.int64)})
    (expected,) = ort_run(model, {**feeds, "idx": np.array([4, 0, 4], dtype=np.int64)})
    np.testing.assert_array_equal(got, expected)
    assert session.engine._check.agreements == 0


def test_check_can_be_turned_off_and_outputs_stay_the_same() -> None:
    from dmlshim.dml import FeatureLevel
    from dmlshim.execute.engine import EngineConfig
    from dmlshim.execute.engines.partitioned import PartitionedEngine

    model, feeds = chain_model()
    engine = PartitionedEngine(model, EngineConfig(FeatureLevel.parse("5_0"), whole_model_check=False))
    assert engine._check is None
    (got,), _ = engine.run(["y"], feeds)
    (expected,) = ort_run(model, feeds)
    np.testing.assert_array_equal(got, expected)


def test_identical_compares_bits() -> None:
    quiet = np.array([np.nan], dtype=np.float32)
    payload = np.array([0x7FC00001], dtype=np.uint32).view(np.float32)
    assert whole_model.identical(quiet, quiet.copy())
    assert not whole_model.identical(quiet, payload)
    assert not whole_model.identical(np.array([0.0]), np.array([-0.0]))
    assert not whole_model.identical(np.zeros(2, np.float32), np.zeros(2, np.float64))
    assert not whole_model.identical(np.zeros((2, 1)), np.zeros(2))
    assert whole_model.identical(np.array(["a", "b"], dtype=object), np.array(["a", "b"], dtype=object))
