"""What clients of onnxruntime rely on besides the methods: onnxruntime's exception classes (dmlshim's
errors are instances of both), bind-time errors, the private attributes clients read, and free-dimension
overrides in the reported shapes. Expected classes and values are what onnxruntime does on the same call."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as state

import dmlshim
from dmlshim import BadInputError, BadModelError, IndexOutOfRangeError

MODEL = helper.make_model(
    helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["K"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    ),
    ir_version=10,
    opset_imports=[helper.make_opsetid("", 17)],
).SerializeToString()
X = np.arange(15, dtype=np.float32).reshape(5, 3)
I = np.array([4, 0], dtype=np.int64)  # noqa: E741


def _options() -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return so


def _both() -> tuple[Any, Any]:
    return dmlshim.InferenceSession(MODEL, _options()), onnxruntime.InferenceSession(MODEL, _options())


def _raised(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


CASES: dict[str, Callable[[Any], Any]] = {
    "wrong dtype": lambda s: s.run(None, {"x": X.astype(np.float64), "i": I}),
    "wrong rank": lambda s: s.run(None, {"x": X[None], "i": I}),
    "wrong dimension": lambda s: s.run(None, {"x": np.zeros((5, 4), np.float32), "i": I}),
    "unknown output": lambda s: s.run(["z"], {"x": X, "i": I}),
    "index out of range": lambda s: s.run(None, {"x": X, "i": np.array([7, 0])}),
    "missing input": lambda s: s.run(None, {"x": X}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_errors_are_onnxruntimes_classes(case: str) -> None:
    ours, theirs = _both()
    expected = type(_raised(lambda: CASES[case](theirs)))
    got = _raised(lambda: CASES[case](ours))
    assert isinstance(got, expected), (case, type(got).__mro__, expected)
    assert isinstance(got, BadInputError)  # and still dmlshim's own, with its clearer message
    if case == "index out of range":
        assert isinstance(got, IndexOutOfRangeError) and got.node == "g"


def test_load_errors_are_onnxruntimes_classes(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.onnx")
    for source, name in ((missing, "NoSuchFile"), (b"garbage", "InvalidProtobuf")):
        theirs = _raised(lambda s=source: onnxruntime.InferenceSession(s))
        ours = _raised(lambda s=source: dmlshim.InferenceSession(s))
        assert type(theirs) is getattr(state, name)
        assert isinstance(ours, getattr(state, name)) and isinstance(ours, BadModelError), type(ours).__mro__


def test_iobinding_errors_at_bind_time_and_run_time() -> None:
    ours, theirs = _both()
    bindings = []
    for session in (ours, theirs):
        binding = session.io_binding()
        bindings.append(binding)
        with pytest.raises(RuntimeError):
            binding.bind_cpu_input("unknown", X)  # at once, as onnxruntime
        binding.bind_cpu_input("x", X)
        binding.bind_output("y")
        with pytest.raises(RuntimeError):
            session.run_with_iobinding(binding)  # input "i" never bound
    with pytest.raises(RuntimeError, match="missing feed") as unbound:
        ours.run_with_iobinding(bindings[0])
    # onnxruntime's IOBinding raises a plain RuntimeError ("Error in execution: ..."), no status class
    with pytest.raises(RuntimeError) as theirs_unbound:
        theirs.run_with_iobinding(bindings[1])
    for cls in (state.Fail, state.InvalidArgument, ValueError):
        assert isinstance(unbound.value, cls) == isinstance(theirs_unbound.value, cls), cls
    with pytest.raises(BadInputError, match=r"'unknown'.*not an input"):
        ours.io_binding().bind_cpu_input("unknown", X)


def test_combined_errors_pickle() -> None:
    ours, _ = _both()
    err = _raised(lambda: ours.run(None, {"x": X.astype(np.float64), "i": I}))
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err) and str(again) == str(err)
    assert type(err).__name__ == "BadInputError"


def test_private_attributes_clients_read(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(MODEL)
    for source in (str(path), path, MODEL):
        ours = dmlshim.InferenceSession(source, providers=["CPUExecutionProvider"])
        theirs = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
        assert ours._model_path == theirs._model_path
        assert ours._model_bytes == theirs._model_bytes
        assert ours._providers == theirs._providers
        assert ours._provider_options == theirs._provider_options
        assert ours._enable_fallback == theirs._enable_fallback
        assert [a.name for a in ours._inputs_meta] == [a.name for a in theirs._inputs_meta]
        assert [a.shape for a in ours._sess.inputs_meta] == [a.shape for a in theirs._sess.inputs_meta]
        assert ours._model_meta.graph_name == theirs._model_meta.graph_name
    ours = dmlshim.InferenceSession(MODEL)
    got = ours._sess.run(["y"], {"x": X, "i": I}, None)
    np.testing.assert_array_equal(got[0], X[I])
    binding = onnxruntime.IOBinding(ours)  # what optimum does on every load
    binding.bind_cpu_input("x", X)
    binding.bind_cpu_input("i", I)
    binding.bind_output("y")
    ours._sess.run_with_iobinding(binding._iobinding, None)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], X[I])
    assert ours.last_run_record is not None and len(ours.last_run_record.emulated) == 1


def test_free_dimension_overrides_in_the_reported_shapes() -> None:
    so = _options()
    so.add_free_dimension_override_by_name("N", 5)
    ours = dmlshim.InferenceSession(MODEL, so)
    theirs = onnxruntime.InferenceSession(MODEL, so)
    assert [a.shape for a in ours.get_inputs()] == [a.shape for a in theirs.get_inputs()] == [[5, 3], ["K"]]
    for session in (ours, theirs):
        with pytest.raises(state.InvalidArgument):
            session.run(None, {"x": X[:4], "i": I[:1]})
    np.testing.assert_array_equal(ours.run(None, {"x": X, "i": I})[0], theirs.run(None, {"x": X, "i": I})[0])
