"""Differential tests: random gather/scatter models through dmlshim.InferenceSession vs onnxruntime CPU.

Every case is drawn from a generator seeded by ``(DMLSHIM_DIFF_SEED, case number)``, so one case can be
re-run alone. The reference is onnxruntime's CPU provider, single-threaded (tests/oracle.py); dmlshim's
own onnxruntime sessions are single-threaded too, because onnxruntime's ScatterND with a reduction loses
updates on duplicate indices with more than one thread.

Covered: Gather, GatherElements, GatherND (batch_dims 0-3), Scatter (opset 10), ScatterElements and
ScatterND (opsets 11/13/16/18, every reduction the opset has), data ranks 1-8, every data type DirectML can
hold (float16/32/64, int8-64, uint8-64, bool), int32 and int64 indices, negative axes and negative
indices, scatter without reduction on distinct indices (ONNX leaves repeats undefined) and with a
reduction on repeated ones (those nodes must fall back to the CPU and still match), at
DML_FEATURE_LEVEL_5_0 and lower levels, as one-node models and as small chains
(Transpose -> op -> Reshape, and op -> Gather).

CI runs ``DMLSHIM_DIFF_CASES`` cases (default 150). Locally, for thousands::

    DMLSHIM_DIFF_CASES=5000 pytest tests/test_differential.py -q
    DMLSHIM_DIFF_SEED=7 DMLSHIM_DIFF_CASES=2000 pytest tests/test_differential.py -q -x

A failing case prints its seed, number and a one-line command that re-runs it alone
(``DMLSHIM_DIFF_ONLY=<n>``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import dmlshim
from tests.oracle import IR_VERSION

CASES = int(os.environ.get("DMLSHIM_DIFF_CASES", "150"))
SEED = int(os.environ.get("DMLSHIM_DIFF_SEED", "20261122"))
ONLY = os.environ.get("DMLSHIM_DIFF_ONLY")

DATA_TYPES = (
    np.float32, np.float16, np.float64,
    np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64,
    np.bool_,
)  # fmt: skip
INDEX_TYPES = (np.int32, np.int64)
LEVELS = ("5_0", "3_0", "2_1")
OPS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")
REDUCTIONS = {
    11: ("none",),
    13: ("none",),
    16: ("none", "add", "mul"),
    18: ("none", "add", "mul", "max", "min"),
}
MAX_RANK = 8


@dataclass
class Case:
    """One random case: enough to rebuild the model and feeds and to describe them in a failure."""

    number: int
    op: str
    opset: int
    level: str
    attrs: dict[str, Any]
    feeds: dict[str, np.ndarray]
    node_inputs: list[str]
    shape: str = "single"  # single | transpose_reshape | then_gather
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        feeds = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.feeds.items())
        return (
            f"case {self.number} (DMLSHIM_DIFF_SEED={SEED}): {self.op} opset {self.opset} {self.attrs} "
            f"at FL {self.level}, model {self.shape}; feeds {feeds}\n"
            f"re-run alone: DMLSHIM_DIFF_SEED={SEED} DMLSHIM_DIFF_ONLY={self.number} "
            f"pytest tests/test_differential.py -q"
        )


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 4).astype(dt)
    info = np.iinfo(dt)
    low, high = max(info.min, -50), min(info.max, 50)
    return rng.integers(low, high, size=shape, endpoint=True).astype(dt)


def _dims(rng: np.random.Generator, rank: int, high: int = 3) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, high + 1, size=rank))


def _negate_some(rng: np.random.Generator, idx: np.ndarray, bound: np.ndarray | int) -> np.ndarray:
    """Write some indices as their negative equivalent (same element, counted from the end)."""
    flip = rng.random(idx.shape) < 0.4
    return np.where(flip, idx - bound, idx)


def _gather(rng: np.random.Generator) -> tuple[int, tuple[int, ...], np.ndarray]:
    r = int(rng.integers(1, MAX_RANK + 1))
    q = int(rng.integers(0, min(3, MAX_RANK - r + 1) + 1))
    data_shape = _dims(rng, r)
    axis = int(rng.integers(-r, r))
    d = data_shape[axis]
    return axis, data_shape, _negate_some(rng, rng.integers(0, d, size=_dims(rng, q)), d)


def _elements_indices(
    rng: np.random.Generator, data_shape: tuple[int, ...], axis: int, unique: bool
) -> np.ndarray:
    r = len(data_shape)
    a = axis % r
    shape = [int(rng.integers(1, s + 1)) for s in data_shape]  # ONNX lets indices be smaller off-axis
    d = data_shape[a]
    if unique:
        shape[a] = int(rng.integers(1, d + 1))
        moved = [s for i, s in enumerate(shape) if i != a]
        lines = [rng.permutation(d)[: shape[a]] for _ in range(math.prod(moved))]
        idx = np.moveaxis(np.asarray(lines, dtype=np.int64).reshape((*moved, shape[a])), -1, a)
    else:
        shape[a] = int(rng.integers(1, 4))
        idx = rng.integers(0, d, size=shape)
    return np.asarray(idx)


def _build(rng: np.random.Generator, number: int) -> Case:
    op = OPS[int(rng.integers(len(OPS)))]
    level = LEVELS[int(rng.choice(len(LEVELS), p=[0.5, 0.25, 0.25]))]
    dtype = DATA_TYPES[int(rng.integers(len(DATA_TYPES)))]
    itype = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
    attrs: dict[str, Any] = {}
    opset = 13
    data_shape: tuple[int, ...]
    if op == "Gather":
        axis, data_shape, idx = _gather(rng)
        attrs = {"axis": axis}
        feeds = {"data": _values(rng, data_shape, dtype), "indices": idx.astype(itype)}
    elif op == "GatherElements":
        r = int(rng.integers(1, MAX_RANK + 1))
        data_shape = _dims(rng, r)
        axis = int(rng.integers(-r, r))
        idx = _elements_indices(rng, data_shape, axis, unique=False)
        idx = _negate_some(rng, idx, data_shape[axis])
        attrs = {"axis": axis}
        feeds = {"data": _values(rng, data_shape, dtype), "indices": idx.astype(itype)}
    elif op == "GatherND":
        itype = np.int64  # ONNX GatherND takes int64 indices only
        r = int(rng.integers(1, MAX_RANK + 1))
        b = int(rng.integers(0, min(3, r - 1) + 1))
        data_shape = _dims(rng, r)
        k = int(rng.integers(1, r - b + 1))
        extra_q = int(rng.integers(0, 3))
        out_rank = b + extra_q + (r - b - k)
        while out_rank > MAX_RANK or out_rank == 0:
            extra_q = max(0, extra_q - 1) if out_rank > MAX_RANK else extra_q + 1
            out_rank = b + extra_q + (r - b - k)
        lead = (*data_shape[:b], *_dims(rng, extra_q))
        bounds = np.asarray(data_shape[b : b + k])
        idx = (rng.random((*lead, k)) * bounds).astype(np.int64)
        idx = _negate_some(rng, idx, bounds)
        attrs = {"batch_dims": b} if b or rng.random() < 0.5 else {}
        feeds = {"data": _values(rng, data_shape, dtype), "indices": idx.astype(itype)}
    elif op in ("Scatter", "ScatterElements"):
        r = int(rng.integers(1, MAX_RANK + 1))
        data_shape = _dims(rng, r)
        axis = int(rng.integers(-r, r))
        if op == "Scatter":
            opset, reduction = 10, "none"
        else:
            opset = int(rng.choice([11, 13, 16, 18]))
            choices = REDUCTIONS[opset]
            reduction = choices[int(rng.integers(len(choices)))]
        idx = _elements_indices(rng, data_shape, axis, unique=reduction == "none")
        if op != "Scatter":  # Scatter-9 requires indices in [0, n)
            idx = _negate_some(rng, idx, data_shape[axis])
        attrs = {"axis": axis}
        if reduction != "none" or (op == "ScatterElements" and rng.random() < 0.3 and opset >= 16):
            attrs["reduction"] = reduction
        feeds = {
            "data": _values(rng, data_shape, dtype),
            "indices": idx.astype(itype),
            "updates": _values(rng, idx.shape, dtype),
        }
    else:  # ScatterND
        itype = np.int64
        opset = int(rng.choice([11, 13, 16, 18]))
        choices = REDUCTIONS[opset]
        reduction = choices[int(rng.integers(len(choices)))]
        r = int(rng.integers(1, MAX_RANK + 1))
        data_shape = _dims(rng, r)
        k = int(rng.integers(1, r + 1))
        lead_rank = int(rng.integers(0, min(2, MAX_RANK - (r - k)) + 1))
        lead = _dims(rng, lead_rank)
        targets = math.prod(data_shape[:k])
        count = math.prod(lead)
        if reduction == "none" and count > targets:
            lead, count = (targets,), targets
        flat = (
            rng.permutation(targets)[:count] if reduction == "none" else rng.integers(0, targets, size=count)
        )
        tuples = np.stack(np.unravel_index(flat, data_shape[:k]), axis=-1).reshape((*lead, k))
        tuples = _negate_some(rng, tuples, np.asarray(data_shape[:k]))
        attrs = {"reduction": reduction} if reduction != "none" else {}
        feeds = {
            "data": _values(rng, data_shape, dtype),
            "indices": tuples.astype(itype),
            "updates": _values(rng, (*lead, *data_shape[k:]), dtype),
        }
    shape = str(rng.choice(["single", "single", "transpose_reshape", "then_gather"]))
    extra: dict[str, Any] = {}
    if shape == "then_gather":
        extra["idx2_len"] = int(rng.integers(1, 4))
    return Case(number, op, opset, level, attrs, feeds, list(feeds), shape, extra)


def _model(case: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = dict(case.feeds)
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in feeds.items()
    ]
    nodes = []
    inputs = list(case.node_inputs)
    if case.shape == "transpose_reshape":
        # data -> Transpose(identity permutation twice = reversed, reversed back) -> op -> Reshape(-1)
        rank = feeds["data"].ndim
        perm = list(reversed(range(rank)))
        nodes.append(helper.make_node("Transpose", ["data"], ["data_t"], perm=perm))
        nodes.append(helper.make_node("Transpose", ["data_t"], ["data_tt"], perm=perm))
        inputs[0] = "data_tt"
    nodes.append(helper.make_node(case.op, inputs, ["y"], name="under_test", **case.attrs))
    out = "y"
    opset = case.opset
    if case.shape == "transpose_reshape":
        shape_init = helper.make_tensor("flat", onnx.TensorProto.INT64, [1], [-1])
        nodes.append(helper.make_node("Reshape", ["y", "flat"], ["z"]))
        out = "z"
        initializers = [shape_init]
    elif case.shape == "then_gather":
        # A second gather over the first output's leading dimension, fed by a graph input.
        ref_out = ort_session(_single(case, opset)).run(None, case.feeds)[0]
        n0 = ref_out.shape[0] if ref_out.ndim else 0
        initializers = []
        if n0 >= 1:
            rng = np.random.default_rng([SEED, case.number, 1])
            feeds["idx2"] = rng.integers(-n0, n0, size=case.extra["idx2_len"]).astype(np.int64)
            graph_inputs.append(
                helper.make_tensor_value_info("idx2", onnx.TensorProto.INT64, [len(feeds["idx2"])])
            )
            nodes.append(helper.make_node("Gather", ["y", "idx2"], ["z"], name="second_gather", axis=0))
            out = "z"
    else:
        initializers = []
    graph = helper.make_graph(
        nodes, "differential", graph_inputs, [onnx.ValueInfoProto(name=out)], initializers
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    return model, feeds


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """tests/oracle.py's reference session (CPU, one thread), quiet: the draw loop expects rejections."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _single(case: Case, opset: int) -> onnx.ModelProto:
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in case.feeds.items()
    ]
    node = helper.make_node(case.op, list(case.feeds), ["y"], **case.attrs)
    graph = helper.make_graph([node], "single", graph_inputs, [onnx.ValueInfoProto(name="y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


_STATE = ort.capi.onnxruntime_pybind11_state
_ORT_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError, ValueError, _STATE.Fail, _STATE.NotImplemented, _STATE.InvalidGraph, _STATE.InvalidArgument,
    _STATE.RuntimeException,
)  # fmt: skip


def draw_case(number: int) -> tuple[Case, onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    """Case ``number``: drawn until onnxruntime CPU accepts the op/type combination (it does not
    implement every type for every op); acceptance depends on onnxruntime alone, never on dmlshim."""
    rng = np.random.default_rng([SEED, number])
    for _ in range(20):
        case = _build(rng, number)
        try:
            model, feeds = _model(case)
            expected = ort_session(model).run(None, feeds)
        except _ORT_ERRORS:
            continue
        return case, model, feeds, expected
    raise AssertionError(f"case {number}: onnxruntime rejected 20 draws in a row (seed {SEED})")


def _single_threaded() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


NUMBERS = [int(ONLY)] if ONLY else list(range(CASES))


@pytest.mark.parametrize("number", NUMBERS)
def test_random_case_matches_onnxruntime(number: int) -> None:
    case, model, feeds, expected = draw_case(number)
    where = case.describe()
    session = dmlshim.InferenceSession(model, feature_level=case.level, sess_options=_single_threaded())
    try:
        actual = session.run(None, feeds)
    except dmlshim.DmlShimError as exc:
        pytest.fail(f"dmlshim raised {type(exc).__name__}: {exc}\n{where}")
    assert len(actual) == len(expected), where
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}\n{where}"
        assert got.shape == want.shape, f"shape {got.shape} != {want.shape}\n{where}"
        # Gather/scatter move values, and reductions fall back to onnxruntime's own kernel: exact.
        same = (got == want) | ((got != got) & (want != want))
        if not bool(np.all(same)):
            bad = tuple(int(i) for i in np.argwhere(~same)[0])
            pytest.fail(f"differs at {list(bad)}: dmlshim {got[bad]!r}, onnxruntime {want[bad]!r}\n{where}")
    record = session.last_run_record
    assert record is not None, where
    under_test = [n for n in record.nodes if n.name == "under_test"]
    assert len(under_test) == 1, f"run record lacks the node under test: {record.nodes}\n{where}"
    node = under_test[0]
    reduction = case.attrs.get("reduction", "none")
    if reduction != "none":
        # DirectML has no scatter reduction: running one from a descriptor would be a lie.
        assert node.placement == "onnxruntime-cpu", f"reduction {reduction} ran as {node.operator}\n{where}"
        assert node.reasons, where
    elif node.placement != "dml":
        # A node may leave DirectML only with a stated reason.
        assert node.reasons, f"{node} fell back without a reason\n{where}"


def test_generator_is_reproducible() -> None:
    a, _, feeds_a, _ = draw_case(3)
    b, _, feeds_b, _ = draw_case(3)
    assert a.describe() == b.describe()
    for k in feeds_a:
        np.testing.assert_array_equal(feeds_a[k], feeds_b[k])


def test_generator_covers_the_space() -> None:
    """The drawn cases reach every op, data type, rank 1-8, batch_dims 0-3, every reduction, both levels."""
    n = max(CASES, 150)
    cases = [draw_case(i)[0] for i in range(n)]
    assert {c.op for c in cases} == set(OPS)
    assert {c.feeds["data"].dtype for c in cases} == {np.dtype(t) for t in DATA_TYPES}
    assert {c.feeds["data"].ndim for c in cases} == set(range(1, MAX_RANK + 1))
    assert {c.attrs.get("batch_dims", 0) for c in cases if c.op == "GatherND"} == {0, 1, 2, 3}
    assert {c.attrs.get("reduction", "none") for c in cases} == {"none", "add", "mul", "max", "min"}
    assert {c.level for c in cases} == set(LEVELS)
    assert any(c.attrs.get("axis", 0) < 0 for c in cases)
    assert any(int(c.feeds["indices"].min(initial=0)) < 0 for c in cases)
    assert {c.feeds["indices"].dtype for c in cases} == {np.dtype(np.int32), np.dtype(np.int64)}
