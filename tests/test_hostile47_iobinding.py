"""Hostile cases against the IOBinding changes (issue 47): IOBinding errors are plain RuntimeErrors as
onnxruntime's, an unknown output name refused when the binding runs. Every misuse runs on onnxruntime's CPU
session (one thread) and on ``dmlshim.InferenceSession`` of the same one-node Gather: the same success or
failure, the same Python classes (dmlshim's own classes aside), the same values.

Left out: ``copy_outputs_to_cpu``/``get_outputs`` before any run, and ``OrtValue.device_name()`` of
a bound output, which crash onnxruntime 1.32 itself (SIGSEGV)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import dmlshim


def _model() -> bytes:
    g = h.make_graph(
        [h.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
        "g",
        [h.make_tensor_value_info("data", T.FLOAT, [4, 3]), h.make_tensor_value_info("idx", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


M = _model()
data = np.arange(12, dtype=np.float32).reshape(4, 3)
idx = np.array([3, 1], dtype=np.int64)
cases: dict[str, Callable[[Any], Any]] = {}


def _session(mod: Any) -> Any:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if mod is ort:
        return ort.InferenceSession(M, so, providers=["CPUExecutionProvider"])
    return dmlshim.InferenceSession(M, so)


def _case(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    cases[f.__name__] = f
    return f


def _run_bound(s: Any, data_value: Any = data, idx_value: Any = idx, output: str = "y") -> Any:
    """Bind ``data`` and ``idx`` on the CPU and ``output``, run, and copy the outputs out."""
    b = s.io_binding()
    b.bind_cpu_input("data", data_value)
    b.bind_cpu_input("idx", idx_value)
    b.bind_output(output)
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def normal(s):
    return _run_bound(s)


@_case
def wrong_dtype(s):
    return _run_bound(s, data_value=data.astype(np.float64))


@_case
def wrong_idx_dtype(s):
    return _run_bound(s, idx_value=idx.astype(np.int32))


@_case
def wrong_shape(s):
    return _run_bound(s, data_value=data.reshape(3, 4))


@_case
def wrong_rank(s):
    return _run_bound(s, data_value=data.reshape(12))


@_case
def unknown_input(s):
    b = s.io_binding()
    b.bind_cpu_input("nope", data)
    return 1


@_case
def unknown_output(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("nope")
    return "bound"


@_case
def unknown_output_run(s):
    return _run_bound(s, output="nope")


@_case
def unbound_input(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def no_outputs(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def oob_index(s):
    return _run_bound(s, idx_value=np.array([4, 0], np.int64))


@_case
def negative_index(s):
    return _run_bound(s, idx_value=np.array([-1, -4], np.int64))


@_case
def clear_inputs_run(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    b.clear_binding_inputs()
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def clear_outputs_run(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    b.clear_binding_outputs()
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def clear_outputs_after_run(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    b.clear_binding_outputs()
    return b.copy_outputs_to_cpu()


@_case
def run_twice(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def run_twice_rebind(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    r1 = b.copy_outputs_to_cpu()
    b.bind_cpu_input("idx", np.array([0, 0, 2], np.int64))
    s.run_with_iobinding(b)
    return r1, b.copy_outputs_to_cpu()


@_case
def sync(s):
    b = s.io_binding()
    b.synchronize_inputs()
    b.synchronize_outputs()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    b.synchronize_inputs()
    s.run_with_iobinding(b)
    b.synchronize_outputs()
    return b.copy_outputs_to_cpu()


@_case
def ortvalue_in_out(s):
    b = s.io_binding()
    b.bind_ortvalue_input("data", ort.OrtValue.ortvalue_from_numpy(data))
    b.bind_ortvalue_input("idx", ort.OrtValue.ortvalue_from_numpy(idx))
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    b.bind_ortvalue_output("y", out)
    s.run_with_iobinding(b)
    return out.numpy(), b.copy_outputs_to_cpu()


@_case
def ortvalue_out_wrong_shape(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    out = ort.OrtValue.ortvalue_from_shape_and_type([3, 3], np.float32)
    b.bind_ortvalue_output("y", out)
    s.run_with_iobinding(b)
    return out.numpy(), b.copy_outputs_to_cpu()


@_case
def ortvalue_out_wrong_dtype(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float64)
    b.bind_ortvalue_output("y", out)
    s.run_with_iobinding(b)
    return out.numpy(), b.copy_outputs_to_cpu()


@_case
def ortvalue_out_unknown(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    b.bind_ortvalue_output("zz", out)
    s.run_with_iobinding(b)
    return out.numpy()


@_case
def ortvalue_in_unknown(s):
    b = s.io_binding()
    b.bind_ortvalue_input("zz", ort.OrtValue.ortvalue_from_numpy(data))
    return 1


@_case
def bind_output_shape(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    buf = np.zeros((2, 3), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, [2, 3], buf.ctypes.data)
    s.run_with_iobinding(b)
    return buf, b.copy_outputs_to_cpu()


@_case
def bind_output_wrong_type(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    buf = np.zeros((2, 3), np.int32)
    b.bind_output("y", "cpu", 0, np.int32, [2, 3], buf.ctypes.data)
    s.run_with_iobinding(b)
    return buf, b.copy_outputs_to_cpu()


@_case
def bind_output_wrong_shape(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    buf = np.zeros((4, 3), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, [4, 3], buf.ctypes.data)
    s.run_with_iobinding(b)
    return buf, b.copy_outputs_to_cpu()


@_case
def bind_output_device_only(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y", "cpu")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_output_cuda(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y", "cuda")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_output_dml(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y", "dml")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_input_generic(s):
    b = s.io_binding()
    d = np.ascontiguousarray(data)
    i = idx.copy()
    b.bind_input("data", "cpu", 0, np.float32, [4, 3], d.ctypes.data)
    b.bind_input("idx", "cpu", 0, np.int64, [2], i.ctypes.data)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_input_generic_wrong_type(s):
    b = s.io_binding()
    d = np.ascontiguousarray(data)
    i = idx.copy()
    b.bind_input("data", "cpu", 0, np.int32, [4, 3], d.ctypes.data)
    b.bind_input("idx", "cpu", 0, np.int64, [2], i.ctypes.data)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_input_generic_oob_shape(s):
    b = s.io_binding()
    d = np.ascontiguousarray(data)
    i = idx.copy()
    b.bind_input("data", "cpu", 0, np.float32, [4, 3], d.ctypes.data)
    b.bind_input("idx", "cpu", 0, np.int64, [1], i.ctypes.data)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_input_cuda(s):
    b = s.io_binding()
    b.bind_input("data", "cuda", 0, np.float32, [4, 3], data.ctypes.data)
    return 1


@_case
def bind_cpu_input_list(s):
    return _run_bound(s, data_value=data.tolist())


@_case
def bind_cpu_input_noncontig(s):
    return _run_bound(s, data_value=np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2])


@_case
def bind_same_twice(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("data", data * 2)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def other_session_binding(s):
    s2 = _session(ort)
    b = s2.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def run_with_none(s):
    s.run_with_iobinding(None)
    return 1


@_case
def run_options(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    ro = ort.RunOptions()
    ro.terminate = True
    s.run_with_iobinding(b, ro)
    return b.copy_outputs_to_cpu()


@_case
def mutate_after_bind(s):
    b = s.io_binding()
    d = data.copy()
    b.bind_cpu_input("data", d)
    b.bind_cpu_input("idx", idx)
    d[:] = 7
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_output_bad_device(s):
    b = s.io_binding()
    b.bind_output("y", "banana")
    return 1


@_case
def bind_input_bad_device(s):
    b = s.io_binding()
    b.bind_input("data", "banana", 0, np.float32, [4, 3], data.ctypes.data)
    return 1


@_case
def bind_cpu_input_object(s):
    b = s.io_binding()
    b.bind_cpu_input("data", np.array(["a"], dtype=object))
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return 1


@_case
def bind_cpu_input_scalar(s):
    return _run_bound(s, data_value=np.float32(3))


@_case
def int_input_name(s):
    s.io_binding().bind_cpu_input(3, data)


@_case
def int_output_name(s):
    s.io_binding().bind_output(3)


def _outcome(fn: Callable[[Any], Any], mod: Any) -> tuple[Any, Any]:
    s = _session(mod)
    try:
        return "ok", fn(s)
    except Exception as e:  # the classes onnxruntime's users can catch, dmlshim's own left aside
        return tuple(c for c in type(e).__mro__ if not c.__module__.startswith("dmlshim")), str(e)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        )
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


@pytest.mark.parametrize("name", sorted(cases))
def test_iobinding_misuse_as_onnxruntime(name: str) -> None:
    if name == "other_session_binding" and not hasattr(_session(ort).io_binding(), "_session"):
        pytest.skip(
            "onnxruntime 1.24 runs another session's binding (it reads only the binding's C++ "
            "object); dmlshim refuses it with onnxruntime 1.32's ValueError (docs/python-api.md)"
        )
    expected = _outcome(cases[name], ort)
    got = _outcome(cases[name], dmlshim)
    assert got[0] == expected[0], (name, expected, got)
    if expected[0] == "ok":
        assert _same(expected[1], got[1]), (name, expected[1], got[1])


@pytest.mark.parametrize("device", ["CPU", "Cpu", "DML", "openvino", "banana", "", "webgpu", "cuda"])
def test_device_names_as_onnxruntime(device: str) -> None:
    """onnxruntime's Python layer knows cpu, cuda, cann, dml, webgpu, gpu, npu (case matters) and raises a
    plain Exception for any other; an output bound by name to a known device is allocated (CPU package)."""
    ptr = data.ctypes.data
    outcomes = []
    for mod in (ort, dmlshim):
        b = _session(mod).io_binding()
        row = []
        for bind in (
            lambda b=b: b.bind_input("data", device, 0, np.float32, [4, 3], ptr),
            lambda b=b: b.bind_output("y", device),
        ):
            try:
                bind()
                row.append("ok")
            except Exception as e:
                row.append(
                    next(c.__name__ for c in type(e).__mro__ if not c.__module__.startswith("dmlshim"))
                )
        outcomes.append(row)
    assert outcomes[1] == outcomes[0]


def test_bind_output_pointer_without_type_is_value_error() -> None:
    """onnxruntime's Python layer: a ValueError for ``buffer_ptr`` without ``element_type`` and ``shape``."""
    buf = np.zeros((2, 3), np.float32)
    for mod in (ort, dmlshim):
        with pytest.raises(ValueError):
            _session(mod).io_binding().bind_output("y", "cpu", 0, None, None, buf.ctypes.data)
