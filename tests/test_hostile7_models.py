"""Hostile pass h7 (issue 35), models: odd dtypes, index limits, empty tensors, rank-0 and -rank axes,
attributes of the wrong type, duplicate and hostile names, outputs that are inputs or initializers, odd
opset imports and local functions named like standard ops. Every expected value or refusal is asked of
onnxruntime CPU (one thread, tests/oracle.py) in the test itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import DmlShimError

from .oracle import IR_VERSION, ort_session

ENGINES = ("partitioned", "customop", "cpu")
F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
A = np.arange(12, dtype=np.float32).reshape(3, 4)


def _vi(name: str, elem: int, shape: list | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(
    nodes: list,
    inputs: list,
    outputs: list,
    *,
    inits: tuple = (),
    opsets: list | None = None,
    functions: tuple = (),
) -> bytes:
    graph = helper.make_graph(nodes, "h7", inputs, outputs, list(inits))
    model = helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=opsets or [helper.make_opsetid("", 18)],
        functions=list(functions),
    )
    return model.SerializeToString()


def _same_as_onnxruntime(model: bytes, feeds: dict[str, Any], engine: str) -> None:
    """dmlshim answers as onnxruntime does: the same values (bit for bit), or a refusal of onnxruntime's
    class naming what onnxruntime's message names."""
    try:
        want = ort_session(model).run(None, feeds)
    except Exception as theirs:
        with pytest.raises(type(theirs)) as info:
            dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
        assert isinstance(info.value, DmlShimError)
        return
    got = dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _local_function_named(op: str, domain: str, opset: int = 18) -> bytes:
    """A node ``domain.op`` and a model-local function of that name whose body returns the data as is."""
    body = [helper.make_node("Identity", ["x"], ["z"])]
    function = helper.make_function(domain, op, ["x", "y"], ["z"], body, [helper.make_opsetid("", opset)])
    opsets = [helper.make_opsetid("", opset)]
    if domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(domain, 1))
    node = helper.make_node(op, ["d", "i"], ["o"], name="g", domain=domain)
    return _model(
        [node],
        [_vi("d", F, [3, 4]), _vi("i", I64, [2, 4])],
        [_vi("o", F, None)],
        opsets=opsets,
        functions=(function,),
    )


@pytest.mark.parametrize(
    ("op", "domain", "opset"),
    [
        ("GatherElements", "", 18),  # the standard op: onnxruntime never calls the function
        ("GatherElements", "ai.onnx", 18),
        ("Gather", "", 13),
        ("GatherElements", "", 10),  # not yet an op at opset 10: onnxruntime refuses the node
        ("MyGather", "", 18),  # an ONNX-domain function is no operator to onnxruntime
        ("GatherElements", "local", 18),  # a function of another domain is called
        ("Gelu", "com.microsoft", 18),  # and replaces onnxruntime's contrib op of that name
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_local_function_named_like_a_standard_op_follows_onnxruntime(
    op: str, domain: str, opset: int, engine: str
) -> None:
    """dmlshim expanded a local function of the ONNX domain named Gather/GatherElements in place of the
    standard op: every engine returned the function's value (the data, [3, 4]) where onnxruntime 1.24
    and 1.32 run the standard op ([2, 4])."""
    model = _local_function_named(op, domain, opset)
    feeds = {"d": A, "i": np.array([[2, 1, 0, 0], [0, 0, -3, 0]])}
    if op == "Gelu":
        feeds = {"d": A, "i": np.zeros((2, 4), np.int64)}
    _same_as_onnxruntime(model, feeds, engine)


def test_a_failed_custom_op_names_the_models_node_not_a_node_the_lowering_added() -> None:
    """An axis out of range for the fed rank: onnxruntime names the Gather; the custom-op engine's message
    led with onnxruntime's later failure of the Reshape the lowering adds after it ('o_reshape')."""
    model = _model(
        [helper.make_node("Gather", ["d", "i"], ["o"], name="g", axis=3)],
        [_vi("d", F, None), _vi("i", I64, [])],
        [_vi("o", F, None)],
    )
    feeds = {"d": np.zeros((2, 3, 4), np.float32), "i": np.array(1)}
    with pytest.raises(Exception) as theirs:
        ort_session(model).run(None, feeds)
    assert "Gather node. Name:'g'" in str(theirs.value)
    with pytest.raises(type(theirs.value)) as info:
        dmlshim.InferenceSession(model, engine="customop").run(None, feeds)
    text = str(info.value)
    assert "o_reshape" not in text and "Reshape" not in text
    assert "Gather node. Name:'g'" in text and "axis 3 is not in valid range" in text
    assert (info.value.node, info.value.op_type) == ("g", "Gather")


def _one(
    op: str, feeds: dict[str, np.ndarray], *, opset: int = 18, out: str | None = None, **attrs: Any
) -> bytes:
    """One node ``op`` over graph inputs of undeclared shape named after ``feeds`` (in order)."""
    names = list(feeds)
    elems = {n: helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype) for n, v in feeds.items()}
    return _model(
        [helper.make_node(op, names, ["o"], name="n", **attrs)],
        [_vi(n, elems[n], None) for n in names],
        [_vi("o", elems[out or names[0]], None)],
        opsets=[helper.make_opsetid("", opset)],
    )


_I32 = np.iinfo(np.int32)
_I64 = np.iinfo(np.int64)
_CASES: dict[str, tuple[bytes, dict[str, Any]]] = {}


def _add(name: str, op: str, feeds: dict[str, Any], **attrs: Any) -> None:
    _CASES[name] = (_one(op, feeds, **attrs), feeds)


for _dt in (np.bool_, np.uint8, np.int8, np.uint16, np.uint32, np.uint64, np.float16, np.float64):
    _data = (
        np.array([1, 0, 1], dtype=_dt)
        if _dt is np.bool_
        else np.array([0, 1, np.iinfo(_dt).max if np.dtype(_dt).kind == "u" else -1], _dt)
    )
    _add(f"gather_{np.dtype(_dt).name}", "Gather", {"d": _data, "i": np.array([2, -3])})
    _add(
        f"scatter_elements_{np.dtype(_dt).name}",
        "ScatterElements",
        {"d": _data, "i": np.array([-1]), "u": _data[:1]},
    )
_add("gather_string", "Gather", {"d": np.array(["a", "bb", ""], dtype=object), "i": np.array([2, -3])})
for _v in (_I32.min, _I32.max, 3, -4):
    _add(f"gather_int32_{_v}", "Gather", {"d": A, "i": np.array([_v, 0], np.int32)})
    _add(
        f"gather_elements_int32_{_v}",
        "GatherElements",
        {"d": A, "i": np.array([[_v], [0], [1]], np.int32)},
        axis=-1,
    )
for _v in (_I64.min, _I64.max, 3, -4):
    _add(f"gather_nd_{_v}", "GatherND", {"d": A, "i": np.array([[_v, 0]])})
    _add(f"scatter_nd_{_v}", "ScatterND", {"d": A, "i": np.array([[_v]]), "u": np.ones((1, 4), np.float32)})
_add("gather_empty_indices", "Gather", {"d": A, "i": np.zeros((0, 2), np.int64)}, axis=1)
_add(
    "gather_empty_data_out_of_range",
    "Gather",
    {"d": np.zeros((0, 3), np.float32), "i": np.array([5])},
    axis=1,
)
_add("gather_from_empty_axis", "Gather", {"d": np.zeros((0, 3), np.float32), "i": np.array([0])})
_add(
    "gather_elements_empty_out_of_range",
    "GatherElements",
    {"d": np.zeros((0, 3), np.float32), "i": np.full((0, 2), 9)},
    axis=1,
)
_add(
    "scatter_nd_empty_updates",
    "ScatterND",
    {"d": A, "i": np.zeros((0, 1), np.int64), "u": np.zeros((0, 4), np.float32)},
)
_add(
    "scatter_nd_empty_data_out_of_range",
    "ScatterND",
    {"d": np.zeros((2, 0), np.float32), "i": np.array([[7]]), "u": np.zeros((1, 0), np.float32)},
)
_add(
    "scatter_elements_empty_indices_wider",
    "ScatterElements",
    {"d": A, "i": np.zeros((0, 5), np.int64), "u": np.zeros((0, 5), np.float32)},
)
_add("gather_axis_minus_rank", "Gather", {"d": A, "i": np.array(-3)}, axis=-2)
_add("gather_axis_rank", "Gather", {"d": A, "i": np.array(1)}, axis=2)
_add("gather_scalar_data", "Gather", {"d": np.array(1.0, np.float32), "i": np.array(0)})
_add(
    "scatter_elements_rank0",
    "ScatterElements",
    {"d": np.array(1.0, np.float32), "i": np.array(0), "u": np.array(2.0, np.float32)},
)
_add("gather_nd_batch_dims_rank", "GatherND", {"d": A, "i": np.zeros((3, 4), np.int64)}, batch_dims=2)
_add("gather_nd_batch_dims_negative", "GatherND", {"d": A, "i": np.zeros((3, 1), np.int64)}, batch_dims=-1)
_add(
    "scatter_elements_minus_rank_add",
    "ScatterElements",
    {"d": A, "i": np.array([[1, -2, 0, 1]]), "u": np.ones((1, 4), np.float32)},
    axis=-2,
    reduction="add",
)
_add(
    "scatter_elements_nan_max",
    "ScatterElements",
    {
        "d": np.array([0.0, -0.0, np.nan, np.inf], np.float32),
        "i": np.array([0, 1, 2, 3, 0, 1]),
        "u": np.array([-0.0, 0.0, 1.0, -np.inf, np.nan, np.nan], np.float32),
    },
    reduction="max",
)
_add(
    "scatter_elements_int32_overflow_add",
    "ScatterElements",
    {
        "d": np.array([_I32.max, _I32.min], np.int32),
        "i": np.array([0, 1, 0]),
        "u": np.array([1, -1, 5], np.int32),
    },
    reduction="add",
)
_add(
    "scatter_nd_duplicates_mul",
    "ScatterND",
    {"d": A, "i": np.array([[1], [1], [-2]]), "u": np.arange(12, dtype=np.float32).reshape(3, 4)},
    reduction="mul",
)
_add(
    "scatter_opset9",
    "Scatter",
    {"d": A, "i": np.array([[1, -1]]), "u": np.array([[7, 8]], np.float32)},
    opset=9,
    axis=1,
)
_add("gather_opset1_negative", "Gather", {"d": A, "i": np.array([-1, 2])}, opset=1)


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_single_nodes_follow_onnxruntime(case: str, engine: str) -> None:
    """Odd dtypes, indices at the int32/int64 limits, empty tensors in every position, rank-0 data, axes at
    -rank and rank, reductions over NaN, -0.0 and integer overflow, deprecated and first opsets: every
    engine returns onnxruntime's bits or refuses with onnxruntime's class (found consistent in h7)."""
    model, feeds = _CASES[case]
    _same_as_onnxruntime(model, feeds, engine)
