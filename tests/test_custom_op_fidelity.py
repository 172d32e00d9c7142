"""The custom-op engine returns onnxruntime CPU's bits: scalar outputs stay rank 0, float16 NaN payloads and
float32/float64 signalling NaNs pass through, models importing ai.onnx below 5 load (issue 11, item 6).

Expected values are onnxruntime CPU's (single-threaded), compared byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime_extensions")

from dmlshim import FeatureLevel, InferenceSession
from dmlshim.execute.lowering.lower import lower_model
from tests.oracle import make_node_model, ort_run

LEVELS = ["2_1", "3_0", "4_1", "5_0"]


def _assert_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes()


def _check(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], level: str) -> Any:
    session = InferenceSession(model, feature_level=level, engine="customop")
    got = session.run(None, dict(feeds))
    for g, e in zip(got, ort_run(model, feeds), strict=True):
        _assert_bits(g, e)
    return session.last_run_record


# --------------------------------------------------------------------------------------------------
# Scalar outputs


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.int32, np.float16, np.bool_])
def test_scalar_gather_output_is_rank_0(level: str, dtype: type) -> None:
    data = np.array([7, 2**63 + 5 if dtype is np.uint64 else 1, 3], dtype=dtype)
    feeds = {"data": data, "indices": np.array(1, dtype=np.int64)}
    record = _check(make_node_model("Gather", feeds, {"axis": 0}, 13), feeds, level)
    assert record.nodes[0].placement == "dml"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.float32])
def test_scalar_gather_nd_output_is_rank_0(level: str, dtype: type) -> None:
    data = np.arange(6, dtype=np.uint64).reshape(2, 3).astype(dtype)
    if dtype is np.uint64:
        data += np.uint64(2**64 - 10)
    feeds = {"data": data, "indices": np.array([1, -1], dtype=np.int64)}
    _check(make_node_model("GatherND", feeds, {}, 13), feeds, level)


# --------------------------------------------------------------------------------------------------
# NaN bits

F16_NANS = np.array([0x7E01, 0xFE33, 0x7C01, 0xFD00, 0x7E00, 0x7FFF], dtype=np.uint16).view(np.float16)
F32_NANS = np.array(
    [0x7F800001, 0xFF800123, 0x7FA00000, 0x7FC00001, 0xFFBFFFFF, 0x7FC00000], dtype=np.uint32
).view(np.float32)
F64_NANS = np.array(
    [0x7FF0000000000001, 0xFFF0000000000123, 0x7FF8000000000001, 0x7FF4000000000000, 0, 1], dtype=np.uint64
).view(np.float64)
NAN_DATA = {"float16": F16_NANS, "float32": F32_NANS, "float64": F64_NANS}


def _nan_cases(values: np.ndarray) -> list[tuple[str, dict[str, np.ndarray], dict[str, Any], int]]:
    data = values.reshape(2, 3)
    updates = values[::-1].reshape(2, 3)[:1].copy()
    rows = np.array([[1, 0, 1]], np.int64)
    return [
        ("Gather", {"data": data, "indices": np.array([[1, 0], [-1, 1]], np.int64)}, {"axis": 0}, 13),
        ("GatherElements", {"data": data, "indices": np.array([[2, 0, 1], [1, -1, 0]])}, {"axis": 1}, 13),
        ("GatherND", {"data": data, "indices": np.array([[1, 2], [0, -1]], np.int64)}, {}, 13),
        ("ScatterElements", {"data": data, "indices": rows, "updates": updates}, {"axis": 0}, 13),
        ("ScatterND", {"data": data, "indices": np.array([[1]], np.int64), "updates": updates}, {}, 13),
        ("Scatter", {"data": data, "indices": rows, "updates": updates}, {"axis": 0}, 10),
    ]  # fmt: skip


@pytest.mark.parametrize("level", ["2_1", "5_0"])
@pytest.mark.parametrize("dtype", list(NAN_DATA))
def test_nan_payloads_and_signalling_nans_pass_through(level: str, dtype: str) -> None:
    for op, feeds, attrs, opset in _nan_cases(NAN_DATA[dtype]):
        record = _check(make_node_model(op, feeds, attrs, opset), feeds, level)
        assert record.nodes[0].placement == "dml", (op, record.nodes[0].reasons)


def test_nan_bits_inside_a_loop_body() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "iter"], ["row"], name="pick", axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("row", TensorProto.FLOAT16, [3]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", ""], ["rows"], name="loop", body=body)],
        "loop_nan",
        [
            helper.make_tensor_value_info("table", TensorProto.FLOAT16, [2, 3]),
            helper.make_tensor_value_info("trip", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT16, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    feeds = {"table": F16_NANS.reshape(2, 3), "trip": np.array(2, dtype=np.int64)}
    record = _check(model, feeds, "5_0")
    assert record.nodes[0].name == "loop/body/pick" and record.nodes[0].placement == "dml"


def test_float16_positions_beyond_16_bits() -> None:
    # 70000 elements: element tags need two runs of 16 bits each.
    rng = np.random.default_rng(116)
    bits = rng.integers(0, 2**16, 70_000, dtype=np.uint64).astype(np.uint16)
    feeds = {
        "data": bits.view(np.float16).reshape(70, 1000),
        "indices": np.array([[69, 0], [-1, 35]], dtype=np.int64),
    }
    _check(make_node_model("Gather", feeds, {"axis": 0}, 13), feeds, "5_0")


# --------------------------------------------------------------------------------------------------
# Opsets below 5


@pytest.mark.parametrize("opset", [1, 4])
@pytest.mark.parametrize("level", ["3_0", "5_0", "2_1"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint64])
def test_models_below_opset_5_load_and_run(opset: int, level: str, dtype: type) -> None:
    data = (np.arange(12).reshape(3, 4) * 3 + 1).astype(dtype)
    for indices, axis in ((np.array([[0, -2], [3, 1]], np.int64), 1), (np.array(2, np.int64), 0)):
        feeds = {"data": data, "indices": indices}
        model = make_node_model("Gather", feeds, {"axis": axis}, opset)
        (node,) = _check(model, feeds, level).nodes
        if dtype is np.uint64:
            # uint64 crosses the bridge as int64 through Cast, which onnxruntime lacks before opset 6.
            assert node.placement == "onnxruntime-cpu" and "no Cast before opset 6" in node.reasons[-1][1]
        else:
            assert node.placement == "dml", node.reasons
        lowered = lower_model(model, feature_level=FeatureLevel.parse(level)).model
        onnx.checker.check_model(lowered)
        # No Reshape-5 (shape as an input) in a model importing ai.onnx below 5.
        assert all(len(n.input) == 1 for n in lowered.graph.node if n.op_type == "Reshape")
