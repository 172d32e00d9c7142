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
   fallback and falls back to the CPU with it (dmlshim dropped it and kept DirectML);
6. a session refused for use_per_session_threads = False (no global thread pools) leaves later sessions
   loading (dmlshim moved every later session to the missing pool);
8. options onnxruntime refuses with a plain RuntimeError (a bad thread affinity) are that class alone, its
   words first (dmlshim added InvalidArgument and its own sentence first);
10. options that choose providers (a selection policy, add_provider_for_devices): onnxruntime's warning
   that named providers win, once and only when providers are named (dmlshim's own sessions warned more).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import dmlshim
from tests.parity55_cases import (
    CPU,
    DATA,
    ENGINES,
    FEEDS,
    IDX,
    as_ortvalue,
    engine_kwargs,
    gather_model,
    outcome,
    same_error,
    two_input_model,
)

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
    model = gather_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    source: Any = model.SerializeToString() if given == "bytes" else str(path)

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        for key, value in CONTEXT_CASES[case].items():
            so.add_session_config_entry(key, value.format(out=tmp_path))
        return so

    theirs = outcome(lambda: ort.InferenceSession(source, options(), providers=[CPU]).run(None, FEEDS))
    before = sorted(p.name for p in tmp_path.iterdir())
    ours = outcome(
        lambda: dmlshim.InferenceSession(source, options(), **engine_kwargs(engine)).run(None, FEEDS)
    )
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
        assert isinstance(ours[1], dmlshim.DmlShimError)
    else:
        np.testing.assert_array_equal(ours[1][0], theirs[1][0])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no EP-context model written by either


def test_ep_context_refusal_is_the_model_error_second(tmp_path: Path) -> None:
    """A model onnxruntime cannot load is refused for that first, as onnxruntime refuses it."""
    broken = gather_model()
    broken.graph.node[0].input[1] = "missing"
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    theirs = outcome(lambda: ort.InferenceSession(broken.SerializeToString(), so, providers=[CPU]))
    ours = outcome(lambda: dmlshim.InferenceSession(broken.SerializeToString(), so))
    assert theirs[0] == ours[0] == "error"
    assert isinstance(ours[1], type(theirs[1])), (type(theirs[1]), type(ours[1]).__mro__)
    assert "ep_context_path" not in str(ours[1])


# --- 2. run_with_ort_values takes OrtValues only ---------------------------------------------------------


ORT_VALUE_FEEDS = {
    "arrays": lambda: {"d": DATA, "i": IDX},
    "one array": lambda: {"d": as_ortvalue(DATA), "i": IDX},
    "a list": lambda: {"d": as_ortvalue(DATA), "i": [2, 1]},
    "None": lambda: {"d": as_ortvalue(DATA), "i": None},
    "an array and a missing input": lambda: {"d": DATA},
    "OrtValues": lambda: {"d": as_ortvalue(DATA), "i": as_ortvalue(IDX)},
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("feeds", list(ORT_VALUE_FEEDS))
def test_run_with_ort_values_reads_feeds_as_onnxruntime(feeds: str, engine: str) -> None:
    model = two_input_model().SerializeToString()
    theirs = outcome(
        lambda: ort.InferenceSession(model, providers=[CPU]).run_with_ort_values(
            None, ORT_VALUE_FEEDS[feeds]()
        )
    )
    ours = outcome(
        lambda: dmlshim.InferenceSession(model, **engine_kwargs(engine)).run_with_ort_values(
            None, ORT_VALUE_FEEDS[feeds]()
        )
    )
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
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
    model = gather_model().SerializeToString()
    args = PROVIDER_ARGS[case]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # onnxruntime prints "EP Error" when it falls back
        theirs = outcome(
            lambda: ort.InferenceSession(model, enable_fallback=fallback, **args).get_providers()
        )
    ours = outcome(lambda: dmlshim.InferenceSession(model, enable_fallback=fallback, **args).get_providers())
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
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
    model = gather_model().SerializeToString()
    args = PROVIDER_ARGS[case]

    def change(session: Any) -> Any:
        session.set_providers(*args.values())
        return session.get_providers(), session.run(None, FEEDS)[0].tolist()

    theirs = outcome(lambda: change(ort.InferenceSession(model, providers=[CPU])))
    ours_session = dmlshim.InferenceSession(model, providers=[CPU])
    ours = outcome(lambda: change(ours_session))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
        assert ours_session.run(None, FEEDS)[0].tolist() == [[2.0, 3.0], [2.0, 3.0]]  # still usable
    else:
        assert ours[1] == theirs[1]


# --- 6. a session refused for use_per_session_threads = False leaves later sessions alone ---------------

_THREADS_SCRIPT = r"""
import json, sys
import numpy as np
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort
import dmlshim

who, steps = sys.argv[1], sys.argv[2].split(",")
if steps[0] == "global":
    ort.capi._pybind_state.set_global_thread_pool_sizes(2, 2)
    steps = steps[1:]
w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
graph = helper.make_graph(
    [helper.make_node("Gather", ["w", "i"], ["g"]), helper.make_node("Relu", ["g"], ["y"])],
    "g", [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
out = []
for step in steps:
    so = ort.SessionOptions()
    so.use_per_session_threads = step != "shared"
    try:
        if who == "onnxruntime":
            s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        else:
            s = dmlshim.InferenceSession(model.SerializeToString(), so)
        out.append(["ok", s.run(None, {"i": np.array([2, 0])})[0].tolist()])
    except RuntimeError as exc:
        out.append(["RuntimeError", str(exc).splitlines()[0][:40]])
print(json.dumps(out))
"""


@pytest.mark.parametrize("steps", ["shared,own", "own,shared,own", "global,shared,shared"])
def test_session_without_thread_pool_leaves_later_sessions_alone(tmp_path: Path, steps: str) -> None:
    """``use_per_session_threads = False`` without onnxruntime's global thread pools is refused (a
    ``RuntimeError``), and the program's next session with threads of its own loads, as in onnxruntime.
    dmlshim moved every later session of its own to the global pool the refused one asked for, so every
    later session failed."""
    import json
    import subprocess
    import sys

    script = tmp_path / "threads.py"
    script.write_text(_THREADS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    answers = []
    for who in ("onnxruntime", "dmlshim"):
        done = subprocess.run(
            [sys.executable, str(script), who, steps], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        answers.append(json.loads(done.stdout.strip().splitlines()[-1]))
    theirs, ours = answers
    assert [a[0] for a in ours] == [a[0] for a in theirs], (theirs, ours)
    assert [a[1] for a in ours if a[0] == "ok"] == [a[1] for a in theirs if a[0] == "ok"]


# --- 8. options onnxruntime refuses with a plain RuntimeError: that class alone -----------------------------

_STATUS_CLASSES = tuple(
    getattr(ort.capi.onnxruntime_pybind11_state, n)
    for n in (
        "Fail",
        "InvalidArgument",
        "InvalidGraph",
        "RuntimeException",
        "NotImplemented",
        "InvalidProtobuf",
    )
)


def _affinity(so: ort.SessionOptions) -> None:
    so.add_session_config_entry("session.intra_op_thread_affinities", "bogus")


def _two_affinities(so: ort.SessionOptions) -> None:
    so.add_session_config_entry("session.intra_op_thread_affinities", "1;2")


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("setup", [_affinity, _two_affinities], ids=["bogus affinity", "two affinities"])
def test_options_refused_with_onnxruntime_class_alone(setup: Any, engine: str) -> None:
    """onnxruntime refuses these options with a plain ``RuntimeError`` (no status class): dmlshim's error is
    one, and no ``InvalidArgument`` (which a client's ``except InvalidArgument:`` would catch only here);
    its text begins with onnxruntime's."""
    model = gather_model().SerializeToString()

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        setup(so)
        return so

    with contextlib.redirect_stdout(io.StringIO()):  # onnxruntime's "EP Error ... Falling back" lines
        theirs = outcome(lambda: ort.InferenceSession(model, options(), providers=[CPU]))
        ours = outcome(lambda: dmlshim.InferenceSession(model, options(), **engine_kwargs(engine)))
    assert theirs[0] == ours[0] == "error", (theirs, ours)
    same_error(theirs[1], ours[1])
    assert [isinstance(ours[1], c) for c in _STATUS_CLASSES] == [
        isinstance(theirs[1], c) for c in _STATUS_CLASSES
    ]


# --- 10. options that choose providers themselves: onnxruntime's warning, once, only when providers are named


def _policy(so: ort.SessionOptions) -> None:
    so.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)


def _cpu_devices(so: ort.SessionOptions) -> None:
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == CPU], {})


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("named", [None, [CPU]], ids=["no providers", "the CPU named"])
@pytest.mark.parametrize("setup", [_policy, _cpu_devices], ids=["selection policy", "devices added"])
def test_options_with_providers_warn_as_onnxruntime(setup: Any, named: Any, engine: str) -> None:
    """onnxruntime warns once that the options' providers give way when the caller names providers, and
    not at all when it names none; dmlshim's own sessions, which name providers, made it warn once or
    twice more (and with none named)."""
    if not hasattr(ort.SessionOptions, "has_providers"):
        pytest.skip("onnxruntime before 1.22 has no providers in its options")
    if named is not None and engine == "customop":
        pytest.skip("engine='customop' emulates DirectML: the CPU alone is dmlshim's own usage error")
    model = gather_model().SerializeToString()

    def warned(make: Any) -> tuple[list[str], list[str]]:
        so = ort.SessionOptions()
        setup(so)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = make(so)
        found = [
            str(w.message) for w in caught if "SessionOptions has already been configured" in str(w.message)
        ]
        return found, [p for p in session.get_providers() if p != "DmlExecutionProvider"]

    theirs = warned(lambda so: ort.InferenceSession(model, so, providers=named))
    ours = warned(lambda so: dmlshim.InferenceSession(model, so, providers=named, **engine_kwargs(engine)))
    assert ours == theirs
