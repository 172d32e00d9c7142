"""Hostile cases for the given scatters of the whole-model check (dmlshim.execute.scatter_given): a scatter
whose output is 512 KiB or more takes onnxruntime's output when that run's indices are in range,
non-negative and distinct. Every case runs a default session and a DMLSHIM_FULL_CHECK=1 session (the
authority for the record) on the same feeds: both outputs must equal onnxruntime CPU's (one thread) bit for
bit, and the records must be equal but for the notes saying what was taken from onnxruntime."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute import steps
from dmlshim.execute.gather_given import NOTE_GATHER_GIVEN
from dmlshim.execute.scatter_given import scatter_output_is_given
from dmlshim.execute.steps import NOTE_UNTOUCHED_GIVEN, overwritten_writes
from tests.oracle import (
    IR_VERSION,
    ZERO_DEPTH_SCATTERND_CRASH,
    ort_crashes_on_zero_depth_scatternd,
    ort_run,
)

TAKEN = frozenset((NOTE_GATHER_GIVEN, NOTE_UNTOUCHED_GIVEN))
H, L, D = 4, 256, 128  # a float32 [H, L, D] output is 512 KiB: the size the check verifies in place
NUMERIC = {
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.INT8,
    TensorProto.INT32,
    TensorProto.INT64,
}


def _one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _model(
    op: str,
    elem: int,
    shapes: Sequence[Sequence[int | str]],
    attrs: Mapping[str, Any] | None = None,
    *,
    opset: int = 18,
    index_elem: int = TensorProto.INT64,
    extra: Sequence[onnx.NodeProto] = (),
    extra_inputs: Sequence[onnx.ValueInfoProto] = (),
    outputs: Sequence[str] = ("present", "total"),
) -> onnx.ModelProto:
    """``data -> Neg (Identity for types Neg refuses) -> scatter -> Identity``: an onnxruntime node before
    the scatter, so that the whole-model check answers; the scatter's output is a graph output and read on."""
    data_shape, idx_shape, upd_shape = shapes
    first = "Neg" if elem in NUMERIC else "Identity"
    nodes = [
        helper.make_node(first, ["data"], ["past"], name="before"),
        helper.make_node(op, ["past", "idx", "upd"], ["present"], name="update", **dict(attrs or {})),
        helper.make_node("Identity", ["present"], ["total"], name="after"),
        *extra,
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [
            helper.make_tensor_value_info("data", elem, list(data_shape)),
            helper.make_tensor_value_info("idx", index_elem, list(idx_shape)),
            helper.make_tensor_value_info("upd", elem, list(upd_shape)),
            *extra_inputs,
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _sessions(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[Any, Any]:
    """A default session and a DMLSHIM_FULL_CHECK=1 session of ``model``."""
    default = dmlshim.InferenceSession(model, sess_options=_one_thread(), **kwargs)
    with monkeypatch.context() as m:
        m.setenv("DMLSHIM_FULL_CHECK", "1")
        full = dmlshim.InferenceSession(model, sess_options=_one_thread(), **kwargs)
    return default, full


def _same(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            assert g.tobytes() == w.tobytes()


def _untaken(record: Any) -> Any:
    nodes = tuple(
        dataclasses.replace(n, notes=tuple(x for x in n.notes if x[0] not in TAKEN)) for n in record.nodes
    )
    return dataclasses.replace(record, nodes=nodes)


def _scatter(session: Any) -> Any:
    (node,) = [n for n in session.last_run_record.nodes if n.name == "update"]
    return node


def _codes(node: Any) -> list[str]:
    return [code for code, _ in node.notes]


def _run(pair: tuple[Any, Any], model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Any:
    """Both sessions on ``feeds``: outputs onnxruntime's bit for bit, the same path, records equal but for
    the taken-from-onnxruntime notes. The default session's scatter record."""
    want = ort_run(model, feeds)
    default, full = pair
    for session in pair:
        _same(session.run(None, dict(feeds)), want)
    assert default.last_run_record.path == full.last_run_record.path == "whole-model check"
    assert _untaken(default.last_run_record) == _untaken(full.last_run_record)
    assert not any(TAKEN & set(_codes(n)) for n in full.last_run_record.nodes)
    return _scatter(default)


def _positions(positions: Sequence[int], dtype: Any = np.int64) -> np.ndarray:
    """ScatterElements indices [H, len(positions), D] along axis 1 (a KV-cache update)."""
    line = np.asarray(positions, dtype)[None, :, None]
    return np.ascontiguousarray(np.broadcast_to(line, (H, len(positions), D)))


def _cache_feeds(positions: Sequence[int], seed: int, length: int = L) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "data": rng.standard_normal((H, length, D)).astype(np.float32),
        "idx": _positions(positions),
        "upd": rng.standard_normal((H, len(positions), D)).astype(np.float32),
    }


# --- the proof itself: the indices decide exactly when the targets are distinct ----------------------


def _targets_by_definition(op: str, data_shape: tuple[int, ...], idx: np.ndarray, axis: int) -> list[Any]:
    """Every write's target as the ONNX definition spells it (negative indices wrapped), one by one."""
    if op == "ScatterND":
        k = idx.shape[-1]
        tuples = idx.reshape(-1, k) if idx.size else np.zeros((int(np.prod(idx.shape[:-1])), k), np.int64)
        return [tuple(int(c) % data_shape[d] for d, c in enumerate(t)) for t in tuples]
    targets = []
    for where in itertools.product(*(range(n) for n in idx.shape)):
        at = list(where)
        at[axis] = int(idx[where]) % data_shape[axis]
        targets.append(tuple(at))
    return targets


@pytest.mark.parametrize("seed", range(40))
def test_given_exactly_when_the_definition_writes_each_place_once(seed: int) -> None:
    """Brute force over small random scatters, many with repeats (across the axis, across other
    dimensions, hidden by negative indices): taken iff every index is in [0, dim) and the definition's
    targets are distinct. A repeat across a non-axis dimension is impossible for ScatterElements: the
    other coordinates of a write are its own position's."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    data_shape = tuple(int(n) for n in rng.integers(1, 4, rank))
    data = np.zeros(data_shape, np.float32)
    for op in ("ScatterElements", "ScatterND"):
        for _ in range(25):
            if op == "ScatterND":
                k = int(rng.integers(0, rank + 1))
                lead = tuple(int(n) for n in rng.integers(0, 3, int(rng.integers(0, 3))))
                idx = (
                    np.stack([rng.integers(-data_shape[d], data_shape[d], lead) for d in range(k)], axis=-1)
                    if k
                    else np.zeros((*lead, 0), np.int64)
                )
                upd = np.zeros(lead + data_shape[k:], np.float32)
                axis = 0
            else:
                axis = int(rng.integers(0, rank))
                shape = [int(rng.integers(0, n + 1)) for n in data_shape]
                shape[axis] = int(rng.integers(0, data_shape[axis] + 2))
                low = -data_shape[axis] if rng.integers(0, 2) else 0
                idx = rng.integers(low, data_shape[axis], shape)
                upd = np.zeros(shape, np.float32)
            idx = idx.astype((np.int32, np.int64)[int(rng.integers(0, 2))])
            targets = _targets_by_definition(op, data_shape, idx, axis)
            expected = bool((idx >= 0).all()) and len(set(targets)) == len(targets)
            attrs = {"axis": axis} if op == "ScatterElements" else {}
            got = scatter_output_is_given(op, attrs, [data, idx, upd], data)
            assert got == expected, (op, data_shape, idx.tolist(), axis)


def test_scatternd_tuples_of_no_coordinates_are_writes_to_one_place() -> None:
    """Regression: indices [n, 0] are n tuples naming the whole data. With n >= 2 that is n writes to one
    place, which the check took (the indices tensor is empty); a single one is a lone write."""
    data = np.zeros((4, 8), np.float32)
    given = scatter_output_is_given
    assert not given(
        "ScatterND", {}, [data, np.zeros((2, 0), np.int64), np.zeros((2, 4, 8), np.float32)], data
    )
    assert not given(
        "ScatterND", {}, [data, np.zeros((3, 2, 0), np.int64), np.zeros((3, 2, 4, 8), np.float32)], data
    )
    assert given("ScatterND", {}, [data, np.zeros((1, 0), np.int64), np.zeros((1, 4, 8), np.float32)], data)
    assert given("ScatterND", {}, [data, np.zeros((0,), np.int64), np.zeros((4, 8), np.float32)], data)
    assert given("ScatterND", {}, [data, np.zeros((0, 0), np.int64), np.zeros((0, 4, 8), np.float32)], data)
    assert given("ScatterND", {}, [data, np.zeros((0, 2), np.int64), np.zeros((0,), np.float32)], data)


def test_overwritten_writes_counts_tuples_of_no_coordinates() -> None:
    """Regression: a CPU-run ScatterND with indices [3, 0] writes the whole data three times, two of them
    overwritten (ONNX: each update replaces the tensor); the count was 0 (and reshaping the empty tuples
    raised once the empty check was passed)."""
    data = np.zeros((4, 8), np.float32)
    assert overwritten_writes("ScatterND", {}, [data, np.zeros((3, 0), np.int64)]) == 2
    assert overwritten_writes("ScatterND", {}, [data, np.zeros((2, 3, 0), np.int64)]) == 5
    assert overwritten_writes("ScatterND", {}, [data, np.zeros((1, 0), np.int64)]) == 0
    assert overwritten_writes("ScatterND", {}, [data, np.zeros((0, 0), np.int64)]) == 0
    assert overwritten_writes("ScatterND", {}, [data, np.zeros((0, 2), np.int64)]) == 0


@pytest.mark.skipif(ort_crashes_on_zero_depth_scatternd(), reason=ZERO_DEPTH_SCATTERND_CRASH)
def test_scatternd_with_no_coordinates_in_a_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """DirectML has no SCATTER_ND of 0-coordinate tuples: the node runs on the CPU in both sessions, and
    the record counts the two overwritten whole-tensor writes."""
    n = 131072
    model = _model("ScatterND", TensorProto.FLOAT, ([n], [3, 0], [3, n]))
    pair = _sessions(model, monkeypatch)
    rng = np.random.default_rng(3)
    feeds = {
        "data": rng.standard_normal(n).astype(np.float32),
        "idx": np.zeros((3, 0), np.int64),
        "upd": rng.standard_normal((3, n)).astype(np.float32),
    }
    node = _run(pair, model, feeds)
    assert node.placement == "onnxruntime-cpu" and node.duplicate_indices == 2 and not node.notes


# --- data types and bits -----------------------------------------------------------------------------

SPECIAL_BITS = {
    TensorProto.FLOAT: (np.uint32, [0x7F800001, 0x7FBFFFFF, 0xFFC00001, 0x80000000, 0x7FC12345, 0x00000001]),
    TensorProto.FLOAT16: (np.uint16, [0x7C01, 0x7D55, 0xFC01, 0x8000, 0x7E01, 0x0001]),
    TensorProto.DOUBLE: (np.uint64, [0x7FF0000000000001, 0xFFF8000000000ABC, 0x8000000000000000]),
}


def _values(elem: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if elem in SPECIAL_BITS:
        bits, specials = SPECIAL_BITS[elem]
        pool = np.concatenate([np.array(specials, bits), rng.integers(0, np.iinfo(bits).max, 64, bits)])
        return rng.choice(pool, shape).view(helper.tensor_dtype_to_np_dtype(elem))
    if elem == TensorProto.BOOL:
        return rng.integers(0, 3, shape).astype(np.uint8).view(np.bool_)  # bytes 2 too
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize(
    "elem",
    [
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.DOUBLE,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.UINT64,
        TensorProto.INT64,
        TensorProto.BOOL,
    ],
    ids=lambda e: helper.tensor_dtype_to_np_dtype(e).name,
)
def test_every_dtype_keeps_its_bits(elem: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN payloads, signalling NaNs, -0.0, denormals, bool bytes other than 0/1, extreme integers: taken
    whole from onnxruntime, bit for bit its output, the record the full check's."""
    rng = np.random.default_rng(elem)
    rows = max(1, (512 * 1024) // (1024 * np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize))
    shape = (rows, 1024)
    elements = _model("ScatterElements", elem, (shape, [rows, 3], [rows, 3]), {"axis": 1})
    nd = _model("ScatterND", elem, (shape, [rows, 2], [rows]))
    for model, feeds in [
        (
            elements,
            {
                "data": _values(elem, shape, rng),
                "idx": np.stack([rng.permutation(1024)[:3] for _ in range(rows)]).astype(np.int64),
                "upd": _values(elem, (rows, 3), rng),
            },
        ),
        (
            nd,
            {
                "data": _values(elem, shape, rng),
                "idx": np.stack([np.arange(rows), rng.integers(0, 1024, rows)], axis=1).astype(np.int64),
                "upd": _values(elem, (rows,), rng),
            },
        ),
    ]:
        pair = _sessions(model, monkeypatch)
        node = _run(pair, model, feeds)
        assert _codes(node) == [NOTE_GATHER_GIVEN] and node.placement == "dml"
        assert node.duplicate_indices == 0 and not node.negative_indices


def test_string_data_is_no_directml_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("ScatterElements", TensorProto.STRING, ([256, 256], [256, 2], [256, 2]), {"axis": 1})
    pair = _sessions(model, monkeypatch)
    feeds = {
        "data": np.array([str(i) for i in range(65536)], dtype=object).reshape(256, 256),
        "idx": np.tile(np.array([3, 9], np.int64), (256, 1)),
        "upd": np.full((256, 2), "x", dtype=object),
    }
    node = _run(pair, model, feeds)
    assert node.placement == "onnxruntime-cpu" and not node.notes


# --- index layouts and types ---------------------------------------------------------------------------


@pytest.mark.parametrize("index_elem", [TensorProto.INT32, TensorProto.INT64], ids=["int32", "int64"])
def test_index_layouts(index_elem: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broadcast (stride 0), Fortran-ordered and strided index feeds: distinct ones taken, ones whose
    repeats hide in the layout verified, with the repeats counted."""
    dtype = helper.tensor_dtype_to_np_dtype(index_elem)
    rows, cols = 512, 512
    rng = np.random.default_rng(11)
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    down = _model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [4, cols], [4, cols]),
        {"axis": 0},
        index_elem=index_elem,
    )
    pair = _sessions(down, monkeypatch)
    upd = rng.standard_normal((4, cols)).astype(np.float32)
    broadcast = np.broadcast_to(np.array([5, 100, 7, 300], dtype)[:, None], (4, cols))
    fortran = np.asfortranarray(np.stack([rng.permutation(rows)[:4] for _ in range(cols)], 1).astype(dtype))
    strided = np.stack([rng.permutation(rows)[:8] for _ in range(cols)], 1).astype(dtype)[::2]
    assert broadcast.strides[1] == 0 and fortran.flags.f_contiguous and not strided.flags.contiguous
    for idx, updates in [(broadcast, upd), (fortran, np.asfortranarray(upd)), (strided, upd[:, ::-1])]:
        node = _run(pair, down, {"data": data, "idx": idx, "upd": updates})
        assert _codes(node) == [NOTE_GATHER_GIVEN] and node.duplicate_indices == 0
    # One row broadcast down two rows: each column writes its row twice.
    two = _model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [2, cols], [2, cols]),
        {"axis": 0},
        index_elem=index_elem,
    )
    node = _run(
        _sessions(two, monkeypatch),
        two,
        {"data": data, "idx": np.broadcast_to(np.array([9], dtype), (2, cols)), "upd": upd[:2]},
    )
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == cols
    # A transposed (Fortran) view whose two columns are equal: a repeat along axis 1 in every row.
    across = _model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [rows, 2], [rows, 2]),
        {"axis": 1},
        index_elem=index_elem,
    )
    twice = np.stack([np.arange(rows) % cols] * 2, 0).astype(dtype).T
    assert twice.flags.f_contiguous
    node = _run(
        _sessions(across, monkeypatch),
        across,
        {"data": data, "idx": twice, "upd": rng.standard_normal((rows, 2)).astype(np.float32)},
    )
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == rows


# --- ScatterND shapes -----------------------------------------------------------------------------------


def test_scatternd_tuple_depths_and_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(12)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    # k = rank: element tuples, one repeated.
    full = _model("ScatterND", TensorProto.FLOAT, ([H, L, D], [50, 3], [50]))
    flat = rng.choice(H * L * D, 50, replace=False)
    idx = np.stack(np.unravel_index(flat, (H, L, D)), axis=1).astype(np.int64)
    rep = idx.copy()
    rep[7] = rep[30]
    pair = _sessions(full, monkeypatch)
    upd = rng.standard_normal(50).astype(np.float32)
    assert _codes(_run(pair, full, {"data": data, "idx": idx, "upd": upd})) == [NOTE_GATHER_GIVEN]
    node = _run(pair, full, {"data": data, "idx": rep, "upd": upd})
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == 1
    # Tuples (h, l) and (h', l') that one linear stride would confuse: (0, 255) vs (1, -1) is negative,
    # (1, 0) vs (0, 256) out of range; only the exact pair repeats.
    rows = _model("ScatterND", TensorProto.FLOAT, ([H, L, D], [2, 3, 2], [2, 3, D]))
    pair = _sessions(rows, monkeypatch)
    tuples = np.array([[[0, 255], [1, 0], [2, 1]], [[0, 2], [1, 2], [3, 255]]], np.int64)
    upd2 = rng.standard_normal((2, 3, D)).astype(np.float32)
    assert _codes(_run(pair, rows, {"data": data, "idx": tuples, "upd": upd2})) == [NOTE_GATHER_GIVEN]
    again = tuples.copy()
    again[1, 2] = again[0, 0]
    node = _run(pair, rows, {"data": data, "idx": again, "upd": upd2})
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == 1
    wrapped = tuples.copy()
    wrapped[1, 2] = [0, -1]  # (0, 255) again, through a negative index
    node = _run(pair, rows, {"data": data, "idx": wrapped, "upd": upd2})
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.negative_indices and node.duplicate_indices == 1
    # k = 1: whole [L, D] slabs.
    slabs = _model("ScatterND", TensorProto.FLOAT, ([H, L, D], [2, 1], [2, L, D]))
    pair = _sessions(slabs, monkeypatch)
    upd3 = rng.standard_normal((2, L, D)).astype(np.float32)
    assert _codes(_run(pair, slabs, {"data": data, "idx": np.array([[0], [3]]), "upd": upd3})) == [
        NOTE_GATHER_GIVEN
    ]
    node = _run(pair, slabs, {"data": data, "idx": np.array([[2], [2]]), "upd": upd3})
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == 1


def test_empty_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    """No write at all: DirectML has no operator for empty tensors, the node runs on the CPU in both."""
    rng = np.random.default_rng(13)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    for model, idx, upd in [
        (
            _model("ScatterND", TensorProto.FLOAT, ([H, L, D], [0, 2], [0, D])),
            np.zeros((0, 2), np.int64),
            np.zeros((0, D), np.float32),
        ),
        (
            _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 0, D], [H, 0, D]), {"axis": 1}),
            np.zeros((H, 0, D), np.int64),
            np.zeros((H, 0, D), np.float32),
        ),
    ]:
        node = _run(_sessions(model, monkeypatch), model, {"data": data, "idx": idx, "upd": upd})
        assert node.placement == "onnxruntime-cpu" and node.duplicate_indices == 0 and not node.notes


# --- attributes and schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "opset", "reduction"),
    [
        ("ScatterElements", 16, "add"),
        ("ScatterElements", 16, "mul"),
        ("ScatterElements", 18, "max"),
        ("ScatterElements", 18, "min"),
        ("ScatterND", 16, "add"),
        ("ScatterND", 16, "mul"),
        ("ScatterND", 18, "max"),
        ("ScatterND", 18, "min"),
    ],
)
def test_reductions_are_never_taken(
    op: str, opset: int, reduction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(14)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    if op == "ScatterND":
        model = _model(
            op, TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]), {"reduction": reduction}, opset=opset
        )
        feeds = {
            "data": data,
            "idx": np.array([[0, 1], [1, 1], [2, 5], [3, 7]], np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
    else:
        model = _model(
            op,
            TensorProto.FLOAT,
            ([H, L, D], [H, 1, D], [H, 1, D]),
            {"axis": 1, "reduction": reduction},
            opset=opset,
        )
        feeds = {
            "data": data,
            "idx": _positions([17]),
            "upd": rng.standard_normal((H, 1, D)).astype(np.float32),
        }
    default, full = _sessions(model, monkeypatch)
    want = ort_run(model, feeds)
    for _ in range(2):
        for session in (default, full):
            _same(session.run(None, dict(feeds)), want)
        assert _untaken(default.last_run_record) == _untaken(full.last_run_record)
        assert NOTE_GATHER_GIVEN not in _codes(_scatter(default))
    assert not scatter_output_is_given(
        op,
        {"axis": 1, "reduction": reduction.encode()},
        [feeds["data"], feeds["idx"], feeds["upd"]],
        feeds["data"],
    )


@pytest.mark.parametrize(
    ("op", "opset"),
    [
        ("Scatter", 9),
        ("Scatter", 10),
        ("ScatterElements", 11),
        ("ScatterElements", 13),
        ("ScatterElements", 16),
        ("ScatterND", 11),
        ("ScatterND", 13),
        ("ScatterND", 16),
    ],
)
def test_every_schema(op: str, opset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opset 9/10 Scatter and each ScatterElements/ScatterND schema: taken when distinct, verified (and
    the repeats counted) when not, taken again after."""
    rng = np.random.default_rng(opset)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    if op == "ScatterND":
        model = _model(op, TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]), opset=opset)
        distinct = {
            "data": data,
            "idx": np.array([[0, 1], [1, 1], [2, 5], [3, 7]], np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
        repeated = dict(distinct, idx=np.array([[0, 1], [0, 1], [2, 5], [3, 7]], np.int64))
        repeats = 1
    else:
        model = _model(op, TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1}, opset=opset)
        distinct = {
            "data": data,
            "idx": _positions([17, 3]),
            "upd": rng.standard_normal((H, 2, D)).astype(np.float32),
        }
        repeated = dict(distinct, idx=_positions([3, 3]))
        repeats = H * D
    pair = _sessions(model, monkeypatch)
    assert _codes(_run(pair, model, distinct)) == [NOTE_GATHER_GIVEN]
    node = _run(pair, model, repeated)
    assert NOTE_GATHER_GIVEN not in _codes(node) and node.duplicate_indices == repeats
    assert _codes(_run(pair, model, distinct)) == [NOTE_GATHER_GIVEN]


# --- sessions: consumers, feature levels, index modes, run sequences ----------------------------------


def test_output_read_by_gathers_and_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scatter's output is a graph output and read by a GatherElements and a Gather (emulated too),
    one of them read on by onnxruntime."""
    extra = [
        helper.make_node("GatherElements", ["present", "gidx"], ["g1"], name="gather_elements", axis=1),
        helper.make_node("Gather", ["present", "g0"], ["g2"], name="gather", axis=1),
        helper.make_node("Neg", ["g1"], ["g1n"], name="neg_after"),
    ]
    inputs = [
        helper.make_tensor_value_info("gidx", TensorProto.INT64, [H, L, D]),
        helper.make_tensor_value_info("g0", TensorProto.INT64, [L]),
    ]
    model = _model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([H, L, D], [H, 2, D], [H, 2, D]),
        {"axis": 1},
        extra=extra,
        extra_inputs=inputs,
        outputs=("present", "total", "g1n", "g2"),
    )
    pair = _sessions(model, monkeypatch)
    for seed, positions in enumerate([[3, 4]] * 5 + [[4, 4], [1, 2]]):
        rng = np.random.default_rng(seed)
        feeds = dict(
            _cache_feeds(positions, seed), gidx=rng.integers(0, L, (H, L, D)), g0=rng.integers(0, L, L)
        )
        node = _run(pair, model, feeds)
        assert (NOTE_GATHER_GIVEN in _codes(node)) == (positions[0] != positions[1])


@pytest.mark.parametrize("feature_level", ["1_0", "2_1", "3_0", "6_4"])
@pytest.mark.parametrize("index_mode", ["error", "clamp"])
def test_feature_levels_and_index_modes(
    feature_level: str, index_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where DirectML lacks negative indices (before 3.0) and with clamping: distinct non-negative runs
    taken; negative and repeated runs verified, and recorded as the full check records them."""
    kwargs = {"feature_level": feature_level, "index_mode": index_mode}
    rng = np.random.default_rng(15)
    for index_elem in (TensorProto.INT32, TensorProto.INT64):
        dtype = helper.tensor_dtype_to_np_dtype(index_elem)
        model = _model(
            "ScatterElements",
            TensorProto.FLOAT,
            ([H, L, D], [H, 2, D], [H, 2, D]),
            {"axis": 1},
            index_elem=index_elem,
        )
        pair = _sessions(model, monkeypatch, **kwargs)
        for positions in ([3, 4], [-1, 4], [4, 4], [-252, 4], [3, 4]):
            feeds = dict(_cache_feeds(positions, 1), idx=_positions(positions, dtype))
            node = _run(pair, model, feeds)
            clean = min(positions) >= 0 and len(set(positions)) == 2
            assert (NOTE_GATHER_GIVEN in _codes(node)) == clean
            assert node.negative_indices == (min(positions) < 0)
    nd = _model("ScatterND", TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]))
    pair = _sessions(nd, monkeypatch, **kwargs)
    for tuples in (
        [[0, 1], [1, 1], [2, 1], [3, 1]],
        [[0, -1], [1, 1], [2, 1], [3, 1]],
        [[0, 1], [0, 1], [2, 1], [3, 1]],
        [[0, 1], [1, 1], [2, 1], [3, 1]],
    ):
        feeds = {
            "data": rng.standard_normal((H, L, D)).astype(np.float32),
            "idx": np.array(tuples, np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
        node = _run(pair, nd, feeds)
        if node.placement == "dml":
            assert (NOTE_GATHER_GIVEN in _codes(node)) == (tuples[0] == [0, 1] and tuples[1] == [1, 1])


def test_runs_alternating_between_clean_repeated_negative_and_new_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Distinct then repeated then negative then distinct, more repeated runs than the proof runs, new
    cache lengths with wrapped repeats, and a run under the verified size: every run's record the full
    check's, and the untouched elements taken only after the proof runs of the same shapes."""
    model = _model(
        "ScatterElements", TensorProto.FLOAT, ([H, "len", D], [H, "t", D], [H, "t", D]), {"axis": 1}
    )
    pair = _sessions(model, monkeypatch)
    runs: list[tuple[list[int], int, list[str]]] = [
        ([1, 2], L, [NOTE_GATHER_GIVEN]),
        ([5, 5], L, []),
        ([-1, 3], L, []),
        ([7, 8], L, [NOTE_GATHER_GIVEN]),
        ([5, 5], L, []),
        ([5, 5], L, [NOTE_UNTOUCHED_GIVEN]),  # the 3 proof runs of these shapes are done
        ([6, 6], L, [NOTE_UNTOUCHED_GIVEN]),
        ([9, 10], 300, [NOTE_GATHER_GIVEN]),
        ([-300, 0], 300, []),  # a repeat through a negative index: new shapes prove again
        ([4, 4], 300, []),
        ([299, 0], 300, [NOTE_GATHER_GIVEN]),
        ([0], 100, []),  # 200 KiB: computed and compared
    ]
    for seed, (positions, length, notes) in enumerate(runs):
        node = _run(pair, model, _cache_feeds(positions, seed, length))
        assert _codes(node) == notes, (positions, length)
        assert node.duplicate_indices == (
            H * D if len(set(np.array(positions) % length)) < len(positions) else 0
        )


def test_full_check_never_takes_and_always_runs_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = steps.verify_translation

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(steps, "verify_translation", counting)
    model = _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 1, D], [H, 1, D]), {"axis": 1})
    default, full = _sessions(model, monkeypatch)
    for seed in range(steps.PROVE_RUNS + 2):
        feeds = _cache_feeds([seed + 1], seed)
        want = ort_run(model, feeds)
        before = len(calls)
        _same(default.run(None, dict(feeds)), want)
        assert len(calls) == before and _codes(_scatter(default)) == [NOTE_GATHER_GIVEN]
        _same(full.run(None, dict(feeds)), want)
        assert len(calls) == before + 1 and _scatter(full).notes == ()
        assert full.last_run_record.path == "whole-model check"


def test_validate_verifies_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.validate.verdict import validate_model

    taken: list[bool] = []
    verified: list[int] = []
    real_given, real_verify = steps.scatter_output_is_given, steps.verify_translation

    def given(*args: Any) -> bool:
        taken.append(real_given(*args))
        return taken[-1]

    def verify(*args: Any, **kwargs: Any) -> Any:
        verified.append(1)
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(steps, "scatter_output_is_given", given)
    monkeypatch.setattr(steps, "verify_translation", verify)
    model = _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1})
    report = validate_model(model, inputs=_cache_feeds([3, 4], 0))
    assert report.match
    assert verified and not any(taken)


@pytest.mark.parametrize("engine", ["cpu", "customop"])
def test_other_engines_are_unaffected(engine: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model = _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1})
    session = dmlshim.InferenceSession(model, sess_options=_one_thread(), engine=engine)
    for seed in range(steps.PROVE_RUNS + 1):
        feeds = _cache_feeds([seed, seed + 1], seed)
        _same(session.run(None, dict(feeds)), ort_run(model, feeds))
        node = _scatter(session)
        assert session.last_run_record.path == "" and node.notes == ()
        assert node.placement == ("onnxruntime-cpu" if engine == "cpu" else "dml")


def test_runs_alternating_with_the_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without onnxruntime's fusions a session alternates between the partitioned steps and the check on
    its first runs, then keeps the faster (for the full check, which proves every run, that can be the
    partitions): whichever answers, each run's node records are the full check's."""
    so = _one_thread()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1})
    default = dmlshim.InferenceSession(model, sess_options=so)
    with monkeypatch.context() as m:
        m.setenv("DMLSHIM_FULL_CHECK", "1")
        full = dmlshim.InferenceSession(model, sess_options=so)
    paths = set()
    for seed in range(10):
        positions = [5, 5] if seed % 3 == 0 else [3, 4]
        feeds = _cache_feeds(positions, seed)
        want = ort_run(model, feeds)
        for session in (default, full):
            _same(session.run(None, dict(feeds)), want)
        paths.add(default.last_run_record.path)
        assert _untaken(default.last_run_record).nodes == _untaken(full.last_run_record).nodes
        node = _scatter(default)
        taken = NOTE_GATHER_GIVEN in _codes(node)
        assert taken == (positions == [3, 4] and default.last_run_record.path == "whole-model check")
    assert paths == {"partitioned", "whole-model check"}


def test_io_binding_with_an_ortvalue_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Indices bound as an OrtValue and outputs bound to CPU memory: taken when distinct, as with run."""
    model = _model("ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 2, D], [H, 2, D]), {"axis": 1})
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    for seed, positions in enumerate([[6, 6], [3, 4], [6, 6], [3, 4]]):
        feeds = _cache_feeds(positions, seed)
        binding = session.io_binding()
        binding.bind_cpu_input("data", feeds["data"])
        binding.bind_ortvalue_input("idx", ort.OrtValue.ortvalue_from_numpy(feeds["idx"]))
        binding.bind_cpu_input("upd", feeds["upd"])
        binding.bind_output("present")
        binding.bind_output("total")
        session.run_with_iobinding(binding)
        _same(binding.copy_outputs_to_cpu(), ort_run(model, feeds))
        node = _scatter(session)
        assert session.last_run_record.path == "whole-model check"
        assert (NOTE_GATHER_GIVEN in _codes(node)) == (positions == [3, 4])
        assert node.duplicate_indices == (H * D if positions == [6, 6] else 0)


def test_indices_made_by_an_emulated_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scatter's indices are a Gather's output (a constant, non-negative gather index): each line along
    the axis a permutation, taken; one repeat planted in one line, verified and counted."""
    nodes = [
        helper.make_node("Neg", ["data"], ["past"], name="before"),
        helper.make_node("Gather", ["choices", "which"], ["idx"], name="pick", axis=0),
        helper.make_node("ScatterElements", ["past", "idx", "upd"], ["present"], name="update", axis=1),
        helper.make_node("Identity", ["present"], ["total"], name="after"),
    ]
    graph = helper.make_graph(
        nodes,
        "picked",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [H, L, D]),
            helper.make_tensor_value_info("choices", TensorProto.INT64, [2, H, L, D]),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, [H, L, D]),
        ],
        [onnx.ValueInfoProto(name="present"), onnx.ValueInfoProto(name="total")],
        initializer=[onnx.numpy_helper.from_array(np.array(1, np.int64), "which")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    pair = _sessions(model, monkeypatch)
    for seed, repeat in enumerate([False, True, False, False, True, False]):
        rng = np.random.default_rng(seed)
        lines = np.stack([rng.permutation(L) for _ in range(H * D)]).reshape(H, D, L).transpose(0, 2, 1)
        choices = np.stack([np.zeros_like(lines), lines]).astype(np.int64)
        if repeat:
            choices[1, 2, 1, 9] = choices[1, 2, 0, 9]
        feeds = {
            "data": rng.standard_normal((H, L, D)).astype(np.float32),
            "choices": choices,
            "upd": rng.standard_normal((H, L, D)).astype(np.float32),
        }
        node = _run(pair, model, feeds)
        assert (NOTE_GATHER_GIVEN in _codes(node)) == (not repeat)
        assert node.duplicate_indices == int(repeat)


def test_bool_bytes_other_than_one_are_copied_as_onnxruntime_copies_them() -> None:
    """A bool feed whose bytes are not 0/1 (a uint8 array viewed as bool): onnxruntime copies the bytes,
    and so does DirectML, which moves bool as UINT8 (found by h47: the kernels' output was converted back
    with astype(bool), which writes 1)."""
    model = _model("ScatterElements", TensorProto.BOOL, ([64, 64], [64, 2], [64, 2]), {"axis": 1})
    rng = np.random.default_rng(16)
    feeds = {
        "data": rng.integers(0, 3, (64, 64)).astype(np.uint8).view(np.bool_),
        "idx": np.tile(np.array([3, 9], np.int64), (64, 1)),
        "upd": np.full((64, 2), 2, np.uint8).view(np.bool_),
    }
    session = dmlshim.InferenceSession(model, sess_options=_one_thread())
    _same(session.run(None, dict(feeds)), ort_run(model, feeds))


@pytest.mark.parametrize(
    ("op", "index_elem", "opset"),
    [
        ("ScatterElements", TensorProto.UINT32, 18),
        ("ScatterElements", TensorProto.UINT64, 13),
        ("Scatter", TensorProto.UINT64, 10),
        ("ScatterND", TensorProto.INT32, 18),
    ],
)
def test_index_types_onnx_refuses_are_refused(op: str, index_elem: int, opset: int) -> None:
    """Unsigned indices (and int32 for ScatterND) are not ONNX: onnxruntime refuses the model, so does
    dmlshim, naming the node and the type, before any run could take an output."""
    nd = op == "ScatterND"
    shapes = ([H, L, D], [4, 2] if nd else [H, 2, D], [4, D] if nd else [H, 2, D])
    model = _model(
        op, TensorProto.FLOAT, shapes, {} if nd else {"axis": 1}, opset=opset, index_elem=index_elem
    )
    with pytest.raises(Exception, match="INVALID_GRAPH"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(
        dmlshim.BadModelError,
        match=f"node 'update', op {op}.*{helper.tensor_dtype_to_string(index_elem).split('.')[-1].lower()}",
    ):
        dmlshim.InferenceSession(model)
