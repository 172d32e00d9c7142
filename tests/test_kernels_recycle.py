"""The kernels' output-buffer pool (dmlshim.kernels.recycle): a buffer is reused only once nobody holds
any array on it, and results stay exact when it is."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from dmlshim.kernels import recycle

N = 1 << 18  # 1 MB of float32: the smallest pooled size


def test_a_held_result_is_never_reused() -> None:
    recycle.clear()
    a = recycle.empty((N,), np.float32)
    a[:] = 1.0
    b = recycle.empty((N,), np.float32)
    assert not np.shares_memory(a, b)
    view = a[10:20]
    del a
    c = recycle.empty((N,), np.float32)
    assert not np.shares_memory(c, view), "a view keeps its buffer out of reuse"
    assert float(view[0]) == 1.0


def test_a_released_buffer_is_reused_and_small_ones_are_not_pooled() -> None:
    recycle.clear()
    a = recycle.empty((N // 2, 2), np.float32)
    address = a.__array_interface__["data"][0]
    del a
    b = recycle.empty((N,), np.int32)  # same byte count, another dtype and shape
    assert b.__array_interface__["data"][0] == address
    assert b.shape == (N,) and b.dtype == np.int32 and b.flags.c_contiguous and b.flags.writeable
    before = recycle.pooled_bytes()
    small = recycle.empty((16,), np.float32)
    assert small.shape == (16,) and recycle.pooled_bytes() == before


def _scatter_nd_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("ScatterND", ["data", "indices", "updates"], ["out"])],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 4, 1024, 64]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 3]),
            helper.make_tensor_value_info("updates", TensorProto.FLOAT, [1, 64]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 1024, 64])],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def test_kept_results_of_repeated_runs_stay_onnxruntime_s() -> None:
    """Results the caller keeps are never overwritten by later runs, and each equals onnxruntime's."""
    import dmlshim

    model = _scatter_nd_model()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    kept, expected = [], []
    for step in range(4):
        feeds = {
            "data": rng.standard_normal((1, 4, 1024, 64), dtype=np.float32),
            "indices": np.array([[0, step, 100 * step]], dtype=np.int64),
            "updates": np.full((1, 64), float(step), dtype=np.float32),
        }
        kept.append(session.run(None, feeds)[0])
        expected.append(reference.run(None, feeds)[0])
        session.run(None, feeds)  # a discarded result: its buffer may be reused
    for ours, theirs in zip(kept, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)
