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
import onnx
import onnx.numpy_helper
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


@_case
def normal(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def wrong_dtype(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data.astype(np.float64))
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def wrong_idx_dtype(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx.astype(np.int32))
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def wrong_shape(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data.reshape(3, 4))
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def wrong_rank(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data.reshape(12))
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


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
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", idx)
    b.bind_output("nope")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


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
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", np.array([4, 0], np.int64))
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def negative_index(s):
    b = s.io_binding()
    b.bind_cpu_input("data", data)
    b.bind_cpu_input("idx", np.array([-1, -4], np.int64))
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


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
    b = s.io_binding()
    b.bind_cpu_input("data", data.tolist())
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@_case
def bind_cpu_input_noncontig(s):
    b = s.io_binding()
    b.bind_cpu_input("data", np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2])
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


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
    b = s.io_binding()
    b.bind_cpu_input("data", np.float32(3))
    b.bind_cpu_input("idx", idx)
    b.bind_output("y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


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


def _shape_of_big(n: int, *, of_feed: bool) -> bytes:
    """``Gather(Shape(Expand(x, [n])), idx)``: the Expand reads the feed ``x`` (of_feed) or a constant."""
    inits = [onnx.numpy_helper.from_array(np.array([n], np.int64), "shp")]
    if not of_feed:
        inits.append(onnx.numpy_helper.from_array(np.ones(1, np.float32), "x"))
    g = h.make_graph(
        [
            h.make_node("Expand", ["x", "shp"], ["big"]),
            h.make_node("Shape", ["big"], ["s"]),
            h.make_node("Gather", ["s", "idx"], ["y"], axis=0),
        ],
        "g",
        [h.make_tensor_value_info("idx", T.INT64, [1])]
        + ([h.make_tensor_value_info("x", T.FLOAT, [1])] if of_feed else []),
        [h.make_tensor_value_info("y", T.INT64, [1])],
        initializer=inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
@pytest.mark.parametrize("limit", [None, "150000000"])
def test_value_read_by_shape_alone_is_not_refused(
    engine: str, limit: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Expand of a feed read by Shape alone is never allocated by onnxruntime (it folds the Shape and drops
    the Expand: 75 MB peak at 10^10 floats, 40 GB): not refused, with or without a memory limit."""
    if limit is not None:
        monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", limit)
    n = 10**10 if limit is None else 10**8
    model = _shape_of_big(n, of_feed=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    feeds = {"idx": np.array([0], np.int64), "x": np.ones(1, np.float32)}
    expected = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dmlshim.InferenceSession(model, so, engine=engine).run(None, feeds)
    assert got[0].tolist() == expected[0].tolist() == [n]


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
def test_value_read_by_shape_alone_refused_when_onnxruntime_folds_nothing(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``ORT_DISABLE_ALL`` onnxruntime folds no Shape, so it computes the Expand (485 MB peak for 10^8
    floats under a 150 MB limit): refused, in every engine, when the caller's options say so."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "150000000")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(dmlshim.TooLargeError, match="big"):
        dmlshim.InferenceSession(_shape_of_big(10**8, of_feed=True), so, engine=engine)


def test_constant_read_by_shape_alone_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An Expand of constants is folded (allocated: 456 MB peak in onnxruntime for 10^8 floats) before the
    Shape reading it: refused under a 150 MB limit."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "150000000")
    with pytest.raises(dmlshim.TooLargeError, match="big"):
        dmlshim.InferenceSession(_shape_of_big(10**8, of_feed=False), engine="cpu")


def _table_model(folder: Any, n: int) -> str:
    """A 1-D int64 table in external data read by a Gather and by Cast (then ReduceSum) and Add (then
    ReduceMax): the long integer constants inlined for sessions (issue 35 part 3)."""
    table = (np.arange(n, dtype=np.int64) * 3) % 1000
    nodes = [
        h.make_node("Gather", ["table", "idx"], ["g"], axis=0),
        h.make_node("Cast", ["table"], ["tf"], to=T.FLOAT),
        h.make_node("ReduceSum", ["tf"], ["rs"], keepdims=0),
        h.make_node("Add", ["table", "table"], ["a"]),
        h.make_node("ReduceMax", ["a"], ["am"], keepdims=0),
    ]
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("idx", T.INT64, [3])],
        [
            h.make_tensor_value_info("g", T.INT64, [3]),
            h.make_tensor_value_info("rs", T.FLOAT, []),
            h.make_tensor_value_info("am", T.INT64, []),
        ],
        initializer=[onnx.numpy_helper.from_array(table, "table")],
    )
    path = str(folder / "m.onnx")
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path, save_as_external_data=True, location="m.data", size_threshold=0)
    return path


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
@pytest.mark.parametrize("change", [None, "add_initializer", "add_external_initializers"])
def test_long_int_constant_read_by_gather_and_add(engine: str, change: str | None, tmp_path: Any) -> None:
    """onnxruntime's answers, the caller's value where it takes it: with add_initializer onnxruntime 1.32's
    Gather reads the caller's table while Cast/Add keep the file's (folded at load), with
    add_external_initializers every reader takes the caller's."""
    n = 2**20
    path = _table_model(tmp_path, n)
    feeds = {"idx": np.array([0, 5, n - 1], np.int64)}
    answers = []
    for mod in (ort, dmlshim):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        value = ort.OrtValue.ortvalue_from_numpy(np.full(n, 7, np.int64))
        if change == "add_initializer":
            so.add_initializer("table", value)
        elif change == "add_external_initializers":
            so.add_external_initializers(["table"], [value])
        if mod is ort:
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        else:
            sess = dmlshim.InferenceSession(path, so, engine=engine)
        answers.append([x.tolist() for x in sess.run(None, feeds)])
    assert answers[1] == answers[0]


def test_small_external_data_loaded_in_place(tmp_path: Any) -> None:
    """load_small_external_data hides the large external initializers by location only: the small external
    one is read, the large one stays external, the inline one untouched, the order kept (taking them out
    and back copied every inline one twice: 200 MB more for a caller's 100 MB added initializer)."""
    from pathlib import Path

    from dmlshim.execute.weights.values import load_small_external_data

    tensors = [
        onnx.numpy_helper.from_array(np.arange(4, dtype=np.int64), "small"),
        onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "inline"),
        onnx.numpy_helper.from_array(np.arange(8192, dtype=np.float32), "large"),
    ]
    g = h.make_graph([], "g", [], [h.make_tensor_value_info("small", T.INT64, [4])], initializer=tensors)
    path = tmp_path / "m.onnx"
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    loaded = onnx.load(str(path), load_external_data=False)
    inline = loaded.graph.initializer[1]
    inline.CopyFrom(tensors[1])
    load_small_external_data(loaded, Path(path), 16384)
    small, inline, large = loaded.graph.initializer
    assert [t.name for t in loaded.graph.initializer] == ["small", "inline", "large"]
    assert onnx.numpy_helper.to_array(small).tolist() == [0, 1, 2, 3]
    assert (
        inline.data_location == T.DEFAULT
        and onnx.numpy_helper.to_array(inline).sum() == np.arange(4096).sum()
    )
    assert large.data_location == T.EXTERNAL and not large.raw_data
