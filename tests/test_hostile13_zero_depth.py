"""hostile13: ScatterND with empty index tuples (indices' last dimension 0) as dmlshim computes it where
onnxruntime before 1.32 crashes on it: the values onnxruntime's kernel gives, bit for bit.

The rewrite used to reduce the rows with ReduceMax/ReduceMin (which keep a NaN onnxruntime's kernel drops:
``max(nan, 1, 2)`` is 2 in onnxruntime 1.32), ReduceSum/ReduceProd (not implemented for int8, int16,
uint32, uint64: a model onnxruntime 1.32 runs was refused) and computed float16 reductions onnxruntime's
kernel refuses. The oracle: onnxruntime's own ScatterND at depth 1 on the data with a leading axis of 1
(indices all ``[0]``, updates one per tuple), which combines the updates in the same row-major order;
onnxruntime 1.32's zero-depth node gives the same bits (checked where it runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadInputError
from dmlshim.model.zero_depth_scatternd import ort_crashes, scatter_nd_empty_tuples, without_empty_tuples

from .oracle import IR_VERSION

NAN = np.nan
CASES: list[tuple[str, int, np.ndarray, np.ndarray]] = [
    # reduction, element type, data [size], updates [tuples, size]
    ("max", TensorProto.FLOAT, np.array([NAN, 1, -0.0, 0.0], np.float32),
     np.array([[1, NAN, 0.0, -0.0], [2, 3, -0.0, 0.0]], np.float32)),
    ("min", TensorProto.FLOAT, np.array([NAN, 1, 0.0, -0.0], np.float32),
     np.array([[1, NAN, -0.0, 1e30], [2, 3, 0.0, 2.5]], np.float32)),
    ("min", TensorProto.DOUBLE, np.array([-0.0, 7], np.float64),
     np.array([[1e30, NAN], [2.5, 4]], np.float64)),
    ("add", TensorProto.INT8, np.array([100, -128, 5], np.int8),
     np.array([[100, -1, 5], [100, 2, 5]], np.int8)),
    ("mul", TensorProto.UINT16, np.array([300, 7], np.uint16), np.array([[300, 9], [3, 65535]], np.uint16)),
    ("max", TensorProto.UINT64, np.array([2**63 + 5, 1], np.uint64),
     np.array([[2**63 + 1, 2**64 - 1]], np.uint64)),
    ("add", TensorProto.BOOL, np.array([True, False, False]),
     np.array([[False, False, True], [True, False, True]])),
    ("add", TensorProto.FLOAT, np.array([1.0, -0.0], np.float32), np.zeros((0, 2), np.float32)),
]  # fmt: skip


def _model(reduction: str, elem: int, tuples: int, size: int, depth: int) -> bytes:
    lead = [1] if depth else []
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction)
    graph = helper.make_graph(
        [node],
        "zero_depth",
        [
            helper.make_tensor_value_info("d", elem, [*lead, size]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [tuples, depth]),
            helper.make_tensor_value_info("u", elem, [tuples, size]),
        ],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return np.asarray(ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0])


def _expected(reduction: str, elem: int, data: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """onnxruntime's kernel at depth 1: data [1, size], one tuple [0] per update row."""
    tuples, size = updates.shape
    model = _model(reduction, elem, tuples, size, 1)
    feeds = {"d": data[None], "i": np.zeros((tuples, 1), np.int64), "u": updates}
    return _ort(model, feeds)[0] if tuples else data


def _feeds(data: np.ndarray, updates: np.ndarray) -> dict[str, np.ndarray]:
    return {"d": data, "i": np.zeros((updates.shape[0], 0), np.int64), "u": updates}


def _same(got: Any, want: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes(), (
        got,
        want,
    )


@pytest.mark.parametrize("case", range(len(CASES)))
def test_rewritten_model_gives_onnxruntimes_values(case: int) -> None:
    reduction, elem, data, updates = CASES[case]
    want = _expected(reduction, elem, data, updates)
    model = onnx.load_from_string(_model(reduction, elem, *updates.shape, 0))
    rewritten = without_empty_tuples(model)
    assert rewritten is not None
    _same(_ort(rewritten.SerializeToString(), _feeds(data, updates)), want)
    _same(scatter_nd_empty_tuples(data, _feeds(data, updates)["i"], updates, reduction), want)
    if not ort_crashes():  # onnxruntime 1.32 runs the node itself: the oracle is its answer
        _same(_ort(model.SerializeToString(), _feeds(data, updates)), want)


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_sessions_give_onnxruntimes_values(engine: str) -> None:
    for reduction, elem, data, updates in CASES[:2]:
        want = _expected(reduction, elem, data, updates)
        session = dmlshim.InferenceSession(_model(reduction, elem, *updates.shape, 0), engine=engine)
        _same(session.run(None, _feeds(data, updates))[0], want)


def test_a_reduction_onnxruntime_refuses_is_refused_not_computed() -> None:
    """float16 ``add``: onnxruntime's kernel refuses it (1.24 at depth 1, 1.32 at depth 0); the rewrite
    gives that refusal (it computed a value) and never the crash."""
    data, updates = np.array([2048, 1], np.float16), np.ones((2, 2), np.float16)
    model = onnx.load_from_string(_model("add", TensorProto.FLOAT16, 2, 2, 0))
    rewritten = without_empty_tuples(model)
    assert rewritten is not None
    with pytest.raises(Exception, match="not supported with ScatterND opset 16 when reduction is 'add'"):
        _ort(rewritten.SerializeToString(), _feeds(data, updates))
    with pytest.raises(BadInputError, match="reduction is 'add'"):
        scatter_nd_empty_tuples(data, _feeds(data, updates)["i"], updates, "add")
