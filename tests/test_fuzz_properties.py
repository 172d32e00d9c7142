"""Property tests: random shapes, attributes, types and index values thrown at the translator, the
descriptor validator, and the kernels through the session.

* ``translate_node`` returns a NodeTranslation or raises a DmlShimError, never anything else;
* ``validate`` on any descriptor returns violations, never raises;
* a random one-node model either raises a typed DmlShimError or returns what onnxruntime CPU
  (single-threaded) returns, bit for bit; when onnxruntime rejects an out-of-range index, dmlshim raises
  IndexOutOfRangeError.

Examples per property come from the profile in tests/fuzz_settings.py (``HYPOTHESIS_PROFILE=long`` for a
soak run). A failure prints the falsifying example and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from hypothesis import assume, given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from dmlshim import DmlShimError, IndexOutOfRangeError, InferenceSession
from dmlshim.dml import (
    BufferTensorDesc,
    DataType,
    FeatureLevel,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    ScatterDesc,
    ScatterNdDesc,
    TensorFlags,
)
from dmlshim.dml.validate import Violation, validate
from dmlshim.translate import NodeTranslation, TensorInfo, translate_node
from tests.fuzz_settings import FUZZ, GATHER_SCATTER_OPS
from tests.oracle import IR_VERSION, ort_session

LEVELS = list(FeatureLevel)
ELEM_TYPES = [t for t in TensorProto.DataType.values() if t != TensorProto.UNDEFINED]

# --- translator -------------------------------------------------------------------------------------------

dims = st.one_of(
    st.integers(0, 6),
    st.integers(0, 2**40),
    st.sampled_from(["N", "batch", ""]),
    st.none(),
    st.integers(-3, -1),
)
shapes = st.one_of(st.none(), st.lists(dims, min_size=0, max_size=10).map(tuple))
infos = st.one_of(
    st.none(),
    st.builds(TensorInfo, shapes, st.one_of(st.sampled_from(ELEM_TYPES), st.integers(-5, 60))),
)
attr_values = st.one_of(
    st.integers(-(2**40), 2**40),
    st.integers(-10, 10),
    st.sampled_from(["none", "add", "mul", "max", "min", "bogus", ""]),
    st.floats(allow_nan=True),
    st.lists(st.integers(-3, 3), min_size=1, max_size=3),
)


@st.composite
def random_nodes(draw: st.DrawFn) -> onnx.NodeProto:
    op = draw(st.sampled_from([*GATHER_SCATTER_OPS, "Gather", "Unknown", "Identity"]))
    n_inputs = draw(st.integers(0, 4))
    inputs = [draw(st.sampled_from(["data", "indices", "updates", "", "x"])) for _ in range(n_inputs)]
    attrs = {
        name: draw(attr_values)
        for name in draw(st.lists(st.sampled_from(["axis", "batch_dims", "reduction", "junk"]), unique=True))
    }
    domain = draw(st.sampled_from(["", "", "", "ai.onnx", "com.acme"]))
    outputs = draw(st.sampled_from([["y"], [], ["y", "z"]]))
    return helper.make_node(
        op, inputs, outputs, name=draw(st.sampled_from(["", "n"])), domain=domain, **attrs
    )


@FUZZ
@given(
    node=random_nodes(),
    inputs=st.lists(infos, max_size=4),
    opset=st.integers(-1, 25),
    level=st.sampled_from(LEVELS),
)
def test_translate_node_never_crashes(
    node: onnx.NodeProto, inputs: list[TensorInfo | None], opset: int, level: FeatureLevel
) -> None:
    try:
        t = translate_node(node, opset, inputs, level)
    except DmlShimError:
        return
    assert isinstance(t, NodeTranslation)
    assert t.status.value in ("dml", "fallback", "error")
    if t.status.value == "dml":
        assert t.operator is not None
        assert not validate(t.operator, level)  # what the translator emits is valid at the target level
    t.to_json()  # renderable, too


# --- validator ---------------------------------------------------------------------------------------------

uint_like = st.one_of(st.integers(0, 10), st.integers(-(2**33), 2**65), st.sampled_from([2**32 - 1, 2**32]))
sizes = st.lists(st.one_of(st.integers(0, 5), st.integers(0, 2**33)), min_size=0, max_size=10).map(tuple)


@st.composite
def tensor_descs(draw: st.DrawFn) -> BufferTensorDesc:
    size = draw(sizes)
    strides = draw(
        st.one_of(st.none(), st.lists(st.one_of(st.integers(0, 8), uint_like), min_size=0, max_size=10))
    )
    return BufferTensorDesc(
        draw(st.sampled_from(list(DataType))),
        size,
        tuple(strides) if strides is not None else None,
        draw(st.sampled_from(list(TensorFlags))),
        draw(st.one_of(st.just(-1), st.integers(0, 2**40))),
        draw(st.one_of(st.just(0), st.sampled_from([1, 8, 16, 32, 48]), uint_like)),
    )


DESC_TYPES = [GatherDesc, GatherElementsDesc, GatherNdDesc, GatherNd1Desc, ScatterDesc, ScatterNdDesc]


@st.composite
def descriptors(draw: st.DrawFn) -> Any:
    cls = draw(st.sampled_from(DESC_TYPES))
    tensors = {name: draw(tensor_descs()) for name in cls.TENSOR_FIELDS}
    uints = {name: draw(uint_like) for name in cls.UINT_FIELDS}
    return cls.from_fields(tensors, uints)


@FUZZ
@given(desc=descriptors(), level=st.sampled_from(LEVELS))
def test_validate_never_raises(desc: Any, level: FeatureLevel) -> None:
    violations = validate(desc, level)
    assert isinstance(violations, tuple)
    assert all(isinstance(v, Violation) and v.rule for v in violations)


# --- kernels through the session, against onnxruntime ---------------------------------------------------

DATA_TYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.uint8, np.int8, np.bool_]


def _data(draw: st.DrawFn, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    n = math.prod(shape)
    raw = draw(st.binary(min_size=n * np.dtype(dtype).itemsize, max_size=n * np.dtype(dtype).itemsize))
    arr = np.frombuffer(raw, dtype=np.uint8 if dtype is np.bool_ else dtype).copy()
    if dtype is np.bool_:
        arr = arr % 2 == 1
    return arr.reshape(shape)


def _indices(draw: st.DrawFn, shape: tuple[int, ...], bound: int, dtype: Any) -> np.ndarray:
    # Mostly valid (including negative) indices; sometimes one just out of range or wildly out.
    n = math.prod(shape)
    lo, hi = -max(bound, 1) - 1, max(bound, 1)
    values = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return np.array(values, dtype=dtype).reshape(shape)


@st.composite
def one_node_cases(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, np.ndarray], str]:
    op = draw(st.sampled_from(GATHER_SCATTER_OPS))
    rank = draw(st.integers(1, 4))
    data_shape = tuple(draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(DATA_TYPES))
    index_dtype = np.int64 if op in ("GatherND", "ScatterND") else draw(st.sampled_from([np.int64, np.int32]))
    attrs: dict[str, Any] = {}
    opset = 13
    feeds: dict[str, np.ndarray] = {"data": _data(draw, data_shape, dtype)}
    if op in ("Gather", "GatherElements", "Scatter", "ScatterElements"):
        axis = draw(st.integers(-rank, rank - 1))
        attrs["axis"] = axis
        dim = data_shape[axis]
        if op == "Gather":
            ishape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
        else:
            ishape = tuple(
                draw(st.integers(0, 3)) if a == axis % rank else draw(st.integers(0, max(d, 0)))
                for a, d in enumerate(data_shape)
            )
        feeds["indices"] = _indices(draw, ishape, dim, index_dtype)
        if op in ("Scatter", "ScatterElements"):
            feeds["updates"] = _data(draw, ishape, dtype)
            if op == "Scatter":
                opset = 10
            elif draw(st.booleans()) and dtype not in (np.bool_,):
                attrs["reduction"] = draw(st.sampled_from(["add", "mul", "max", "min"]))
                opset = 18
    else:
        batch = draw(st.integers(0, rank - 1)) if op == "GatherND" else 0
        if batch:
            attrs["batch_dims"] = batch
        k = draw(st.integers(1, rank - batch))
        extra = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
        ishape = data_shape[:batch] + extra + (k,)
        n = math.prod(ishape[:-1])
        rows = [
            [draw(st.integers(-d - 1, max(d, 1))) for d in data_shape[batch : batch + k]] for _ in range(n)
        ]
        feeds["indices"] = np.array(rows, dtype=np.int64).reshape(ishape)
        if op == "ScatterND":
            feeds["updates"] = _data(draw, ishape[:-1] + data_shape[k:], dtype)
            if draw(st.booleans()) and dtype not in (np.bool_,):
                attrs["reduction"] = draw(st.sampled_from(["add", "mul", "max", "min"]))
                opset = 18
    level = draw(st.sampled_from(["5_0", "4_1", "3_0", "2_1", "1_0"]))
    graph_inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    node = helper.make_node(op, list(feeds), ["y"], name="fuzz", **attrs)
    graph = helper.make_graph([node], "fuzz", graph_inputs, [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    return model, feeds, level


def _index_error(text: str) -> bool:
    lowered = text.lower()
    return any(k in lowered for k in ("out of range", "out of data bounds", "invalid ind", "out of bound"))


@FUZZ
@given(case=one_node_cases())
def test_session_matches_onnxruntime_or_raises_typed_error(
    case: tuple[onnx.ModelProto, dict[str, np.ndarray], str],
) -> None:
    model, feeds, level = case
    copies = {k: v.copy() for k, v in feeds.items()}
    try:
        want: np.ndarray | None = ort_session(model).run(None, feeds)[0]
        ort_error = ""
    except Exception as exc:  # onnxruntime's error types share no useful base
        want, ort_error = None, str(exc)
    assume(want is not None or ort_error)
    try:
        got = InferenceSession(model, feature_level=level).run(None, feeds)[0]
    except IndexOutOfRangeError:
        assert want is None, "dmlshim refused an index onnxruntime accepted"
        got = None
    except DmlShimError as exc:
        assert want is None, f"onnxruntime gave a result but dmlshim raised {type(exc).__name__}: {exc}"
        assert not _index_error(ort_error), f"onnxruntime: {ort_error}; dmlshim: {type(exc).__name__}: {exc}"
        got = None
    for k, v in feeds.items():
        assert np.array_equal(v, copies[k], equal_nan=v.dtype.kind == "f"), "an input was modified"
    if want is None:
        assert got is None, f"onnxruntime failed ({ort_error}) but dmlshim returned a result"
        return
    if got is None:
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        # Reductions compute, so compare values (NaN equal to NaN); pure data movement compares bits.
        if any(a.name == "reduction" for a in model.graph.node[0].attribute):
            np.testing.assert_array_equal(got, want)
        else:
            assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    else:
        np.testing.assert_array_equal(got, want)
