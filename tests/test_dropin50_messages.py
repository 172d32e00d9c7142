"""Error messages of the drop-in begin as onnxruntime's (found by a parity harness that ran one client
against onnxruntime and against dmlshim): a program that tests ``str(err).startswith(...)`` or
``"Invalid output name" in str(err)`` sees onnxruntime's words first, dmlshim's explanation after them.
Each expectation is onnxruntime's own message for the same call on the same model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim


def _model() -> bytes:
    nodes = [
        helper.make_node("Gather", ["data", "idx"], ["g"], axis=0, name="gather0"),
        helper.make_node("Relu", ["g"], ["y"], name="relu0"),
        helper.make_node("ScatterElements", ["data", "sidx", "upd"], ["s"], axis=1, name="scat0"),
    ]
    graph = helper.make_graph(
        nodes,
        "messages",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"]),
            helper.make_tensor_value_info("sidx", TensorProto.INT64, ["N", 2]),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, ["N", 2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K", 4]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 4]),
        ],
    )
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


FEEDS = {
    "data": np.arange(12, dtype=np.float32).reshape(3, 4),
    "idx": np.array([2, 0], np.int64),
    "sidx": np.array([[0, 3], [1, 2], [3, 0]], np.int64),
    "upd": np.array([[10, 20], [30, 40], [50, 60]], np.float32),
}


@pytest.fixture(scope="module")
def sessions() -> tuple[Any, Any]:
    def options() -> onnxruntime.SessionOptions:
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 4
        return so

    ours = dmlshim.InferenceSession(_model(), options())
    theirs = onnxruntime.InferenceSession(_model(), options(), providers=["CPUExecutionProvider"])
    return ours, theirs


def _raised(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _classes(exc: BaseException) -> list[str]:
    return [
        c.__name__ for c in type(exc).__mro__ if c.__module__.split(".")[0] in ("builtins", "onnxruntime")
    ]


def _terminated() -> onnxruntime.RunOptions:
    ro = onnxruntime.RunOptions()
    ro.terminate = True
    return ro


RUNS: dict[str, Callable[[Any], Any]] = {
    "unknown output": lambda s: s.run(["nope"], FEEDS),
    "unknown output, OrtValues": lambda s: s.run_with_ort_values(
        ["nope"], {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in FEEDS.items()}
    ),
    "terminate flag": lambda s: s.run(None, FEEDS, _terminated()),
    "python int feed": lambda s: s.run(None, {**FEEDS, "idx": 1}),
    "numpy scalar feed": lambda s: s.run(None, {**FEEDS, "idx": np.int64(1)}),
    "tuple feed": lambda s: s.run(None, {**FEEDS, "idx": (1, 0)}),
    "string feed": lambda s: s.run(None, {**FEEDS, "idx": "ab"}),
    "run_async, one intra-op thread": lambda s: s.run_async(None, FEEDS, lambda *_: None, None),
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_run_error_begins_as_onnxruntimes(sessions: tuple[Any, Any], case: str) -> None:
    ours, theirs = sessions
    expected, got = _raised(lambda: RUNS[case](theirs)), _raised(lambda: RUNS[case](ours))
    assert _classes(got) == _classes(expected)
    assert str(got).startswith(str(expected).strip()), (str(expected), str(got))
    assert isinstance(got, dmlshim.DmlShimError)


@pytest.mark.parametrize(
    ("op", "feeds"),
    [
        ("Gather", {"idx": np.array([5, 0], np.int64)}),
        ("ScatterElements", {"sidx": np.array([[0, 4], [1, 2], [3, 0]], np.int64)}),
    ],
)
def test_index_out_of_range_names_the_node_as_onnxruntime(
    sessions: tuple[Any, Any], op: str, feeds: dict[str, np.ndarray]
) -> None:
    ours, theirs = sessions
    expected = _raised(lambda: theirs.run(None, {**FEEDS, **feeds}))
    got = _raised(lambda: ours.run(None, {**FEEDS, **feeds}))
    assert _classes(got) == _classes(expected)
    # onnxruntime's words up to its kernel's own ("Status Message: indices element out of data bounds ...")
    lead = str(expected).split("Status Message: ")[0] + "Status Message: "
    assert f"running {op} node" in lead
    assert str(got).startswith(lead), (lead, str(got))


@pytest.mark.parametrize("case", ["missing file", "not a model"])
def test_load_error_begins_as_onnxruntimes(tmp_path: Path, case: str) -> None:
    model: Any = str(tmp_path / "nope.onnx") if case == "missing file" else b"not a model"
    expected = _raised(lambda: onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]))
    got = _raised(lambda: dmlshim.InferenceSession(model))
    assert _classes(got) == _classes(expected)
    assert str(got).startswith(str(expected).strip()), (str(expected), str(got))


def _binding(session: Any, feeds: dict[str, Any], outputs: tuple[str, ...] = ("y",)) -> Any:
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    for name in outputs:
        binding.bind_output(name)
    return binding


BINDINGS: dict[str, tuple[dict[str, Any], tuple[str, ...], Any]] = {
    "wrong dtype": ({**FEEDS, "data": FEEDS["data"].astype(np.float64)}, ("y",), None),
    "terminate flag": (FEEDS, ("y",), "terminate"),
    "no output bound": (FEEDS, (), None),
    "index out of range": ({**FEEDS, "idx": np.array([7], np.int64)}, ("y",), None),
    "unknown output": (FEEDS, ("nope",), None),
}


@pytest.mark.parametrize("case", sorted(BINDINGS))
def test_run_with_iobinding_error_begins_as_onnxruntimes(sessions: tuple[Any, Any], case: str) -> None:
    ours, theirs = sessions
    feeds, outputs, options = BINDINGS[case]

    def run(session: Any) -> None:
        session.run_with_iobinding(_binding(session, feeds, outputs), _terminated() if options else None)

    expected, got = _raised(lambda: run(theirs)), _raised(lambda: run(ours))
    assert _classes(got) == _classes(expected) == ["RuntimeError", "Exception", "BaseException", "object"]
    theirs_text = str(expected)
    # onnxruntime's own words after "Error in execution: ", as far as they are the same call's: its
    # kernel's message after "Status Message: "
    lead = theirs_text.split("Status Message: ")[0]
    assert lead.startswith("Error in execution: ")
    assert str(got).startswith(lead), (theirs_text, str(got))


BINDS: dict[str, Callable[[Any], Any]] = {
    "unknown input": lambda b: b.bind_cpu_input("nope", FEEDS["data"]),
    "list input": lambda b: b.bind_cpu_input("data", FEEDS["data"].tolist()),
    "OrtValue input": lambda b: b.bind_cpu_input(
        "data", onnxruntime.OrtValue.ortvalue_from_numpy(FEEDS["data"])
    ),
}


@pytest.mark.parametrize("case", sorted(BINDS))
def test_bind_error_begins_as_onnxruntimes(sessions: tuple[Any, Any], case: str) -> None:
    ours, theirs = sessions
    expected = _raised(lambda: BINDS[case](theirs.io_binding()))
    got = _raised(lambda: BINDS[case](ours.io_binding()))
    assert _classes(got) == _classes(expected)
    assert str(got).startswith(str(expected).strip()), (str(expected), str(got))


def _string_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=1, name="g0")],
        "strings",
        [
            helper.make_tensor_value_info("d", TensorProto.STRING, [2, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.STRING, None)],
    )
    return helper.make_model(
        graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]
    ).SerializeToString()


STRINGS = np.array([["a", "bb", "ccc"], ["d", "", "f"]], dtype=object)


@pytest.mark.parametrize("value", [STRINGS, STRINGS.astype(str), np.zeros((2, 3), np.float32)])
def test_bind_cpu_input_refuses_a_string_input_as_onnxruntime(value: np.ndarray) -> None:
    """onnxruntime's bind_cpu_input binds no input of type string, whatever array it is given (a string
    array bound to a float input is refused by the run instead, as a wrong type)."""
    ours = dmlshim.InferenceSession(_string_model())
    theirs = onnxruntime.InferenceSession(_string_model(), providers=["CPUExecutionProvider"])
    expected = _raised(lambda: theirs.io_binding().bind_cpu_input("d", value))
    got = _raised(lambda: ours.io_binding().bind_cpu_input("d", value))
    assert _classes(got) == _classes(expected)
    assert str(got).startswith(str(expected).strip()), (str(expected), str(got))
    # the run still takes strings, in both
    feeds = {"d": STRINGS, "i": np.array([2, 0], np.int64)}
    assert ours.run(None, feeds)[0].tolist() == theirs.run(None, feeds)[0].tolist()


def test_string_array_bound_to_a_float_input_fails_the_run(sessions: tuple[Any, Any]) -> None:
    ours, theirs = sessions

    def run(session: Any) -> None:
        binding = _binding(session, {**FEEDS, "data": np.array([["a", "b", "c", "d"]] * 3, dtype=object)})
        session.run_with_iobinding(binding)

    expected, got = _raised(lambda: run(theirs)), _raised(lambda: run(ours))
    assert _classes(got) == _classes(expected)
    assert str(got).startswith(str(expected).strip()), (str(expected), str(got))
