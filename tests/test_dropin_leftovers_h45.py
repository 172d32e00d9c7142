"""What tests/test_dropin_clients_h42.py left: the session's own options, provider options, inputs onnxruntime
refuses, run_async with an output numpy cannot hold, and the private attributes clients read. Every
expectation is what the installed onnxruntime does with the same call in the same test."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

_TABLE = np.arange(12, dtype=np.float32).reshape(6, 2) / 4


def _model() -> onnx.ModelProto:
    """An embedding Gather (free batch dimension) whose rows are also returned as bfloat16."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0, name="embed"),
        helper.make_node("Cast", ["rows"], ["rows_bf16"], to=TensorProto.BFLOAT16, name="to_bf16"),
    ]
    graph = helper.make_graph(
        nodes,
        "leftovers",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])],
        [
            helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("rows_bf16", TensorProto.BFLOAT16, ["batch", 2]),
        ],
        [numpy_helper.from_array(_TABLE, "table")],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])


_DATA = _model().SerializeToString()
_FEEDS = {"ids": np.array([5, 0, -1], np.int64)}


def _options(threads: int = 1) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    return so


def _theirs(model: Any = _DATA, so: Any = None, **kwargs: Any) -> onnxruntime.InferenceSession:
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    return onnxruntime.InferenceSession(model, so, **kwargs)


def _raised(call: Any) -> BaseException:
    with pytest.raises(BaseException) as info:  # the class is compared with onnxruntime's
        call()
    return info.value


_FIELDS = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "graph_optimization_level",
    "execution_mode",
    "enable_mem_pattern",
    "log_severity_level",
    "logid",
    "enable_profiling",
    "profile_file_prefix",
    "optimized_model_filepath",
)


def _fields(so: Any) -> dict[str, Any]:
    return {name: getattr(so, name) for name in _FIELDS}


# --- 1. get_session_options(): the session's own copy ----------------------------------------------


@pytest.mark.parametrize("providers", [None, ["CPUExecutionProvider"]])
def test_the_session_options_are_the_sessions_own_copy(providers: list[str] | None) -> None:
    def build(cls: Any) -> tuple[Any, onnxruntime.SessionOptions]:
        so = _options(3)
        so.logid = "client"
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
        so.add_free_dimension_override_by_name("batch", 3)
        if cls is onnxruntime.InferenceSession:  # onnxruntime's CPU provider: what dmlshim answers for
            return cls(_DATA, so, providers=["CPUExecutionProvider"]), so
        return cls(_DATA, so, providers=providers), so

    (theirs, their_so), (ours, our_so) = build(onnxruntime.InferenceSession), build(dmlshim.InferenceSession)
    for sess, so in ((theirs, their_so), (ours, our_so)):
        got = sess.get_session_options()
        assert (got is so, got is sess.get_session_options()) == (False, True)
        assert sess._sess_options is got and sess._sess_options_initial is so
    want, got = theirs.get_session_options(), ours.get_session_options()
    assert _fields(got) == _fields(want)
    key = "session.set_denormal_as_zero"
    assert got.get_session_config_entry(key) == want.get_session_config_entry(key) == "1"
    # changing the copy changes neither the caller's object nor the session; changing the caller's object
    # later does not show in the copy
    for sess, so in ((theirs, their_so), (ours, our_so)):
        sess.get_session_options().intra_op_num_threads = 7
        so.logid = "later"
    assert [their_so.intra_op_num_threads, our_so.intra_op_num_threads] == [3, 3]
    assert _fields(ours.get_session_options()) == _fields(theirs.get_session_options())
    assert ours.get_session_options().logid == "client"
    np.testing.assert_array_equal(ours.run(["rows"], _FEEDS)[0], theirs.run(["rows"], _FEEDS)[0])


def test_default_options_and_set_providers_copy_again() -> None:
    theirs, ours = _theirs(), dmlshim.InferenceSession(_DATA)
    assert _fields(ours.get_session_options()) == _fields(theirs.get_session_options())
    assert ours.get_session_options() is ours.get_session_options()
    assert ours._sess_options_initial is theirs._sess_options_initial is None
    # onnxruntime re-creates its session from the caller's object as it is now
    so_theirs, so_ours = _options(2), _options(2)
    theirs, ours = _theirs(_DATA, so_theirs), dmlshim.InferenceSession(_DATA, so_ours)
    before = ours.get_session_options()
    so_theirs.intra_op_num_threads = so_ours.intra_op_num_threads = 4
    theirs.set_providers(["CPUExecutionProvider"])
    ours.set_providers(["CPUExecutionProvider"])
    assert ours.get_session_options() is not before
    assert _fields(ours.get_session_options()) == _fields(theirs.get_session_options())
    assert ours.get_session_options().intra_op_num_threads == 4


def test_the_copy_reports_profiling_and_the_optimized_model_and_builds_a_session(tmp_path: Path) -> None:
    sessions = []
    for name, cls in (("theirs", _theirs), ("ours", dmlshim.InferenceSession)):
        so = _options()
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / name)
        so.optimized_model_filepath = str(tmp_path / f"{name}_optimized.onnx")
        sessions.append(cls(_DATA, so))
    theirs, ours = sessions
    want, got = _fields(theirs.get_session_options()), _fields(ours.get_session_options())
    for path_field in ("profile_file_prefix", "optimized_model_filepath"):
        assert Path(got.pop(path_field)).name.replace("ours", "theirs") == Path(want.pop(path_field)).name
    assert got == want
    assert [Path(s.end_profiling()).is_file() for s in sessions] == [True, True]
    # a client clones a session from the options it reports
    clone_theirs = _theirs(_DATA, theirs.get_session_options())
    clone_ours = dmlshim.InferenceSession(_DATA, ours.get_session_options())
    np.testing.assert_array_equal(clone_ours.run(["rows"], _FEEDS)[0], clone_theirs.run(["rows"], _FEEDS)[0])
    for s in (clone_theirs, clone_ours):
        s.end_profiling()


@pytest.mark.parametrize("env", ["0", "1"])
def test_the_copy_follows_the_config_switch_alone(monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    # ORT_LOAD_CONFIG_FROM_MODEL=1 with a model that carries no ort_config: onnxruntime's session options
    # are then its defaults, not the caller's
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", env)
    so_theirs, so_ours = _options(3), _options(3)
    so_theirs.logid = so_ours.logid = "client"
    theirs, ours = _theirs(_DATA, so_theirs), dmlshim.InferenceSession(_DATA, so_ours)
    assert _fields(ours.get_session_options()) == _fields(theirs.get_session_options())
    assert (theirs.get_session_options().logid == "client") == (env == "0")
    np.testing.assert_array_equal(ours.run(["rows"], _FEEDS)[0], theirs.run(["rows"], _FEEDS)[0])


# --- 2. get_provider_options() -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("providers", "provider_options"),
    [
        (["CPUExecutionProvider"], None),
        ([("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})], None),
        (["CPUExecutionProvider"], [{"foo": 1}]),
        (["AzureExecutionProvider", "CPUExecutionProvider"], None),
        ("CPUExecutionProvider", None),  # a bare string: onnxruntime falls back to its CPU provider
    ],
)
def test_provider_options_are_what_onnxruntime_reports(providers: Any, provider_options: Any) -> None:
    azure = "AzureExecutionProvider"
    if azure in providers and azure not in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has no AzureExecutionProvider")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _theirs(providers=providers, provider_options=provider_options)
        ours = dmlshim.InferenceSession(_DATA, providers=providers, provider_options=provider_options)
    assert ours.get_providers() == theirs.get_providers()
    assert ours.get_provider_options() == theirs.get_provider_options()
    assert ours._provider_options == theirs._provider_options
    ours.set_providers(["CPUExecutionProvider"], [{"foo": "2"}])
    theirs.set_providers(["CPUExecutionProvider"], [{"foo": "2"}])
    assert ours.get_provider_options() == theirs.get_provider_options()


def test_emulated_directml_and_the_cpu_provider_report_as_onnxruntimes() -> None:
    # onnxruntime-directml's DirectML provider reports no options (it keeps none to report): {}
    asked = [("DmlExecutionProvider", {"device_id": 0}), ("CPUExecutionProvider", {"foo": "1"})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxruntime's CPU package has no DirectML: it drops it
        theirs = _theirs(providers=asked)
    ours = dmlshim.InferenceSession(_DATA, providers=asked)
    assert theirs.get_providers() == ["CPUExecutionProvider"]
    assert ours.get_provider_options() == {
        "DmlExecutionProvider": {},
        "CPUExecutionProvider": theirs.get_provider_options()["CPUExecutionProvider"],
    }


# --- 3. inputs onnxruntime refuses -------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [bytearray, memoryview])
def test_a_bytearray_or_memoryview_model_is_refused(wrap: Any) -> None:
    want = _raised(lambda: _theirs(wrap(_DATA)))
    got = _raised(lambda: dmlshim.InferenceSession(wrap(_DATA)))
    assert isinstance(got, type(want)) and isinstance(got, dmlshim.DmlShimError)
    assert type(want) is TypeError
    assert wrap.__name__ in str(got) and "bytes(model)" in str(got)
    assert dmlshim.InferenceSession(bytes(wrap(_DATA))).get_outputs()[0].name == "rows"


@pytest.mark.parametrize(
    "value",
    [[5, 0], (5, 0), 5, np.int64(5), None, "5", bytearray(b"\x05"), "ortvalue"],
    ids=["list", "tuple", "int", "numpy-scalar", "none", "str", "bytearray", "ortvalue"],
)
def test_bind_cpu_input_takes_numpy_arrays_only(value: Any) -> None:
    if isinstance(value, str) and value == "ortvalue":
        value = onnxruntime.OrtValue.ortvalue_from_numpy(np.array([5, 0], np.int64))
    theirs = _theirs()  # kept alive: onnxruntime 1.24's IOBinding does not keep its session
    want = _raised(lambda: theirs.io_binding().bind_cpu_input("ids", value))
    binding = dmlshim.InferenceSession(_DATA, _options()).io_binding()
    got = _raised(lambda: binding.bind_cpu_input("ids", value))
    assert isinstance(got, type(want)) and isinstance(got, dmlshim.DmlShimError)
    assert "'ids'" in str(got) and type(value).__name__ in str(got)
    hint = "bind_ortvalue_input" if isinstance(value, onnxruntime.OrtValue) else "np.asarray"
    assert hint in str(got)
    binding.bind_cpu_input("ids", np.array([5, 0], np.int64))  # the array is taken, as onnxruntime takes it
    binding.bind_output("rows")
    binding.session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _TABLE[[5, 0]])


# --- 4. run_async with a bfloat16 output -------------------------------------------------------------


def _run_async(session: Any, names: list[str]) -> tuple[threading.Event, list[Any]]:
    done, calls = threading.Event(), []

    def callback(outputs: Any, user_data: Any, error: str) -> None:
        calls.append((outputs, user_data, error))
        done.set()

    session.run_async(names, _FEEDS, callback, "token")
    return done, calls


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # onnxruntime's, unraised
def test_run_async_with_a_bfloat16_output() -> None:
    theirs, ours = _theirs(so=_options(2)), dmlshim.InferenceSession(_DATA, _options(2))
    plain, plain_calls = _run_async(theirs, ["rows"])
    assert plain.wait(30)
    want = plain_calls[0]
    their_bf16, their_calls = _run_async(theirs, ["rows_bf16"])
    assert not their_bf16.wait(1.5) and their_calls == []  # onnxruntime never calls back (stderr says why)
    done, calls = _run_async(ours, ["rows"])
    assert done.wait(30) and calls[0][1:] == want[1:] == ("token", "")
    np.testing.assert_array_equal(calls[0][0][0], want[0][0])
    with pytest.raises(RuntimeError, match="No corresponding Numpy type"):
        theirs.run(["rows_bf16"], _FEEDS)  # what onnxruntime's error says
    done, calls = _run_async(ours, ["rows_bf16"])
    assert done.wait(30)  # dmlshim calls back, with that error, rather than never
    outputs, user_data, error = calls[0]
    assert (outputs, user_data) == ([], "token")
    assert "No corresponding Numpy type" in error and "'rows_bf16'" in error
    assert "run_with_ort_values" in error


# --- 5. private attributes clients read --------------------------------------------------------------


@pytest.mark.parametrize("source", ["path", "bytes"])
def test_private_attributes_answer_as_onnxruntimes(tmp_path: Path, source: str) -> None:
    path = tmp_path / "leftovers.onnx"
    path.write_bytes(_DATA)
    model: Any = str(path) if source == "path" else _DATA
    so_theirs, so_ours = _options(), _options()
    theirs = _theirs(model, so_theirs)
    ours = dmlshim.InferenceSession(model, so_ours, providers=["CPUExecutionProvider"])
    for name in (
        "_model_path",
        "_model_bytes",
        "_providers",
        "_provider_options",
        "_enable_fallback",
        "_fallback_providers",
        "_read_config_from_model",
        "_profiling_start_time_ns",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert (ours._sess_options_initial is so_ours, theirs._sess_options_initial is so_theirs) == (True, True)
    assert _fields(ours._sess_options) == _fields(theirs._sess_options)
    assert [a.name for a in ours._inputs_meta] == [a.name for a in theirs._inputs_meta]
    assert len(ours._input_epdevices) == len(theirs._input_epdevices)
    # the C++ session's start time is a property there, not a method
    assert ours._sess.get_profiling_start_time_ns == theirs._sess.get_profiling_start_time_ns == 0
    assert _fields(ours._sess.session_options) == _fields(theirs._sess.session_options)


# --- more: set_providers with a bare string ----------------------------------------------------------


def test_set_providers_with_a_bare_string_raises_onnxruntimes_class_and_keeps_the_session() -> None:
    theirs, ours = _theirs(so=_options()), dmlshim.InferenceSession(_DATA, _options())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxruntime warns about each character
        want = _raised(lambda: theirs.set_providers("CPUExecutionProvider"))  # type: ignore[arg-type]
    got = _raised(lambda: ours.set_providers("CPUExecutionProvider"))  # type: ignore[arg-type]
    assert isinstance(got, type(want)) and isinstance(got, dmlshim.DmlShimError)
    assert "['CPUExecutionProvider']" in str(got)
    # onnxruntime's session is torn down by the failed call; dmlshim's keeps its providers and runs
    assert ours.get_providers() == ["DmlExecutionProvider", "CPUExecutionProvider"]
    np.testing.assert_array_equal(ours.run(["rows"], _FEEDS)[0], _TABLE[[5, 0, -1]])


@pytest.mark.parametrize(
    ("name", "public"),
    [
        ("_captured_graph_bindings", "release_captured_graph"),
        ("_reset_session", "set_providers"),
        ("_create_inference_session", "set_providers"),
        ("_bind_session", "InferenceSession"),
        ("_register_ep_custom_ops", "register_custom_ops_library"),
        ("_validate_input", "run()"),
    ],
)
def test_onnxruntime_internals_dmlshim_does_not_keep_name_the_public_call(name: str, public: str) -> None:
    theirs, ours = _theirs(), dmlshim.InferenceSession(_DATA)
    if not hasattr(theirs, name):
        pytest.skip(f"onnxruntime {onnxruntime.__version__} has no {name}")
    with pytest.raises(AttributeError, match=public.replace("(", r"\(").replace(")", r"\)")) as info:
        getattr(ours, name)
    assert info.value.name == name
    assert not hasattr(ours, "_no_such_attribute") and not hasattr(theirs, "_no_such_attribute")
