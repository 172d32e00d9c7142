"""Differences found by running exports of producers nobody on the team wrote (torch scatter_reduce,
index_put and index_add in both torch exporters, torchvision detection, tf2onnx batch_dims gathers and
segment ops, jax ``.at[]`` updates) through dmlshim, each reduced to a small hand-built graph. Expected
values come from onnxruntime's CPU provider, single-threaded."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from tests.oracle import IR_VERSION, binding_with_inputs, ort_session


def _bf16(values: np.ndarray) -> ort.OrtValue:
    """A bfloat16 OrtValue holding ``values`` (float32) truncated to their upper 16 bits."""
    bits = (np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, T.BFLOAT16)


def _bf16_index_put_model() -> onnx.ModelProto:
    """``y[i, j] = v`` on bfloat16 data as torch's dynamo exporter writes ``index_put_``: a ScatterND
    whose index tuples are built from two index vectors, bfloat16 in and out."""
    nodes = [
        helper.make_node("Unsqueeze", ["i", "ax"], ["iu"]),
        helper.make_node("Unsqueeze", ["j", "ax"], ["ju"]),
        helper.make_node("Concat", ["iu", "ju"], ["ij"], axis=-1),
        helper.make_node("ScatterND", ["x", "ij", "v"], ["y"], name="index_put"),
    ]
    graph = helper.make_graph(
        nodes,
        "bf16_index_put",
        [
            helper.make_tensor_value_info("x", T.BFLOAT16, [4, 5]),
            helper.make_tensor_value_info("i", T.INT64, [3]),
            helper.make_tensor_value_info("j", T.INT64, [3]),
            helper.make_tensor_value_info("v", T.BFLOAT16, [3]),
        ],
        [helper.make_tensor_value_info("y", T.BFLOAT16, [4, 5])],
        initializer=[helper.make_tensor("ax", T.INT64, [1], [-1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def _bits(value: ort.OrtValue) -> bytes:
    """The raw bytes of a bfloat16 OrtValue (widened to float32 by onnxruntime's Cast, which is exact)."""
    cast = helper.make_model(
        helper.make_graph(
            [helper.make_node("Cast", ["a"], ["b"], to=T.FLOAT)],
            "widen",
            [helper.make_tensor_value_info("a", T.BFLOAT16, None)],
            [helper.make_tensor_value_info("b", T.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
        ir_version=IR_VERSION,
    )
    widen = ort.InferenceSession(cast.SerializeToString(), providers=["CPUExecutionProvider"])
    return bytes(widen.run(None, {"a": value})[0].tobytes())


_ENGINES = [
    "cpu",
    "partitioned",
    pytest.param(
        "customop",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("onnxruntime_extensions") is None, reason="needs onnxruntime-extensions"
        ),
    ),
]


@pytest.mark.parametrize("engine", _ENGINES)
def test_bfloat16_outputs_from_run_with_ort_values(engine: str) -> None:
    """torch's ``index_put_`` on bfloat16 (dynamo, opset 18 and 20; TorchScript, opset 13-17):
    ``engine="cpu"`` and ``engine="customop"`` raised BadInputError ("No corresponding Numpy type for
    Tensor Type. bfloat16") from ``run_with_ort_values``, which onnxruntime answers; the default engine
    already answered."""
    model = _bf16_index_put_model().SerializeToString()
    rng = np.random.default_rng(44)
    feeds = {
        "x": _bf16(rng.standard_normal((4, 5)).astype(np.float32)),
        "i": ort.OrtValue.ortvalue_from_numpy(np.array([0, 3, -1])),
        "j": ort.OrtValue.ortvalue_from_numpy(np.array([4, -2, 0])),
        "v": _bf16(np.array([1.5, -2.25, 1e30], np.float32)),
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    expected = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run_with_ort_values(
        None, feeds
    )
    session = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(2):
        got = session.run_with_ort_values(None, feeds)
        assert len(got) == 1 and got[0].data_type() == "tensor(bfloat16)"
        assert got[0].shape() == [4, 5]
        assert _bits(got[0]) == _bits(expected[0])
    # run() cannot return bfloat16, as onnxruntime's run cannot: refused with a RuntimeError.
    with pytest.raises(RuntimeError, match="bfloat16"):
        session.run(None, feeds)


@pytest.mark.parametrize("engine", _ENGINES)
def test_bfloat16_outputs_through_io_binding(engine: str) -> None:
    """The same model through IOBinding: onnxruntime returns the bfloat16 output from ``get_outputs()``
    and writes it into a bound bfloat16 OrtValue; every dmlshim engine refused it (NotSupportedError,
    "run() cannot return it")."""
    model = _bf16_index_put_model().SerializeToString()
    rng = np.random.default_rng(45)
    feeds = {
        "x": _bf16(rng.standard_normal((4, 5)).astype(np.float32)),
        "i": ort.OrtValue.ortvalue_from_numpy(np.array([3, 3, -4])),
        "j": ort.OrtValue.ortvalue_from_numpy(np.array([-1, 0, 2])),
        "v": _bf16(np.array([-0.0, np.inf, 3.0e-39], np.float32)),
    }
    reference = ort_session(model)
    expected = _bits(reference.run_with_ort_values(None, feeds)[0])
    session = dmlshim.InferenceSession(model, engine=engine)

    by_name = binding_with_inputs(session, feeds)
    by_name.bind_output("y")
    session.run_with_iobinding(by_name)
    (out,) = by_name.get_outputs()
    assert out.data_type() == "tensor(bfloat16)" and out.shape() == [4, 5] and _bits(out) == expected
    with pytest.raises(RuntimeError, match="bfloat16"):  # as onnxruntime's copy_outputs_to_cpu
        by_name.copy_outputs_to_cpu()

    target = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros((4, 5), np.uint16), T.BFLOAT16)
    bound = binding_with_inputs(session, feeds)
    bound.bind_ortvalue_output("y", target)
    session.run_with_iobinding(bound)
    assert _bits(target) == expected
    assert _bits(bound.get_outputs()[0]) == expected

    assert _raw_bits(session, feeds) == _raw_bits(reference, feeds)


def _raw_bits(session: Any, feeds: dict[str, ort.OrtValue]) -> bytes:
    """The bfloat16 bytes ``session`` (onnxruntime's or dmlshim's) writes into a pointer bound to the
    output."""
    raw = np.zeros((4, 5), np.uint16)
    binding = binding_with_inputs(session, feeds)
    binding.bind_output("y", "cpu", 0, T.BFLOAT16, [4, 5], raw.ctypes.data)
    session.run_with_iobinding(binding)
    return raw.tobytes()


@pytest.mark.parametrize("engine", _ENGINES)
def test_bfloat16_outputs_through_run_with_ortvaluevector(engine: str) -> None:
    """``run_with_ortvaluevector`` (what onnxruntime's own IOBinding-free clients call): onnxruntime appends
    the bfloat16 output to ``fetches`` or fills the value already there; dmlshim refused it."""
    from onnxruntime.capi import _pybind_state as C

    model = _bf16_index_put_model().SerializeToString()
    rng = np.random.default_rng(46)
    feeds = {
        "x": _bf16(rng.standard_normal((4, 5)).astype(np.float32)),
        "i": ort.OrtValue.ortvalue_from_numpy(np.array([1, 1, 2])),
        "j": ort.OrtValue.ortvalue_from_numpy(np.array([0, -5, 4])),
        "v": _bf16(np.array([9.0, -7.0, np.nan], np.float32)),
    }
    reference = ort_session(model)
    expected = _bits(reference.run_with_ort_values(None, feeds)[0])
    session = dmlshim.InferenceSession(model, engine=engine)
    vector = C.OrtValueVector()
    for value in feeds.values():
        vector.push_back(value._get_c_value())

    appended = C.OrtValueVector()
    session.run_with_ortvaluevector(None, list(feeds), vector, ["y"], appended, [])
    assert len(appended) == 1 and _bits(ort.OrtValue(appended[0])) == expected

    held = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros((4, 5), np.uint16), T.BFLOAT16)
    filled = C.OrtValueVector()
    filled.push_back(held._get_c_value())
    session.run_with_ortvaluevector(None, list(feeds), vector, ["y"], filled, [])
    assert _bits(held) == expected
