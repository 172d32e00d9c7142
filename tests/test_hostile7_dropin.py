"""Hostile pass h7 (issue 35), the drop-in session: arguments of the wrong type to ``run``, threads
sharing one session. What onnxruntime refuses dmlshim refuses with an error of onnxruntime's class; what
it accepts dmlshim answers with onnxruntime's values (asked in the test, tests/oracle.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadInputError

from .oracle import IR_VERSION, ort_session

ENGINES = ("partitioned", "customop", "cpu")
A = np.arange(12, dtype=np.float32).reshape(3, 4)


def _gather() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
        "h7",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["K"]),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


_CALLS: dict[str, Callable[[Any], Any]] = {
    "run_options_int": lambda s: s.run(None, {"d": A, "i": np.array([1])}, 5),
    "run_options_str": lambda s: s.run(None, {"d": A, "i": np.array([1])}, "terminate"),
    "run_options_dict": lambda s: s.run(None, {"d": A, "i": np.array([1])}, {"terminate": True}),
    "feed_key_int": lambda s: s.run(None, {"d": A, "i": np.array([1]), 5: np.array([1])}),
    "feed_key_tuple_first": lambda s: s.run(None, {("d",): A, "d": A, "i": np.array([1])}),
    "feed_key_int_and_missing": lambda s: s.run(None, {"d": A, 5: np.array([1])}),
    "feed_key_bytes_of_an_input": lambda s: s.run(None, {"d": A, b"i": np.array([1])}),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
@pytest.mark.parametrize("engine", ENGINES)
def test_run_arguments_of_the_wrong_type_are_onnxruntimes_errors(call: str, engine: str) -> None:
    """run_options=5 was ignored by the partitioned engine (onnxruntime: TypeError); a feed keyed by an int
    was an InvalidArgument 'Invalid input name' (onnxruntime's binding: TypeError)."""
    model = _gather()
    with pytest.raises(Exception) as theirs:
        _CALLS[call](ort_session(model))
    with pytest.raises(type(theirs.value)) as ours:
        _CALLS[call](dmlshim.InferenceSession(model, engine=engine))
    assert isinstance(ours.value, BadInputError)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_terminate_run_option_still_refuses_the_run(engine: str) -> None:
    model = _gather()
    options = onnxruntime.RunOptions()
    options.terminate = True
    with pytest.raises(Exception) as theirs:
        ort_session(model).run(None, {"d": A, "i": np.array([1])}, options)
    with pytest.raises(type(theirs.value)):
        dmlshim.InferenceSession(model, engine=engine).run(None, {"d": A, "i": np.array([1])}, options)


@pytest.mark.parametrize("engine", ENGINES)
def test_threads_sharing_a_session_each_get_their_own_shapes_values(engine: str) -> None:
    """Eight threads run one session with different data and index shapes; each answer is onnxruntime's
    for that thread's feeds."""
    model = _gather()
    session = dmlshim.InferenceSession(model, engine=engine)
    reference = ort_session(model)
    problems: list[Any] = []

    def work(k: int) -> None:
        try:
            for r in range(6):
                n = 3 + (k + r) % 4
                feeds = {
                    "d": np.arange(n * 4, dtype=np.float32).reshape(n, 4) * (k + 1),
                    "i": np.array([k % n, -1, 0][: 1 + (k + r) % 3]),
                }
                got = session.run(None, feeds)[0]
                want = reference.run(None, feeds)[0]
                if got.shape != want.shape or not np.array_equal(got, want):
                    problems.append((k, r, got, want))
        except Exception as exc:
            problems.append((k, repr(exc)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert not problems, problems[:3]


def test_an_optimized_model_path_ending_in_a_separator_is_refused(tmp_path: Any) -> None:
    """onnxruntime fails to write ``optimized_model_filepath = "opt/"`` (EISDIR, 'SystemError : 21'); dmlshim
    wrote a file named ``opt`` and built the session."""
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    so.optimized_model_filepath = str(tmp_path / "opt_ort") + "/"
    with pytest.raises(RuntimeError):
        onnxruntime.InferenceSession(_gather(), so, providers=["CPUExecutionProvider"])
    so.optimized_model_filepath = str(tmp_path / "opt") + "/"
    with pytest.raises(BadInputError, match="which names a folder") as caught:
        dmlshim.InferenceSession(_gather(), so, providers=["CPUExecutionProvider"])
    assert isinstance(caught.value, RuntimeError)  # onnxruntime's class, as above
    assert not (tmp_path / "opt").exists()


def test_an_optimized_model_path_naming_a_folder_is_onnxruntimes_runtime_error(tmp_path: Any) -> None:
    """onnxruntime raises a plain RuntimeError ('SystemError : 21') when ``optimized_model_filepath`` is an
    existing folder; dmlshim refuses it before writing, with the same class, and the folder stays."""
    (tmp_path / "here").mkdir()
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    so.optimized_model_filepath = str(tmp_path / "here")
    with pytest.raises(RuntimeError) as theirs:
        onnxruntime.InferenceSession(_gather(), so, providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError, match="is a directory") as ours:
        dmlshim.InferenceSession(_gather(), so, providers=["CPUExecutionProvider"])
    assert isinstance(ours.value, BadInputError) and type(theirs.value) is RuntimeError
    assert (tmp_path / "here").is_dir() and not any((tmp_path / "here").iterdir())
