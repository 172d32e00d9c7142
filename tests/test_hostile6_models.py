"""Hostile pass h6 (issue 35), models: an index out of range inside a Loop body, asked of onnxruntime CPU
(one thread) in the same test; every engine names the body's node, its op, its indices tensor and the
value, as for a top-level node."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import IndexOutOfRangeError
from tests.oracle import ort_session

ENGINES = ("partitioned", "customop", "cpu")
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _vi(name: str, elem: int, shape: list | None) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def _loop_scatter() -> bytes:
    """acc[it] = upd[it] for it in 0..n-1, by a ScatterND in the Loop body (n > 4 leaves acc's rows)."""
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["it", "ax"], ["it1"], name="u1"),
            helper.make_node("Unsqueeze", ["it1", "ax"], ["pos"], name="u2"),
            helper.make_node("Gather", ["upd", "it"], ["row"], name="row_of", axis=0),
            helper.make_node("Unsqueeze", ["row", "ax"], ["rows"], name="u3"),
            helper.make_node("ScatterND", ["acc", "pos", "rows"], ["acc2"], name="put_row"),
            helper.make_node("Identity", ["cond"], ["cond2"], name="keep"),
        ],
        "body",
        [_vi("it", I64, []), _vi("cond", B, []), _vi("acc", F, None)],
        [_vi("cond2", B, []), _vi("acc2", F, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "ax")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "acc0"], ["accN"], name="loop", body=body)],
        "h6",
        [_vi("n", I64, []), _vi("acc0", F, None), _vi("upd", F, None)],
        [_vi("accN", F, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


@pytest.mark.parametrize("engine", ENGINES)
def test_index_out_of_range_in_a_loop_body_names_the_body_node(engine: str) -> None:
    """The partitioned and cpu engines raised a BadInputError naming the Loop (onnxruntime's message names
    the Loop first, then the body's ScatterND); the custom-op engine already named the ScatterND."""
    model = _loop_scatter()
    good = {
        "n": np.array(3),
        "acc0": np.zeros((4, 3), np.float32),
        "upd": np.arange(12, dtype=np.float32).reshape(4, 3),
    }
    np.testing.assert_array_equal(
        dmlshim.InferenceSession(model, engine=engine).run(None, good)[0],
        ort_session(model).run(None, good)[0],
    )
    bad = {
        "n": np.array(5),
        "acc0": np.zeros((4, 3), np.float32),
        "upd": np.arange(15, dtype=np.float32).reshape(5, 3),
    }
    with pytest.raises(Exception, match="indice = 4"):
        ort_session(model).run(None, bad)
    with pytest.raises(IndexOutOfRangeError) as info:
        dmlshim.InferenceSession(model, engine=engine).run(None, bad)
    err = info.value
    assert isinstance(err, onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument)
    assert (err.node, err.op_type, err.tensor, err.value) == ("loop/body/put_row", "ScatterND", "pos", 4)


_SCALAR_CASES = {
    "gather": ("Gather", {}, np.arange(5), np.array(4)),
    "gather_negative": ("Gather", {}, np.arange(5), np.array(-5)),
    "gather_nd": ("GatherND", {}, np.arange(24).reshape(2, 3, 4), np.array([1, 2, 3])),
    "gather_nd_batch": ("GatherND", {"batch_dims": 1}, np.arange(6).reshape(2, 3), np.array([[2], [0]])),
    "gather_not_scalar": ("Gather", {"axis": 1}, np.arange(6).reshape(2, 3), np.array(-1)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
@pytest.mark.parametrize("case", sorted(_SCALAR_CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_scalar_output_of_inputs_of_unknown_rank(case: str, dtype: type, engine: str) -> None:
    """Inputs declared without a shape whose Gather/GatherND output is a scalar: the custom-op engine
    returned [1] (the bridge's form of a scalar) where onnxruntime returns a 0-d array."""
    op, attrs, data, indices = _SCALAR_CASES[case]
    elem = {np.float32: F, np.float16: TensorProto.FLOAT16, np.int64: I64}[dtype]
    graph = helper.make_graph(
        [helper.make_node(op, ["d", "i"], ["o"], name="n", **attrs)],
        "h6",
        [_vi("d", elem, None), _vi("i", I64, None)],
        [_vi("o", elem, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"d": data.astype(dtype), "i": indices}
    want = ort_session(model.SerializeToString()).run(None, feeds)[0]
    got = dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
