"""The partitioned engine's choice between the whole-model check and the partitioned steps: the first runs
try both, later runs take the cheaper; ``last_run_record.path`` says which answered, and every run's
outputs are onnxruntime's. Time is faked (no timing asserts): the clock says which path is cheaper."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.execute.engines import path_choice, whole_model
from dmlshim.execute.engines.path_choice import PathChooser
from dmlshim.execute.plan import steps
from dmlshim.execute.plan.cpu_step import CpuStep
from dmlshim.execute.record import PATH_CHECK, PATH_PARTITIONED, RUN_PATHS
from tests.oracle import ort_run
from tests.test_session_models import chain_model

TRIAL = 2 * (1 + path_choice.TIMED_RUNS)


def basic_options() -> ort.SessionOptions:
    """Optimization at most basic: the only levels at which the partitioned steps are tried (at extended
    and all, onnxruntime's fusions across partition boundaries change the last bits)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return so


def _clock(check_cost: float, partitioned_cost: float) -> Callable[[], float]:
    """A clock over which trial run k (alternating check, partitioned) lasts its path's cost."""
    ticks: list[float] = []
    now = 0.0
    for k in range(TRIAL):
        ticks.append(now)
        now += check_cost if k % 2 == 0 else partitioned_cost
        ticks.append(now)
    calls = iter(ticks)
    return lambda: next(calls, now)


def _run_all(session: dmlshim.InferenceSession, feeds: dict[str, np.ndarray], runs: int) -> list[str]:
    model_outputs = None
    paths = []
    for _ in range(runs):
        got = session.run(None, feeds)
        if model_outputs is None:
            model_outputs = got
        paths.append(session.last_run_record.path)
        for g, e in zip(got, model_outputs, strict=True):
            assert g.dtype == e.dtype and np.array_equal(g, e, equal_nan=True)
    return paths


@pytest.mark.parametrize(
    ("check_cost", "partitioned_cost", "kept"),
    [(1.0, 0.1, PATH_PARTITIONED), (0.1, 1.0, PATH_CHECK)],
)
def test_the_cheaper_path_answers_after_the_trial(
    check_cost: float, partitioned_cost: float, kept: str
) -> None:
    model, feeds = chain_model()
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=basic_options())
    engine = session.engine
    assert engine._check is not None, "three CPU segments: the whole-model check is built"
    engine._chooser.clock = _clock(check_cost, partitioned_cost)
    paths = []
    for _ in range(TRIAL + 3):
        got = session.run(None, feeds)
        paths.append(session.last_run_record.path)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and np.array_equal(g, e, equal_nan=True)
    assert paths[:TRIAL] == [PATH_CHECK, PATH_PARTITIONED] * (TRIAL // 2)
    assert paths[TRIAL:] == [kept] * 3
    assert engine._chooser.chosen == kept
    segments = [s for s in engine._steps if isinstance(s, CpuStep)]
    if kept == PATH_PARTITIONED:
        assert engine._check is None, "the check's session is dropped once the partitions are kept"
        assert all(s._session is not None for s in segments)
    else:
        assert engine._check is not None
        assert all(s._session is None for s in segments), "the trial's segment sessions are dropped"
    assert session.last_run_record.to_json()["path"] == kept


def test_kept_check_that_disagrees_rebuilds_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = chain_model()
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=basic_options())
    session.engine._chooser.clock = _clock(0.1, 1.0)
    assert set(_run_all(session, feeds, TRIAL)) == {PATH_CHECK, PATH_PARTITIONED}
    monkeypatch.setattr(whole_model, "identical", lambda ours, theirs: False)
    # Past its proved runs the small scatter is taken from onnxruntime when its indices prove it: made
    # to be computed and compared again (as a duplicate index would), its kernel "disagrees".
    monkeypatch.setattr(steps, "scatter_output_is_given", lambda *args: False)
    got = session.run(None, feeds)
    assert session.last_run_record.path == PATH_PARTITIONED
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g, e, equal_nan=True)


def test_large_weights_keep_the_check_without_a_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path_choice, "TRIAL_MAX_WEIGHT_BYTES", 0)
    model, feeds = chain_model()
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=basic_options())
    assert _run_all(session, feeds, 4) == [PATH_CHECK] * 4
    got = session.run(None, feeds)
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g, e, equal_nan=True)
    assert all(s._session is None for s in session.engine._steps if isinstance(s, CpuStep))


def test_a_check_that_gave_up_leaves_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = chain_model()
    session = dmlshim.InferenceSession(model, sess_options=basic_options())
    monkeypatch.setattr(whole_model, "identical", lambda ours, theirs: False)
    paths = _run_all(session, feeds, 2 * whole_model.GIVE_UP_AFTER + 2)
    assert set(paths) == {PATH_PARTITIONED}, "a disagreeing check never answers"
    assert session.engine._check is None


def test_chooser_schedule_and_choice() -> None:
    chooser = PathChooser(clock=lambda: 0.0)
    costs = {PATH_CHECK: [9.0, 3.0, 4.0], PATH_PARTITIONED: [50.0, 3.5, 2.9]}
    seen = {PATH_CHECK: 0, PATH_PARTITIONED: 0}
    chosen = None
    for _ in range(TRIAL):
        assert chosen is None
        path, number = chooser.next_path()
        chosen = chooser.observe(path, path, costs[path][seen[path]], number)
        seen[path] += 1
    # The warm-ups (9.0 and 50.0) do not count; the least timed run wins: 2.9 < 3.0.
    assert chosen == PATH_PARTITIONED == chooser.chosen
    assert chooser.next_path() == (PATH_PARTITIONED, -1)


@pytest.mark.parametrize(("engine", "path"), [("cpu", "onnxruntime cpu"), ("customop", "custom-op session")])
def test_other_engines_name_their_one_path(engine: str, path: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model, feeds = chain_model()
    session = dmlshim.InferenceSession(model, engine=engine)
    session.run(None, feeds)
    assert session.last_run_record.path == path
    assert path in RUN_PATHS


def test_partitions_that_fail_to_build_leave_the_check_answering() -> None:
    model, feeds = chain_model()
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(model, sess_options=basic_options())
    engine = session.engine

    def refused() -> None:
        raise dmlshim.BadModelError("onnxruntime refuses this partition (simulated)")

    for step in engine._steps:
        if isinstance(step, CpuStep):
            assert step._session is None, "with the check, segments are built on first use"
            step._build = refused
    paths = []
    for _ in range(3):
        got = session.run(None, feeds)
        paths.append(session.last_run_record.path)
        for g, e in zip(got, expected, strict=True):
            assert np.array_equal(g, e, equal_nan=True)
    assert paths == [PATH_CHECK] * 3
    assert engine._chooser.chosen == PATH_CHECK


@pytest.mark.parametrize("level", ["ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL", None])
def test_extended_optimization_keeps_the_check_on_every_run(level: str | None) -> None:
    # A new user's finding: with onnxruntime's default optimization, the partitioned steps gave other last
    # bits than onnxruntime on every other run. At these levels only the check answers.
    model, feeds = chain_model()
    so = None
    if level is not None:
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = dmlshim.InferenceSession(model, sess_options=so)
    paths = []
    for _ in range(TRIAL + 2):
        session.run(None, feeds)
        paths.append(session.last_run_record.path)
    assert paths == [PATH_CHECK] * (TRIAL + 2)


def test_a_partitioned_session_with_nothing_to_emulate_runs_whole_and_says_so() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    session = dmlshim.InferenceSession(model.SerializeToString())
    (got,) = session.run(None, {"x": np.array([-1.0, 0.5, 2.0], np.float32)})
    np.testing.assert_array_equal(got, np.array([0.0, 0.5, 2.0], np.float32))
    assert session.last_run_record.path == "onnxruntime cpu"
    assert session.last_run_record.engine == "partitioned"
