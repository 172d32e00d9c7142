"""Session build: the whole-model check's onnxruntime session is built on a second thread while the
engine makes its steps, and the types CPU segments declare are worked out only when a segment session is
first built (issue 22: session build at onnxruntime's level)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.background import BackgroundBuild
from dmlshim.dml.enums import FeatureLevel
from dmlshim.errors import BadModelError
from dmlshim.execute.engine import EngineConfig
from dmlshim.execute.engines import whole_model_start
from dmlshim.execute.engines.partitioned import PartitionedEngine
from dmlshim.execute.plan import segments, step_list
from dmlshim.runtime.real import DISABLED_OPTIMIZERS, OrtInferenceSession, optimizers_disabled
from tests.oracle import ort_run
from tests.test_whole_model_check import _gather_chain


def test_background_build_returns_its_value_and_runs_on_another_thread() -> None:
    main = threading.get_ident()
    build = BackgroundBuild(lambda: threading.get_ident())
    assert build.result() != main


def test_background_build_raises_what_the_build_raised() -> None:
    def fail() -> None:
        raise BadModelError("refused", rule="a rule")

    build = BackgroundBuild(fail)
    build.wait()
    with pytest.raises(BadModelError, match="refused"):
        build.result()


def test_background_build_sees_the_callers_disabled_optimizers() -> None:
    with optimizers_disabled(frozenset({"MatMulAddFusion"})):
        build = BackgroundBuild(DISABLED_OPTIMIZERS.get)
    assert build.result() == frozenset({"MatMulAddFusion"})
    assert DISABLED_OPTIMIZERS.get() == frozenset()


def test_check_session_is_built_on_another_thread_with_the_sessions_optimizers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, feeds = _gather_chain()
    seen: list[tuple[int, Any]] = []

    class Recording(OrtInferenceSession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.append((threading.get_ident(), DISABLED_OPTIMIZERS.get()))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(whole_model_start, "OrtInferenceSession", Recording)
    session = dmlshim.InferenceSession(model, disabled_optimizers=["ConstantFolding"])
    assert session.engine._check is not None
    assert len(seen) == 1, "only the check's session is built (segment sessions wait for first use)"
    thread, disabled = seen[0]
    assert thread != threading.get_ident()
    assert disabled == frozenset({"ConstantFolding"})
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])
    assert session.last_run_record.path == "whole-model check"


def test_segment_types_are_worked_out_only_for_a_segment_session(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _gather_chain()
    calls: list[int] = []
    real = segments.proven_types

    def counting(m: Any) -> Any:
        calls.append(1)
        return real(m)

    monkeypatch.setattr(segments, "proven_types", counting)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # the partitions are tried
    session = dmlshim.InferenceSession(model, sess_options=so)
    assert calls == [], "built with the check: no segment session yet, no types proven"
    expected = ort_run(model, feeds)[0]
    paths = []
    for _ in range(3):
        (got,) = session.run(None, feeds)
        np.testing.assert_array_equal(got, expected)
        paths.append(session.last_run_record.path)
    assert "partitioned" in paths
    assert calls == [1], "proven once, for every segment"


def test_without_the_check_segment_sessions_are_built_with_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, feeds = _gather_chain()

    built: list[int] = []
    real = step_list.segment_session

    def counting(*args: Any) -> Any:
        built.append(1)
        return real(*args)

    monkeypatch.setattr("dmlshim.execute.plan.step_list.segment_session", counting)
    engine = PartitionedEngine(model, EngineConfig(FeatureLevel.FL_5_0, whole_model_check=False))
    assert len(built) == 3, "every CPU segment's session is built at once, so refusals surface here"
    (got,), _ = engine.run(["y"], feeds)
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_failed_step_making_waits_for_the_check_session(monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = _gather_chain()
    import dmlshim.execute.engines.partitioned as partitioned

    waited: list[bool] = []
    real_wait = partitioned.PendingCheck.wait

    def wait(self: Any) -> None:
        real_wait(self)
        waited.append(True)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise BadModelError("a step cannot be made", rule="a rule")

    monkeypatch.setattr(partitioned.PendingCheck, "wait", wait)
    monkeypatch.setattr(partitioned, "make_steps", broken)
    with pytest.raises(BadModelError, match="a step cannot be made"):
        dmlshim.InferenceSession(model)
    assert waited == [True]
