"""Translator: descriptor fields against the facts sheet, and translate -> kernels == onnxruntime CPU.

Cases are sampled (seeded) over ranks 1-8, every ONNX data type the ops accept, int32/int64 indices,
negative axes and indices, batch_dims 0-3, every reduction, opsets 9-18 and feature levels
1_0, 2_0, 2_1, 3_0, 4_1, 5_0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from onnx import helper

from dmlshim.dml.enums import DataType, FeatureLevel, OperatorType
from dmlshim.dml.validate import check
from dmlshim.translate import Layout, NodeTranslation, Status, TensorInfo, run_translation, translate_node
from tests.oracle import ort_node

FL = FeatureLevel
LEVELS = (FL.FL_1_0, FL.FL_2_0, FL.FL_2_1, FL.FL_3_0, FL.FL_4_1, FL.FL_5_0)
DATA_TYPES = (
    np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
)  # fmt: skip
OPSETS = {
    "Gather": (1, 11, 13),
    "GatherElements": (11, 13),
    "GatherND": (11, 12, 13),
    "Scatter": (9, 10),
    "ScatterElements": (11, 13, 16, 18),
    "ScatterND": (11, 13, 16, 18),
}
SINCE = {
    ("Gather", 1): 1, ("Gather", 11): 11, ("Gather", 13): 13,
    ("GatherElements", 11): 11, ("GatherElements", 13): 13,
    ("GatherND", 11): 11, ("GatherND", 12): 12, ("GatherND", 13): 13,
    ("Scatter", 9): 9, ("Scatter", 10): 9,
    ("ScatterElements", 11): 11, ("ScatterElements", 13): 13, ("ScatterElements", 16): 16,
    ("ScatterElements", 18): 18,
    ("ScatterND", 11): 11, ("ScatterND", 13): 13, ("ScatterND", 16): 16, ("ScatterND", 18): 18,
}  # fmt: skip


@dataclass
class Case:
    op: str
    opset: int
    inputs: dict[str, np.ndarray]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def since(self) -> int:
        return SINCE[(self.op, self.opset)]

    def node(self) -> Any:
        return helper.make_node(self.op, list(self.inputs), ["out"], name=f"{self.op}_node", **self.attrs)

    def infos(self) -> list[TensorInfo]:
        return [
            TensorInfo(tuple(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for a in self.inputs.values()
        ]

    def translate(self, fl: FeatureLevel) -> NodeTranslation:
        return translate_node(self.node(), self.opset, self.infos(), fl)

    def __repr__(self) -> str:
        shapes = {k: (list(v.shape), str(v.dtype)) for k, v in self.inputs.items()}
        return f"{self.op}-{self.opset} {self.attrs} {shapes}"


def _dims(rng: np.random.Generator, rank: int, budget: int = 64) -> tuple[int, ...]:
    dims = [int(rng.integers(1, 4)) for _ in range(rank)]
    while math.prod(dims) > budget:
        dims[int(np.argmax(dims))] -= 1
    return tuple(dims)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.kind == "f":
        arr = rng.standard_normal(shape).astype(dt)
        if arr.size > 2:
            arr.flat[1] = np.nan
        return arr
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def _signed(rng: np.random.Generator, values: np.ndarray, bound: Any, allow_negative: bool) -> np.ndarray:
    if not allow_negative:
        return values
    flip = rng.random(values.shape) < 0.4
    return np.where(flip, values - bound, values)


def gen_case(rng: np.random.Generator, op: str, rank: int | None = None, dtype: Any = None) -> Case:
    opset = int(rng.choice(OPSETS[op]))
    dtype = dtype if dtype is not None else DATA_TYPES[int(rng.integers(len(DATA_TYPES)))]
    index_dtype = np.int64 if op in ("GatherND", "ScatterND") or rng.random() < 0.5 else np.int32
    negative = opset >= 11
    r = rank if rank is not None else int(rng.integers(1, 9))
    if op == "Gather":
        shape = _dims(rng, r)
        q = int(rng.integers(0, min(3, 9 - r) + 1))
        axis = int(rng.integers(-r, r))
        n = shape[axis]
        idx = _signed(rng, rng.integers(0, n, _dims(rng, q, 12)), n, negative).astype(index_dtype)
        return Case(op, opset, {"data": _data(rng, shape, dtype), "indices": idx}, {"axis": axis})
    if op in ("GatherElements", "Scatter", "ScatterElements"):
        shape = _dims(rng, r)
        axis = int(rng.integers(-r, r))
        a = axis % r
        idx_shape = list(shape)
        if rng.random() < 0.3:  # indices smaller than data on non-axis dims (ONNX allows it)
            idx_shape = [int(rng.integers(1, s + 1)) if d != a else s for d, s in enumerate(shape)]
        n = shape[a]
        if op == "GatherElements":
            idx_shape[a] = int(rng.integers(1, 4))
            values = rng.integers(0, n, idx_shape)
        else:
            idx_shape[a] = int(rng.integers(1, n + 1))
            # distinct targets along the axis for every other position: no duplicate writes
            keys = rng.random((*tuple(idx_shape[:a]), n, *tuple(idx_shape[a + 1 :])))
            values = np.argsort(keys, axis=a).take(np.arange(idx_shape[a]), axis=a)
        idx = _signed(rng, values, n, negative).astype(index_dtype)
        inputs = {"data": _data(rng, shape, dtype), "indices": idx}
        attrs: dict[str, Any] = {"axis": axis}
        if op != "GatherElements":
            inputs["updates"] = _data(rng, tuple(idx_shape), dtype)
            if opset >= 16 and rng.random() < 0.4:
                attrs["reduction"] = str(rng.choice(["add", "mul"] + (["max", "min"] if opset >= 18 else [])))
        return Case(op, opset, inputs, attrs)
    if op == "GatherND":
        shape = _dims(rng, r)
        b = int(rng.integers(0, min(3, r - 1) + 1)) if opset >= 12 else 0
        k = int(rng.integers(1, r - b + 1))
        lead = _dims(rng, int(rng.integers(0, 3)), 6)
        while len(lead) + b + (r - b - k) > 8:
            lead = lead[:-1]
        idx_shape = shape[:b] + lead + (k,)
        bounds = np.array(shape[b : b + k])
        values = rng.integers(0, bounds, idx_shape)
        idx = _signed(rng, values, bounds, True).astype(np.int64)
        attrs = {"batch_dims": b} if b or (opset >= 12 and rng.random() < 0.3) else {}
        return Case(op, opset, {"data": _data(rng, shape, dtype), "indices": idx}, attrs)
    assert op == "ScatterND"
    shape = _dims(rng, r)
    k = int(rng.integers(1, r + 1))
    slots = math.prod(shape[:k])
    lead = _dims(rng, int(rng.integers(0, 3)), max(1, min(slots, 6)))
    while math.prod(lead) > slots or len(lead) + (r - k) > 8:
        lead = lead[:-1]
    linear = rng.permutation(slots)[: math.prod(lead)]
    values = np.stack(np.unravel_index(linear, shape[:k]), axis=-1).reshape((*lead, k))
    idx = _signed(rng, values, np.array(shape[:k]), True).astype(np.int64)
    upd = _data(rng, lead + shape[k:], dtype)
    attrs = {}
    if opset >= 16 and rng.random() < 0.4:
        attrs["reduction"] = str(rng.choice(["add", "mul"] + (["max", "min"] if opset >= 18 else [])))
    return Case(op, opset, {"data": _data(rng, shape, dtype), "indices": idx, "updates": upd}, attrs)


def sample_cases(seed: int, per_op: int) -> Iterator[Case]:
    rng = np.random.default_rng(seed)
    for op in OPSETS:
        for i in range(per_op):
            rank = 1 + i % 8  # every rank 1-8 for every op
            dtype = DATA_TYPES[(i * 5 + len(op)) % len(DATA_TYPES)]
            yield gen_case(rng, op, rank, dtype)


CASES = list(sample_cases(20261122, 80))


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind == "f":
        assert np.array_equal(actual.view(f"u{expected.itemsize}"), expected.view(f"u{expected.itemsize}"))
    else:
        assert np.array_equal(actual, expected)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{i}" for i, c in enumerate(CASES)])
def test_translate_and_run_matches_onnxruntime(case: Case) -> None:
    reduction = case.attrs.get("reduction", "none")
    # A reduction always falls back: no oracle needed (onnxruntime rejects e.g. bool with min).
    expected = ort_node(case.op, case.inputs, case.attrs, case.opset) if reduction == "none" else None
    ran = 0
    for fl in LEVELS:
        t = case.translate(fl)
        if reduction != "none":
            assert t.status is Status.FALLBACK
            assert t.reason_codes[0] == "SCATTER_REDUCTION_UNSUPPORTED"
            assert t.min_feature_level is None
            continue
        if t.status is not Status.DML:
            assert t.status is Status.FALLBACK, (case, fl, t.reasons)
            continue
        assert t.operator is not None
        check(t.operator, fl)
        result = run_translation(t, list(case.inputs.values()))
        assert expected is not None
        assert_same(result.output, expected)
        ran += 1
    if reduction == "none":
        assert ran >= 1, case


# --- descriptor fields against facts sheet §5 (the DML EP's mapping) -----------------------------------

DML_TYPE = {
    np.float32: DataType.FLOAT32, np.float16: DataType.FLOAT16, np.float64: DataType.FLOAT64,
    np.int8: DataType.INT8, np.int16: DataType.INT16, np.int32: DataType.INT32, np.int64: DataType.INT64,
    np.uint8: DataType.UINT8, np.uint16: DataType.UINT16, np.uint32: DataType.UINT32,
    np.uint64: DataType.UINT64, np.bool_: DataType.UINT8,
}  # fmt: skip
BITS = {DataType.FLOAT64: 64, DataType.INT64: 64, DataType.UINT64: 64, DataType.FLOAT32: 32,
        DataType.INT32: 32, DataType.UINT32: 32, DataType.FLOAT16: 16, DataType.INT16: 16,
        DataType.UINT16: 16, DataType.INT8: 8, DataType.UINT8: 8}  # fmt: skip


def _aligned(shape: tuple[int, ...], d: int) -> tuple[int, ...]:
    return (1,) * (d - len(shape)) + tuple(shape)


def ep_expectation(case: Case) -> tuple[OperatorType, dict[str, tuple[int, ...]], dict[str, int]]:
    """The DML EP's descriptor for the case, from the facts sheet §5 rules alone."""
    data = case.inputs["data"]
    idx = case.inputs["indices"]
    s, i = data.shape, idx.shape
    r, q = len(s), len(i)
    if case.op == "Gather":
        a = case.attrs["axis"] % r
        out = s[:a] + i + s[a + 1 :]
        d = max(r, q, r + q - 1)
        sizes = {"InputTensor": s, "IndicesTensor": i, "OutputTensor": out}
        return (
            OperatorType.GATHER,
            {k: _aligned(v, d) for k, v in sizes.items()},
            {"Axis": a + d - r, "IndexDimensions": q},
        )
    if case.op == "GatherElements":
        sizes = {"InputTensor": s, "IndicesTensor": i, "OutputTensor": i}
        return OperatorType.GATHER_ELEMENTS, sizes, {"Axis": case.attrs["axis"] % r}
    if case.op == "GatherND":
        b = case.attrs.get("batch_dims", 0)
        out = i[:-1] + s[b + i[-1] :]
        d = max(r, q, len(out))
        sizes = {"InputTensor": s, "IndicesTensor": i, "OutputTensor": out}
        return (
            OperatorType.GATHER_ND1,
            {k: _aligned(v, d) for k, v in sizes.items()},
            {"InputDimensionCount": r, "IndicesDimensionCount": q, "BatchDimensionCount": b},
        )
    upd = case.inputs["updates"].shape
    if case.op == "ScatterND":
        d = max(r, q, len(upd))
        sizes = {"InputTensor": s, "IndicesTensor": i, "UpdatesTensor": upd, "OutputTensor": s}
        return (
            OperatorType.SCATTER_ND,
            {k: _aligned(v, d) for k, v in sizes.items()},
            {"InputDimensionCount": r, "IndicesDimensionCount": q},
        )
    d = max(r, 4)
    sizes = {"InputTensor": s, "IndicesTensor": i, "UpdatesTensor": upd, "OutputTensor": s}
    return (
        OperatorType.SCATTER_ELEMENTS,
        {k: _aligned(v, d) for k, v in sizes.items()},
        {"Axis": case.attrs["axis"] % r + d - r},
    )


def _ep_comparable(case: Case) -> bool:
    if case.attrs.get("reduction", "none") != "none":
        return False
    if case.op in ("GatherElements", "Scatter", "ScatterElements"):
        a = case.attrs["axis"] % case.inputs["data"].ndim
        s, i = case.inputs["data"].shape, case.inputs["indices"].shape
        if any(s[d] != i[d] for d in range(len(s)) if d != a):
            return False  # strided window: deliberately not the EP's descriptor
    _, sizes, _ = ep_expectation(case)
    return len(next(iter(sizes.values()))) <= 8


EP_CASES = [c for c in CASES if _ep_comparable(c)]


@pytest.mark.parametrize("fl", [FL.FL_3_0, FL.FL_4_1, FL.FL_5_0], ids=lambda f: f.short)
def test_descriptor_is_the_dml_eps(fl: FeatureLevel) -> None:
    checked = 0
    for case in EP_CASES:
        data_type = DML_TYPE[case.inputs["data"].dtype.type]
        if fl < FL.FL_4_1 and data_type.is_64bit:
            continue  # 64-bit data below 4_1 uses the UINT32-pair plan, not the EP's descriptor
        t = case.translate(fl)
        assert t.status is Status.DML, (case, t.reasons)
        assert t.layout is Layout.EP
        assert t.operator is not None
        op, sizes, uints = ep_expectation(case)
        assert t.operator.operator_type is op, case
        assert t.operator.uints() == uints, case
        index_type = DataType.INT64 if case.inputs["indices"].dtype == np.int64 else DataType.INT32
        for name, tensor in t.operator.tensors().items():
            assert tensor.sizes == sizes[name], (case, name)
            assert tensor.strides is None
            assert int(tensor.flags) == 0
            assert tensor.guaranteed_base_offset_alignment == 0
            expected_type = index_type if name == "IndicesTensor" else data_type
            assert tensor.data_type is expected_type, (case, name)
            nbytes = (math.prod(tensor.sizes) * BITS[expected_type] + 7) // 8
            assert tensor.total_tensor_size_in_bytes == (nbytes + 3) // 4 * 4
        assert t.to_json()["operator"]["type"] == op.dml_name
        checked += 1
    assert checked >= 100


def test_gather_nd_r3_q2_batch1_facts_example() -> None:
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[1], [2]], dtype=np.int64)
    case = Case("GatherND", 13, {"data": data, "indices": idx}, {"batch_dims": 1})
    t = case.translate(FL.FL_5_0)
    assert t.operator is not None
    assert t.operator.operator_type is OperatorType.GATHER_ND1
    # out = indices.shape[:-1] + data.shape[1 + 1:] = (2, 4): D = max(3, 2, 2) = 3
    counts = {"InputDimensionCount": 3, "IndicesDimensionCount": 2, "BatchDimensionCount": 1}
    assert t.operator.uints() == counts
    assert [x.sizes for x in t.operator.tensors().values()] == [(2, 3, 4), (1, 2, 1), (1, 2, 4)]
    assert t.min_feature_level is FL.FL_2_1  # GATHER_ND with the batch folded into the tuples
    assert_same(run_translation(t, [data, idx]).output, ort_node("GatherND", case.inputs, case.attrs, 13))
