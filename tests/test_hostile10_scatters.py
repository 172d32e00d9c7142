"""Hostile round 10: scatters that earlier rounds left out, each against onnxruntime CPU (one thread).

- bfloat16 ScatterElements / ScatterND (fed through Casts, as a model gets bfloat16 without numpy feeds)
  with duplicate and negative indices and special values: bit for bit with onnxruntime where it runs them,
  refused as onnxruntime refuses the reductions it has no bfloat16 kernel for;
- reductions with int32 duplicate indices at feature levels that cannot express them (1_0, 2_1) and one
  that can (5_0): the node falls back or runs, the bits never differ;
- constant (initializer) indices with duplicates and whole-tensor (k = 0) ScatterND updates.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import (
    IR_VERSION,
    assert_same_bits,
    ort_run,
)

ENGINES = ("cpu", "customop", "partitioned")
SPECIAL = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, 3.0078125, 1e30, -2.5, 1e-30], np.float32)


def _session(model: onnx.ModelProto, engine: str, level: str = "5_0") -> dmlshim.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return dmlshim.InferenceSession(
        model.SerializeToString(), so, providers=["DmlExecutionProvider"], engine=engine, feature_level=level
    )


def _bf16_model(
    op: str, opset: int, x: np.ndarray, i: np.ndarray, u: np.ndarray, attrs: dict
) -> onnx.ModelProto:
    info = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["u"], ["ub"], to=TensorProto.BFLOAT16),
        helper.make_node(op, ["xb", "i", "ub"], ["yb"], **attrs),
        helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            info("x", TensorProto.FLOAT, x.shape),
            info("i", TensorProto.INT64, i.shape),
            info("u", TensorProto.FLOAT, u.shape),
        ],
        [info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _bf16_case(op: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    x = rng.choice(SPECIAL, (5, 3)).astype(np.float32)
    u = (
        rng.choice(SPECIAL, (6, 3)).astype(np.float32)
        if seed % 2
        else (rng.standard_normal((6, 3)) * 100).astype(np.float32)
    )
    i = rng.integers(-5, 5, (6, 3)).astype(np.int64)
    if op == "ScatterND":
        return x, i[:, :1].copy(), u, {}
    i[0] = i[1]  # a duplicate row for certain
    return x, i, u, {"axis": 0}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_bfloat16_scatter_with_duplicates_matches_onnxruntime(op: str, opset: int) -> None:
    for seed in (0, 1):
        x, i, u, attrs = _bf16_case(op, seed)
        model = _bf16_model(op, opset, x, i, u, attrs)
        feeds = {"x": x, "i": i, "u": u}
        want = ort_run(model, feeds)
        for engine in ENGINES:
            assert_same_bits(_session(model, engine).run(None, feeds), want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_bfloat16_reduction_onnxruntime_has_no_kernel_for_is_refused_alike(reduction: str) -> None:
    x, i, u, attrs = _bf16_case("ScatterElements", 0)
    model = _bf16_model("ScatterElements", 18, x, i, u, {**attrs, "reduction": reduction})
    feeds = {"x": x, "i": i, "u": u}
    with pytest.raises(Exception) as theirs:
        ort_run(model, feeds, quiet=True)
    assert "bfloat16" in str(theirs.value).lower() or "BFloat16" in str(theirs.value)
    for engine in ENGINES:
        with pytest.raises(type(theirs.value)):
            _session(model, engine).run(None, feeds)


def _plain_model(
    op: str,
    opset: int,
    x: np.ndarray,
    i: np.ndarray,
    u: np.ndarray,
    attrs: dict,
    *,
    constant_indices: bool = False,
) -> onnx.ModelProto:
    info = helper.make_tensor_value_info
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    inputs = [info("x", dtype, x.shape), info("u", dtype, u.shape)]
    inits = []
    if constant_indices:
        inits.append(numpy_helper.from_array(i, "i"))
    else:
        inputs.append(info("i", helper.np_dtype_to_tensor_dtype(i.dtype), i.shape))
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "i", "u"], ["y"], **attrs)],
        "g",
        inputs,
        [info("y", dtype, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


@pytest.mark.parametrize("level", ["1_0", "2_1", "5_0"])
@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint8, np.int64])
def test_reductions_with_int32_duplicates_at_every_level(level: str, dtype: type) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [3, 2, 1]], dtype)
    i = np.array([[0, -1, 2], [0, 3, -2], [-4, 3, 2]], np.int32)
    u = np.array([[2, 3, 1], [4, 1, 2], [3, 2, 5]], dtype)
    for reduction in ("add", "mul", "max", "min"):
        for op, idx, attrs in (
            ("ScatterElements", i, {"axis": 0, "reduction": reduction}),
            ("ScatterND", i[:, :1].astype(np.int64), {"reduction": reduction}),  # ScatterND: int64 only
        ):
            model = _plain_model(op, 18, x, idx, u, attrs)
            feeds = {"x": x, "i": idx, "u": u}
            want = ort_run(model, feeds)
            for engine in ENGINES:
                assert_same_bits(_session(model, engine, level).run(None, feeds), want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_constant_duplicate_indices_match_onnxruntime(reduction: str) -> None:
    x = np.arange(15, dtype=np.int64).reshape(5, 3) - 7
    attrs = {} if reduction == "none" else {"reduction": reduction}
    cases = [
        (
            "ScatterElements",
            np.array([[1, 1, 1], [1, 1, 1], [-4, 2, 2]], np.int64),
            np.array([[3, -2, 5], [1, 4, -3], [2, 2, 2]], np.int64),
            {**attrs, "axis": 0},
        ),
        (
            "ScatterND",
            np.array([[1, 2], [-4, -1], [0, 0], [0, 0]], np.int64),
            np.array([4, -5, 6, 7], np.int64),
            attrs,
        ),
    ]
    for op, i, u, a in cases:
        model = _plain_model(op, 18, x, i, u, a, constant_indices=True)
        want = ort_run(model, {"x": x, "u": u})
        for engine in ENGINES:
            assert_same_bits(_session(model, engine).run(None, {"x": x, "u": u}), want)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_constant_whole_tensor_scatternd_twice_matches_onnxruntime(reduction: str) -> None:
    """Indices of shape (2, 0): each update replaces (or reduces into) the whole tensor, twice."""
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    u = np.stack([x[::-1] * 2, -x]).astype(np.float32)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    model = _plain_model("ScatterND", 18, x, np.zeros((2, 0), np.int64), u, attrs, constant_indices=True)
    want = ort_run(model, {"x": x, "u": u})
    for engine in ENGINES:
        assert_same_bits(_session(model, engine).run(None, {"x": x, "u": u}), want)
