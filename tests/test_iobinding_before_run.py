"""Issue 35 leftover: ``IOBinding.get_outputs()`` before any run (and after ``bind_output`` with and without
memory, after ``clear_binding_outputs``, after binding again once a run filled the binding) holds what
onnxruntime's binding holds: one ``OrtValue`` per bound output in binding order, the bound memory for an
output bound to a buffer or an ``OrtValue``, and an ``OrtValue`` with nothing in it (``has_value()`` False)
for an output bound by name no run has allocated. dmlshim gave ``[]`` before the first run.

Every expectation is onnxruntime's binding in the same state (never asked what kills onnxruntime 1.32's
process: ``data_type()`` of its empty value, ``copy_outputs_to_cpu()`` with an output bound by name before a
run; dmlshim raises a ``RuntimeError`` for both)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from tests.oracle import IR_VERSION
from tests.safety_helpers import REPO

X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5


def _model() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g"),
            helper.make_node("Relu", ["x"], ["z"], name="r"),
        ],
        "two",
        [
            helper.make_tensor_value_info("x", T.FLOAT, [3, 4]),
            helper.make_tensor_value_info("i", T.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", T.FLOAT, [2, 4]),
            helper.make_tensor_value_info("z", T.FLOAT, [3, 4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model.SerializeToString()


def _state(values: list[Any], keep: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What can be asked of every value without killing onnxruntime: (has_value, is_tensor), then for a
    value: type, shape, whether it lies in memory the test bound (``keep``), its numbers."""
    bound = {v.ctypes.data if isinstance(v, np.ndarray) else v.data_ptr() for v in keep.values()}
    found: list[tuple[Any, ...]] = []
    for value in values:
        if not value.has_value():
            found.append((False, value.is_tensor()))
            continue
        found.append(
            (True, value.is_tensor(), value.data_type(), value.shape(), value.data_ptr() in bound,
             value.numpy().tolist())
        )  # fmt: skip
    return found


def _bind_z_memory(binding: Any, keep: dict[str, Any]) -> None:
    out = np.full((3, 4), 7.0, np.float32)
    keep["z"] = out
    binding.bind_output("z", "cpu", 0, np.float32, [3, 4], out.ctypes.data)


def _bind_y_ortvalue(binding: Any, keep: dict[str, Any]) -> None:
    value = ort.OrtValue.ortvalue_from_numpy(np.full((2, 4), 3.0, np.float32))
    keep["y"] = value
    binding.bind_ortvalue_output("y", value)


def _run(session: Any, binding: Any) -> None:
    binding.bind_cpu_input("x", X)
    binding.bind_cpu_input("i", np.array([2, 0], np.int64))
    session.run_with_iobinding(binding)


Step = Callable[[Any, Any, dict[str, Any]], None]
SCENARIOS: dict[str, list[Step]] = {
    "fresh": [],
    "by_name": [lambda s, b, k: b.bind_output("y")],
    "by_name_twice": [lambda s, b, k: b.bind_output("y"), lambda s, b, k: b.bind_output("z")],
    "to_memory": [lambda s, b, k: _bind_z_memory(b, k)],
    "to_ortvalue": [lambda s, b, k: _bind_y_ortvalue(b, k)],
    "mixed": [lambda s, b, k: b.bind_output("y"), lambda s, b, k: _bind_z_memory(b, k)],
    "cleared": [lambda s, b, k: b.bind_output("y"), lambda s, b, k: b.clear_binding_outputs()],
    "run": [lambda s, b, k: b.bind_output("y"), lambda s, b, k: _run(s, b)],
    "run_then_bind_another": [
        lambda s, b, k: b.bind_output("y"), lambda s, b, k: _run(s, b), lambda s, b, k: b.bind_output("z"),
    ],
    "run_then_bind_again": [
        lambda s, b, k: b.bind_output("y"), lambda s, b, k: b.bind_output("z"), lambda s, b, k: _run(s, b),
        lambda s, b, k: b.bind_output("y"),
    ],
    "run_then_clear_then_bind": [
        lambda s, b, k: b.bind_output("y"), lambda s, b, k: _run(s, b),
        lambda s, b, k: b.clear_binding_outputs(), lambda s, b, k: b.bind_output("z"),
    ],
    "run_then_memory": [
        lambda s, b, k: b.bind_output("y"), lambda s, b, k: _run(s, b), lambda s, b, k: _bind_z_memory(b, k),
    ],
}  # fmt: skip


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_get_outputs_holds_what_onnxruntimes_binding_holds(scenario: str) -> None:
    import dmlshim

    model = _model()
    states = []
    for session in (
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]),
        dmlshim.InferenceSession(model),
    ):
        binding, keep = session.io_binding(), {}
        for step in SCENARIOS[scenario]:
            step(session, binding, keep)
        states.append(_state(binding.get_outputs(), keep))
    theirs, ours = states
    assert ours == theirs


def test_a_value_bound_by_name_before_a_run_refuses_reads_without_crashing() -> None:
    """onnxruntime's empty value refuses ``shape()``, ``numpy()``, ``data_ptr()`` with a RuntimeError; its
    ``data_type()`` kills the process, dmlshim's raises a RuntimeError naming the output."""
    import dmlshim

    model = _model()
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).io_binding()
    ours = dmlshim.InferenceSession(model).io_binding()
    for binding in (theirs, ours):
        binding.bind_output("y")
    (their_value,), (our_value,) = theirs.get_outputs(), ours.get_outputs()
    assert isinstance(our_value, ort.OrtValue)
    for read in ("shape", "numpy", "data_ptr", "device_name", "element_type", "tensor_size_in_bytes"):
        with pytest.raises(RuntimeError) as their_error:
            getattr(their_value, read)()
        with pytest.raises(RuntimeError) as our_error:
            getattr(our_value, read)()
        assert str(our_error.value) == str(their_error.value)
    with pytest.raises(RuntimeError, match="'y' is bound by name"):
        our_value.data_type()
    with pytest.raises(RuntimeError, match="'y' is bound by name"):
        ours.copy_outputs_to_cpu()


def test_copy_outputs_to_cpu_before_a_run_copies_the_bound_memory() -> None:
    """onnxruntime copies what the memory bound to an output holds, before any run too."""
    import dmlshim

    model = _model()
    found = []
    for session in (
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]),
        dmlshim.InferenceSession(model),
    ):
        binding, keep = session.io_binding(), {}
        _bind_y_ortvalue(binding, keep)
        _bind_z_memory(binding, keep)
        copies = binding.copy_outputs_to_cpu()
        assert not any(np.shares_memory(c, keep["z"]) for c in copies)
        found.append([c.tolist() for c in copies])
    assert found[1] == found[0]


_DROP_IN = textwrap.dedent(
    """
    import sys
    import dmlshim
    dmlshim.install(summary="off", children=False)
    import onnxruntime
    session = onnxruntime.InferenceSession(sys.argv[1])
    binding = onnxruntime.IOBinding(session)
    print(len(binding.get_outputs()))
    binding.bind_output("y")
    print([v.has_value() for v in binding.get_outputs()])
    binding.clear_binding_outputs()
    print(len(binding.get_outputs()))
    """
)


def test_the_drop_in_binding_before_a_run(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_model())
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).io_binding()
    want = [str(len(theirs.get_outputs()))]
    theirs.bind_output("y")
    want.append(str([v.has_value() for v in theirs.get_outputs()]))
    theirs.clear_binding_outputs()
    want.append(str(len(theirs.get_outputs())))
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider")}
    result = subprocess.run(
        [sys.executable, "-c", _DROP_IN, str(path)], capture_output=True, text=True, env=env, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:3] == want
