"""Parity gaps a new user binding dmlshim under programs and libraries found (helper parity55). Every
expectation is what the installed onnxruntime does with the same call, computed in the test (1.32 and
1.24.4 alike):

1. ``ep.context_enable = 1`` for a model given as bytes without ``ep.context_file_path``: onnxruntime
   refuses the session (``InvalidArgument``: "Both ep_context_path and model_path are empty."); dmlshim
   built it;
2. ``run_with_ort_values`` with a feed that is no ``OrtValue`` (a numpy array, a list, None): onnxruntime's
   Python layer raises ``AttributeError`` (``... has no attribute '_get_c_value'``), after its missing-input
   ``ValueError``; dmlshim ran the arrays;
3. malformed ``providers``/``provider_options`` are onnxruntime's ``ValueError`` (its words first) in
   ``set_providers`` and in the constructor with ``enable_fallback=False`` (dmlshim raised
   ``InvalidArgument``); ``provider_options`` without ``providers`` is ignored, as onnxruntime ignores it
   (dmlshim refused it, or fell back to the CPU alone); an empty ``providers`` string or bytes means the
   default providers; a provider onnxruntime does not know at all is its ``RuntimeError`` without the
   fallback and falls back to the CPU with it (dmlshim dropped it and kept DirectML).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.oracle import IR_VERSION

CPU = "CPUExecutionProvider"
ENGINES: dict[str, dict[str, Any]] = {
    "partitioned": {},
    "cpu": {"engine": "cpu"},
    "customop": {"engine": "customop"},
}


def _engine(name: str) -> dict[str, Any]:
    if name == "customop":
        pytest.importorskip("onnxruntime_extensions")
    return ENGINES[name]


def _gather_model() -> onnx.ModelProto:
    """``y = Relu(Gather(w, i))`` over a 3x2 float initializer."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], (np.arange(6, dtype=np.float32) - 2).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["g"], name="g"), helper.make_node("Relu", ["g"], ["y"])],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


FEEDS = {"i": np.array([2, -1], dtype=np.int64)}


def _outcome(build: Any) -> tuple[str, Any]:
    """("ok", value) or ("error", the exception) of ``build()``; both libraries' provider warnings are
    kept out of the test log."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", build()
    except Exception as exc:  # whichever class: compared with onnxruntime's below
        return "error", exc


def _same_error(theirs: BaseException, ours: BaseException) -> None:
    """dmlshim's error is an instance of onnxruntime's class, and its text begins with onnxruntime's."""
    assert isinstance(ours, type(theirs)), (type(theirs), type(ours).__mro__)
    assert str(ours).startswith(str(theirs).strip().rstrip(".")), (str(theirs), str(ours))


# --- 1. ep.context_enable for a model given as bytes ---------------------------------------------------

CONTEXT_CASES = {
    "enable only": {"ep.context_enable": "1"},
    "embed mode 0": {"ep.context_enable": "1", "ep.context_embed_mode": "0"},
    "with a file path": {"ep.context_enable": "1", "ep.context_file_path": "{out}/ctx.onnx"},
    "enable 0": {"ep.context_enable": "0"},
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("given", ["bytes", "file"])
@pytest.mark.parametrize("case", list(CONTEXT_CASES))
def test_ep_context_options_as_onnxruntime(tmp_path: Path, case: str, given: str, engine: str) -> None:
    model = _gather_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    source: Any = model.SerializeToString() if given == "bytes" else str(path)

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        for key, value in CONTEXT_CASES[case].items():
            so.add_session_config_entry(key, value.format(out=tmp_path))
        return so

    theirs = _outcome(lambda: ort.InferenceSession(source, options(), providers=[CPU]).run(None, FEEDS))
    before = sorted(p.name for p in tmp_path.iterdir())
    ours = _outcome(lambda: dmlshim.InferenceSession(source, options(), **_engine(engine)).run(None, FEEDS))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
        assert isinstance(ours[1], dmlshim.DmlShimError)
    else:
        np.testing.assert_array_equal(ours[1][0], theirs[1][0])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no EP-context model written by either


def test_ep_context_refusal_is_the_model_error_second(tmp_path: Path) -> None:
    """A model onnxruntime cannot load is refused for that first, as onnxruntime refuses it."""
    broken = _gather_model()
    broken.graph.node[0].input[1] = "missing"
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    theirs = _outcome(lambda: ort.InferenceSession(broken.SerializeToString(), so, providers=[CPU]))
    ours = _outcome(lambda: dmlshim.InferenceSession(broken.SerializeToString(), so))
    assert theirs[0] == ours[0] == "error"
    assert isinstance(ours[1], type(theirs[1])), (type(theirs[1]), type(ours[1]).__mro__)
    assert "ep_context_path" not in str(ours[1])


# --- 2. run_with_ort_values takes OrtValues only ---------------------------------------------------------


def _two_input_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], name="g")],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def _value(array: np.ndarray) -> Any:
    return ort.OrtValue.ortvalue_from_numpy(array)


DATA = np.arange(6, dtype=np.float32).reshape(3, 2)
IDX = np.array([2, -1], dtype=np.int64)
ORT_VALUE_FEEDS = {
    "arrays": lambda: {"d": DATA, "i": IDX},
    "one array": lambda: {"d": _value(DATA), "i": IDX},
    "a list": lambda: {"d": _value(DATA), "i": [2, 1]},
    "None": lambda: {"d": _value(DATA), "i": None},
    "an array and a missing input": lambda: {"d": DATA},
    "OrtValues": lambda: {"d": _value(DATA), "i": _value(IDX)},
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("feeds", list(ORT_VALUE_FEEDS))
def test_run_with_ort_values_reads_feeds_as_onnxruntime(feeds: str, engine: str) -> None:
    model = _two_input_model().SerializeToString()
    theirs = _outcome(
        lambda: ort.InferenceSession(model, providers=[CPU]).run_with_ort_values(None, ORT_VALUE_FEEDS[feeds]())
    )
    ours = _outcome(
        lambda: dmlshim.InferenceSession(model, **_engine(engine)).run_with_ort_values(
            None, ORT_VALUE_FEEDS[feeds]()
        )
    )
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
        if isinstance(theirs[1], AttributeError):
            assert type(ours[1]) is AttributeError  # onnxruntime's own, nothing else
    else:
        assert [v.numpy().tolist() for v in ours[1]] == [v.numpy().tolist() for v in theirs[1]]


# --- 3. providers and provider_options as onnxruntime reads them ------------------------------------------

PROVIDER_ARGS: dict[str, dict[str, Any]] = {
    "options without providers": {"provider_options": [{}]},
    "two options without providers": {"provider_options": [{}, {}]},
    "options of another length": {"providers": [CPU], "provider_options": [{}, {}]},
    "a tuple with options": {"providers": [(CPU, {})], "provider_options": [{}]},
    "options not a sequence": {"providers": [CPU], "provider_options": {CPU: {}}},
    "options a string": {"providers": [CPU], "provider_options": "x"},
    "a 1-tuple": {"providers": [(CPU,)]},
    "a pair with a tuple": {"providers": [(CPU, ())]},
    "a set": {"providers": {CPU}},
    "bytes": {"providers": CPU.encode()},
    "empty bytes": {"providers": b""},
    "empty string": {"providers": ""},
    "a string": {"providers": CPU},
    "an unknown name": {"providers": ["NoSuchExecutionProvider"]},
    "an unknown name before DirectML": {"providers": ["NoSuchExecutionProvider", "DmlExecutionProvider"]},
    "an unavailable name": {"providers": ["CUDAExecutionProvider"]},
    "a tuple of names": {"providers": (CPU,)},
}


@pytest.mark.parametrize("fallback", [True, False])
@pytest.mark.parametrize("case", list(PROVIDER_ARGS))
def test_constructor_providers_as_onnxruntime(case: str, fallback: bool) -> None:
    model = _gather_model().SerializeToString()
    args = PROVIDER_ARGS[case]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # onnxruntime prints "EP Error" when it falls back
        theirs = _outcome(lambda: ort.InferenceSession(model, enable_fallback=fallback, **args).get_providers())
    ours = _outcome(lambda: dmlshim.InferenceSession(model, enable_fallback=fallback, **args).get_providers())
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
        return
    # DirectML is emulated where onnxruntime-directml would run it: its default providers (None, an empty
    # sequence) or DirectML named, unless onnxruntime fell back to the CPU alone
    named = args.get("providers")
    fell_back = "EP Error" in printed.getvalue()
    dml = not fell_back and (named is None or len(named) == 0 or "DmlExecutionProvider" in list(named))
    assert ours[1] == ["DmlExecutionProvider"] * dml + theirs[1], (ours, theirs, fell_back)


SET_PROVIDER_ARGS = [
    "options of another length",
    "a tuple with options",
    "options not a sequence",
    "options a string",
    "a 1-tuple",
    "a pair with a tuple",
    "a set",
    "bytes",
    "an unknown name",
    "a tuple of names",
    "an unavailable name",
]


@pytest.mark.parametrize("case", SET_PROVIDER_ARGS)
def test_set_providers_as_onnxruntime(case: str) -> None:
    model = _gather_model().SerializeToString()
    args = PROVIDER_ARGS[case]

    def change(session: Any) -> Any:
        session.set_providers(*args.values())
        return session.get_providers(), session.run(None, FEEDS)[0].tolist()

    theirs = _outcome(lambda: change(ort.InferenceSession(model, providers=[CPU])))
    ours_session = dmlshim.InferenceSession(model, providers=[CPU])
    ours = _outcome(lambda: change(ours_session))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
        assert ours_session.run(None, FEEDS)[0].tolist() == [[2.0, 3.0], [2.0, 3.0]]  # still usable
    else:
        assert ours[1] == theirs[1]
