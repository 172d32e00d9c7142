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
4. a list fed to a string input: each element as str() writes it (b"ab" is "b'ab'"; dmlshim decoded bytes),
   and a string with a lone surrogate is onnxruntime's UnicodeEncodeError (dmlshim: InvalidArgument);
5. an array taken from an IOBinding output (get_outputs()[0].numpy()) outlives the binding and the session,
   as onnxruntime's does (dmlshim's read freed memory: garbage or a crash);
6. a session refused for use_per_session_threads = False (no global thread pools) leaves later sessions
   loading (dmlshim moved every later session to the missing pool);
7. an input of an optional type may be left out of the feed (dmlshim called it missing);
8. options onnxruntime refuses with a plain RuntimeError (a bad thread affinity) are that class alone, its
   words first (dmlshim added InvalidArgument and its own sentence first);
9. output_names: a bytearray name is read as bytes, a generator yielding nothing is onnxruntime's
   InvalidArgument "At least one output should be requested." (dmlshim: TypeError, and [] returned);
10. options that choose providers (a selection policy, add_provider_for_devices): onnxruntime's warning
   that named providers win, once and only when providers are named (dmlshim's own sessions warned more);
11. a 0-d value fed beside a bfloat16 OrtValue, and a 0-d output of run_with_ortvaluevector, stay 0-d
   (numpy's ascontiguousarray made them 1-d); the custom-op engine reads a 0-d bfloat16 feed's rank;
12. a float8e4m3fn value beside an emulated node comes out of run_with_ort_values as float8e4m3fn (the
   whole-model check read it through onnxruntime's run, as uint8);
13. a model onnxruntime loads only once its optimizations remove a node no kernel runs (an int4 Identity)
   is accepted at those levels (the acceptance session, optimizations off, refused it).
"""

from __future__ import annotations

import contextlib
import io
import os
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
        lambda: ort.InferenceSession(model, providers=[CPU]).run_with_ort_values(
            None, ORT_VALUE_FEEDS[feeds]()
        )
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
        theirs = _outcome(
            lambda: ort.InferenceSession(model, enable_fallback=fallback, **args).get_providers()
        )
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


# --- 4. string feeds given as lists, and strings UTF-8 cannot hold ---------------------------------------


def _string_model() -> onnx.ModelProto:
    """``y = Gather(s, i)`` and ``z = Identity(s)`` over a string input of any length."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["s", "i"], ["y"], name="g"), helper.make_node("Identity", ["s"], ["z"])],
        "strings",
        [
            helper.make_tensor_value_info("s", TensorProto.STRING, [None]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [None]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.STRING, None),
            helper.make_tensor_value_info("z", TensorProto.STRING, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


STRING_FEEDS: dict[str, Any] = {
    "a list of bytes": [b"ab", b"c"],  # onnxruntime: "b'ab'", as str() writes them
    "a list of mixed values": ["a", b"b", 1, None, 2.5],
    "a list of numpy bytes": [np.bytes_(b"q"), "r"],
    "a list of floats": [np.float32(0.1), 1e20, 0.5],
    "a ragged list": [["a"], ["b", "c"]],
    "a list with a lone surrogate": ["\ud800", "c"],
    "an object array with a lone surrogate": np.array(["\ud800", "c"], dtype=object),
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("feed", list(STRING_FEEDS))
def test_string_feeds_read_as_onnxruntime(feed: str, engine: str) -> None:
    model = _string_model().SerializeToString()
    feeds = {"s": STRING_FEEDS[feed], "i": np.array([1, 0], dtype=np.int64)}
    theirs = _outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(None, feeds))
    ours = _outcome(lambda: dmlshim.InferenceSession(model, **_engine(engine)).run(None, feeds))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
        return
    for mine, want in zip(ours[1], theirs[1], strict=True):
        assert mine.dtype == want.dtype and mine.tolist() == want.tolist()


# --- 5. an IOBinding's outputs outlive the binding and the session -----------------------------------------


@pytest.mark.parametrize("engine", list(ENGINES))
def test_iobinding_output_arrays_outlive_the_binding(engine: str) -> None:
    """An array taken with ``get_outputs()[0].numpy()`` keeps the memory onnxruntime's binding allocated
    alive (its base holds the OrtValue): it reads the run's values after the binding and the session are
    gone. dmlshim's binding handed out an OrtValue borrowing its own array, so such an array read freed
    memory (garbage, or a crash)."""
    import gc

    model = _two_input_model().SerializeToString()

    def outputs(make: Any) -> list[np.ndarray]:
        session = make()
        binding = session.io_binding()
        binding.bind_cpu_input("d", DATA)
        binding.bind_cpu_input("i", IDX)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
        return [value.numpy() for value in binding.get_outputs()]

    want = outputs(lambda: ort.InferenceSession(model, providers=[CPU]))
    kept = [outputs(lambda: dmlshim.InferenceSession(model, **_engine(engine))) for _ in range(3)]
    gc.collect()
    for _ in range(3):  # memory freed by then is handed out again
        np.zeros((64, 64), dtype=np.float32).fill(-7.0)
    for got in kept:
        assert [a.tolist() for a in got] == [a.tolist() for a in want] == [[[4.0, 5.0], [4.0, 5.0]]]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_iobinding_output_shows_the_next_run_after_the_fix(engine: str) -> None:
    """Still as onnxruntime: an output bound by name keeps the memory its first run allocated, so an
    OrtValue (and an array viewing it) taken after one run shows the next run's values."""
    model = _two_input_model().SerializeToString()

    def two_runs(session: Any) -> tuple[list[Any], list[Any]]:
        binding = session.io_binding()
        binding.bind_cpu_input("d", DATA)
        binding.bind_cpu_input("i", IDX)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
        first = binding.get_outputs()[0]
        view = first.numpy()
        binding.bind_cpu_input("i", np.array([0, 1], dtype=np.int64))
        session.run_with_iobinding(binding)
        return first.numpy().tolist(), view.tolist()

    want = two_runs(ort.InferenceSession(model, providers=[CPU]))
    assert two_runs(dmlshim.InferenceSession(model, **_engine(engine))) == want


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


# --- 7. an input of an optional type may be left out of the feed -----------------------------------------


def _optional_input_model() -> onnx.ModelProto:
    """``y`` gathers ``d`` at the optional input's indices when it holds a value (``d`` itself when not),
    ``z = Gather(d, i)``, and the optional input is also an output."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, [2]))
    fed = helper.make_graph(
        [
            helper.make_node("OptionalGetElement", ["o"], ["oi"]),
            helper.make_node("Gather", ["d", "oi"], ["r"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
    )
    empty = helper.make_graph(
        [helper.make_node("Identity", ["d"], ["r"])],
        "else",
        [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("OptionalHasElement", ["o"], ["h"]),
            helper.make_node("If", ["h"], ["y"], then_branch=fed, else_branch=empty),
            helper.make_node("Gather", ["d", "i"], ["z"], name="g"),
        ],
        "optional_input",
        [
            helper.make_value_info("o", optional),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
            helper.make_value_info("o", optional),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


OPTIONAL_FEEDS: dict[str, dict[str, Any]] = {
    "left out": {},
    "None": {"o": None},
    "given": {"o": np.array([1, 1], dtype=np.int64)},
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("given", list(OPTIONAL_FEEDS))
def test_optional_input_may_be_left_out(given: str, engine: str) -> None:
    model = _optional_input_model().SerializeToString()
    feeds = {
        "d": np.arange(3, dtype=np.float32),
        "i": np.array([2, 0], dtype=np.int64),
        **OPTIONAL_FEEDS[given],
    }
    theirs = _outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(None, feeds))
    ours = _outcome(lambda: dmlshim.InferenceSession(model, **_engine(engine)).run(None, feeds))
    assert theirs[0] == ours[0] == "ok", (theirs, ours)
    assert [None if v is None else v.tolist() for v in ours[1]] == [
        None if v is None else v.tolist() for v in theirs[1]
    ]


def test_a_required_input_left_out_still_names_every_input() -> None:
    model = _optional_input_model().SerializeToString()
    theirs = _outcome(
        lambda: ort.InferenceSession(model, providers=[CPU]).run(None, {"d": np.ones(3, np.float32)})
    )
    ours = _outcome(lambda: dmlshim.InferenceSession(model).run(None, {"d": np.ones(3, np.float32)}))
    assert theirs[0] == ours[0] == "error"
    _same_error(theirs[1], ours[1])
    assert "model inputs: o, d, i" in str(ours[1])


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
    model = _gather_model().SerializeToString()

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        setup(so)
        return so

    with contextlib.redirect_stdout(io.StringIO()):  # onnxruntime's "EP Error ... Falling back" lines
        theirs = _outcome(lambda: ort.InferenceSession(model, options(), providers=[CPU]))
        ours = _outcome(lambda: dmlshim.InferenceSession(model, options(), **_engine(engine)))
    assert theirs[0] == ours[0] == "error", (theirs, ours)
    _same_error(theirs[1], ours[1])
    assert [isinstance(ours[1], c) for c in _STATUS_CLASSES] == [
        isinstance(theirs[1], c) for c in _STATUS_CLASSES
    ]


# --- 9. output_names that onnxruntime's binding reads: a bytearray name, a generator yielding nothing ------

OUTPUT_NAMES: dict[str, Any] = {
    "a bytearray name": lambda: [bytearray(b"y")],
    "an empty generator": lambda: (n for n in ()),
    "a generator": lambda: (n for n in ["y"]),
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("names", list(OUTPUT_NAMES))
def test_output_names_read_as_onnxruntime_binding(names: str, engine: str) -> None:
    model = _two_input_model().SerializeToString()
    feeds = {"d": DATA, "i": IDX}
    theirs = _outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(OUTPUT_NAMES[names](), feeds))
    ours = _outcome(
        lambda: dmlshim.InferenceSession(model, **_engine(engine)).run(OUTPUT_NAMES[names](), feeds)
    )
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
    else:
        assert [a.tolist() for a in ours[1]] == [a.tolist() for a in theirs[1]]


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
    model = _gather_model().SerializeToString()

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
    ours = warned(lambda so: dmlshim.InferenceSession(model, so, providers=named, **_engine(engine)))
    assert ours == theirs


# --- 11. a 0-d value stays 0-d beside an OrtValue numpy cannot hold, and through run_with_ortvaluevector --


def _bfloat16_scalar_model() -> onnx.ModelProto:
    """``y = Gather(d, i)`` of a bfloat16 vector at a scalar index (a 0-d output), ``t = Identity(s)`` of a
    0-d bfloat16 input."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], name="g"), helper.make_node("Identity", ["s"], ["t"])],
        "bf16",
        [
            helper.make_tensor_value_info("d", TensorProto.BFLOAT16, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("s", TensorProto.BFLOAT16, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None),
            helper.make_tensor_value_info("t", TensorProto.BFLOAT16, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_scalar_beside_bfloat16_keeps_its_rank(engine: str) -> None:
    """A 0-d index fed beside a bfloat16 OrtValue went to onnxruntime as a 1-element vector (the output was
    ``[1]``, onnxruntime's ``[]``), and the custom-op engine could not read a 0-d bfloat16 feed's rank."""
    model = _bfloat16_scalar_model().SerializeToString()

    def shapes(session: Any) -> list[Any]:
        bits = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
        feeds = {
            "d": bits(np.array([16256, 16384, 16448], dtype=np.uint16), TensorProto.BFLOAT16),
            "i": _value(np.array(1, dtype=np.int64)),
            "s": bits(np.array(16256, dtype=np.uint16), TensorProto.BFLOAT16),
        }
        outs = session.run_with_ort_values(None, feeds)
        return [(o.shape(), o.data_type()) for o in outs]

    want = shapes(ort.InferenceSession(model, providers=[CPU]))
    assert want[0][0] == []
    assert shapes(dmlshim.InferenceSession(model, **_engine(engine))) == want


@pytest.mark.parametrize("engine", list(ENGINES))
def test_run_with_ortvaluevector_keeps_a_scalar_output(engine: str) -> None:
    model = _two_input_model()
    del model.graph.input[0].type.tensor_type.shape.dim[1:]  # d: a vector of 3
    model.graph.input[1].type.tensor_type.shape.ClearField("dim")  # i: a scalar, so y is 0-d
    model.graph.output[0].type.tensor_type.ClearField("shape")
    source = model.SerializeToString()
    c = ort.capi._pybind_state

    def fetched(session: Any) -> list[Any]:
        feeds = c.OrtValueVector()
        feeds.push_back(_value(np.array([1.0, 2.0, 3.0], dtype=np.float32))._get_c_value())
        feeds.push_back(_value(np.array(2, dtype=np.int64))._get_c_value())
        fetches = c.OrtValueVector()
        device = c.OrtDevice(c.OrtDevice.cpu(), c.OrtDevice.default_memory(), 0)
        session.run_with_ortvaluevector(ort.RunOptions(), ["d", "i"], feeds, ["y"], fetches, [device])
        value = ort.OrtValue(fetches[0])
        return [value.shape(), value.numpy().tolist()]

    want = fetched(ort.InferenceSession(source, providers=[CPU]))
    assert want == [[], 3.0]
    assert fetched(dmlshim.InferenceSession(source, **_engine(engine))) == want


# --- 12. a float8e4m3fn value beside an emulated node keeps its type in run_with_ort_values -----------------


@pytest.mark.parametrize("engine", list(ENGINES))
def test_float8e4m3fn_output_keeps_its_type(engine: str) -> None:
    """The whole-model check ran onnxruntime's ``run``, which gives a float8e4m3fn value as its bytes: the
    output of ``run_with_ort_values`` came back a uint8 OrtValue (onnxruntime: float8e4m3fn). ``run``
    still gives the bytes, as onnxruntime's."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["d"], ["y"]), helper.make_node("Gather", ["f", "i"], ["z"], name="g")],
        "f8",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT8E4M3FN, [3]),
            helper.make_tensor_value_info("f", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    source = model.SerializeToString()

    def answers(session: Any) -> list[Any]:
        feeds = {
            "d": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.array([56, 60, 64], dtype=np.uint8), TensorProto.FLOAT8E4M3FN
            ),
            "f": _value(np.arange(3, dtype=np.float32)),
            "i": _value(np.array(2, dtype=np.int64)),
        }
        runs = []
        for _ in range(3):  # the check answers from the second run on
            values = session.run_with_ort_values(None, feeds)
            arrays = session.run(None, feeds)
            runs.append(
                [(v.data_type(), v.shape()) for v in values] + [(a.dtype.name, a.tolist()) for a in arrays]
            )
        return runs

    want = answers(ort.InferenceSession(source, providers=[CPU]))
    assert want[0][0] == ("tensor(float8e4m3fn)", [3]) and want[0][2] == ("uint8", [56, 60, 64])
    assert answers(dmlshim.InferenceSession(source, **_engine(engine))) == want


# --- 13. a model onnxruntime loads only once it optimizes a node away is accepted at those levels ----------


def _int4_identity_model() -> onnx.ModelProto:
    """``Identity`` of an int4 value (no CPU kernel at opset 21: onnxruntime loads the model only once its
    optimizations remove the node), and a Gather of the float input."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT4),
            helper.make_node("Identity", ["c"], ["y"]),
            helper.make_node("Gather", ["x", "i"], ["z"], name="g"),
        ],
        "int4",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.INT4, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("level", [None, 0, 1, 99], ids=["default", "disable all", "basic", "all"])
def test_model_loading_only_once_optimized_as_onnxruntime(level: Any, engine: str) -> None:
    """dmlshim's acceptance session ran with optimizations off, so it refused a model onnxruntime loads at
    the caller's level (``NotImplemented``: no kernel for the node its optimizations remove)."""
    model = _int4_identity_model().SerializeToString()

    def options() -> ort.SessionOptions | None:
        if level is None:
            return None
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel(level)
        return so

    def answer(session: Any) -> list[Any]:
        feeds = {"x": _value(np.array([0.5, 1.0, -2.0, 7.0], np.float32)), "i": _value(np.array([3, 0]))}
        values = session.run_with_ort_values(None, feeds)
        return [(v.data_type(), v.shape()) for v in values] + [values[1].numpy().tolist()]

    theirs = _outcome(lambda: answer(ort.InferenceSession(model, options(), providers=[CPU])))
    ours = _outcome(lambda: answer(dmlshim.InferenceSession(model, options(), **_engine(engine))))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        _same_error(theirs[1], ours[1])
    else:
        assert ours[1] == theirs[1]
