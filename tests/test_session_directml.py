"""The directml engine: runs only where onnxruntime-directml provides DmlExecutionProvider."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dmlshim import EngineUnavailableError, InferenceSession
from dmlshim.directml.engine import dml_available, linux_stack_available, unavailable_reason
from dmlshim.execute.engine import engine_names
from tests.oracle import ort_run
from tests.test_session_models import assert_bitwise, chain_model


@pytest.mark.skipif(dml_available(), reason="real DirectML is available in-process here")
def test_directml_engine_unavailable_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_CACHE_DIR", str(tmp_path))  # no Linux stack in reach, set up or not
    assert not linux_stack_available()
    model, _ = chain_model()
    with pytest.raises(EngineUnavailableError) as err:
        InferenceSession(model, engine="directml")
    message = str(err.value)
    assert "DmlExecutionProvider is not available on this machine" in message
    assert "onnxruntime-directml" in message and "Windows" in message
    assert "dmlshim directml setup" in message


def test_unknown_engine_lists_the_known_ones() -> None:
    model, _ = chain_model()
    with pytest.raises(EngineUnavailableError, match="unknown engine 'gpu'"):
        InferenceSession(model, engine="gpu")
    assert {"partitioned", "directml"} <= set(engine_names())


@pytest.mark.skipif(not (dml_available() or linux_stack_available()), reason=unavailable_reason())
def test_directml_engine_runs_the_model() -> None:  # pragma: no cover - real DirectML only
    model, feeds = chain_model()
    sess = InferenceSession(model, engine="directml")
    got = sess.run(None, feeds)
    assert_bitwise(got, ort_run(model, feeds))
    assert "DmlExecutionProvider" in sess.get_providers()
    assert sess.last_run_record is not None and sess.last_run_record.engine == "directml"
    assert np.isnan(got[0]).any() == np.isnan(ort_run(model, feeds)[0]).any()
