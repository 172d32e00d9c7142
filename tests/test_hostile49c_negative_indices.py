"""Hostile round 49c: negative indices at the boundary in the partitioned engine's run plans.

The negative-index prologue (``execute/plan/step_fast.py``, ``_negative``) was rewritten once for the four
gather/ScatterND closures. Indices -dim (the first element), -dim-1 (out of range), the index type's
minimum and dim (out of range), int64 and int32, against onnxruntime CPU: the same values, or a refusal
of onnxruntime's class that names the value, the index and the valid range.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info
DATA = np.arange(20, dtype=np.float32).reshape(4, 5)


def _model(node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto]) -> bytes:
    graph = helper.make_graph([node], "g", inputs, [vi("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _case(op: str, dtype: type[np.integer], v: int) -> tuple[bytes, dict[str, np.ndarray]]:
    it = TensorProto.INT64 if dtype is np.int64 else TensorProto.INT32
    if op == "Gather":
        node = helper.make_node("Gather", ["d", "i"], ["y"])
        return _model(node, [vi("d", F, [4, 5]), vi("i", it, [2])]), {"d": DATA, "i": np.array([0, v], dtype)}
    if op == "GatherElements":
        node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=0)
        feeds = {"d": DATA, "i": np.array([[0, v, 1, 2, 3]], dtype)}
        return _model(node, [vi("d", F, [4, 5]), vi("i", it, [1, 5])]), feeds
    indices = np.array([[0, 1], [v, -5]], dtype)
    if op == "GatherND":
        node = helper.make_node("GatherND", ["d", "i"], ["y"])
        return _model(node, [vi("d", F, [4, 5]), vi("i", it, [2, 2])]), {"d": DATA, "i": indices}
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"])
    inputs = [vi("d", F, [4, 5]), vi("i", it, [2, 2]), vi("u", F, [2])]
    return _model(node, inputs), {"d": DATA, "i": indices, "u": np.array([7, 8], np.float32)}


CASES = [
    (op, dtype, v)
    for op in ("Gather", "GatherElements", "GatherND", "ScatterND")
    for dtype in ((np.int64, np.int32) if op in ("Gather", "GatherElements") else (np.int64,))
    for v in (-4, -5, int(np.iinfo(dtype).min), 3, 4)
]


@pytest.mark.parametrize(("op", "dtype", "v"), CASES, ids=[f"{o}-{d.__name__}-{v}" for o, d, v in CASES])
def test_boundary_index_as_onnxruntime(op: str, dtype: type[np.integer], v: int) -> None:
    data, feeds = _case(op, dtype, v)
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    theirs = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(data, engine="partitioned")
    try:
        expected = theirs.run(None, feeds)[0]
    except Exception as exc:  # onnxruntime's refusal: ours is of its class and names the index
        with pytest.raises(type(exc)) as info:
            ours.run(None, feeds)
        assert str(v) in str(info.value)
        assert "out of range" in str(info.value)
        return
    np.testing.assert_array_equal(ours.run(None, feeds)[0], expected)
