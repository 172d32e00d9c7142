"""Hostile cases for the given scatters of the whole-model check (dmlshim.execute.proofs.scatter_given): a
scatter whose output is 512 KiB or more takes onnxruntime's output when that run's indices are in range,
non-negative and distinct. Every case runs a default session and a DMLSHIM_FULL_CHECK=1 session (the
authority for the record) on the same feeds: both outputs must equal onnxruntime CPU's (one thread) bit for
bit, and the records must be equal but for the notes saying what was taken from onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from dmlshim.execute.plan.step_given import CPU_GIVEN_MESSAGE
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from dmlshim.execute.proofs.scatter_given import overwritten_writes, scatter_output_is_given
from dmlshim.execute.record import NodeRecord
from tests.oracle import (
    ort_run,
)
from tests.scatter_given_cases import (
    D,
    H,
    L,
    index_array,
    note_codes,
    run_pair,
    same_bits_as,
    scatter_model,
    scatter_node,
    session_pair,
    targets_by_definition,
    untaken,
)


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
            targets = targets_by_definition(op, data_shape, idx, axis)
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


def test_scatternd_with_no_coordinates_in_a_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """DirectML has no SCATTER_ND of 0-coordinate tuples: the node runs on the CPU in both sessions, and
    the record counts the two overwritten whole-tensor writes."""
    n = 131072
    model = scatter_model("ScatterND", TensorProto.FLOAT, ([n], [3, 0], [3, n]))
    pair = session_pair(model, monkeypatch)
    rng = np.random.default_rng(3)
    feeds = {
        "data": rng.standard_normal(n).astype(np.float32),
        "idx": np.zeros((3, 0), np.int64),
        "upd": rng.standard_normal((3, n)).astype(np.float32),
    }
    node = run_pair(pair, model, feeds)
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
    elements = scatter_model("ScatterElements", elem, (shape, [rows, 3], [rows, 3]), {"axis": 1})
    nd = scatter_model("ScatterND", elem, (shape, [rows, 2], [rows]))
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
        pair = session_pair(model, monkeypatch)
        node = run_pair(pair, model, feeds)
        assert note_codes(node) == [NOTE_GATHER_GIVEN] and node.placement == "dml"
        assert node.duplicate_indices == 0 and not node.negative_indices


def _cpu_given_notes_only(node: NodeRecord) -> bool:
    """A node on the CPU notes at most that the whole-model check took its session's output on the proof
    of the indices (:data:`dmlshim.execute.plan.step_given.CPU_GIVEN_MESSAGE`)."""
    return all(text == CPU_GIVEN_MESSAGE for _, text in node.notes)


def test_string_data_is_no_directml_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    model = scatter_model(
        "ScatterElements", TensorProto.STRING, ([256, 256], [256, 2], [256, 2]), {"axis": 1}
    )
    pair = session_pair(model, monkeypatch)
    feeds = {
        "data": np.array([str(i) for i in range(65536)], dtype=object).reshape(256, 256),
        "idx": np.tile(np.array([3, 9], np.int64), (256, 1)),
        "upd": np.full((256, 2), "x", dtype=object),
    }
    node = run_pair(pair, model, feeds)
    # on the CPU in both; the check takes its session's output on the proof of the indices (issue 36)
    assert node.placement == "onnxruntime-cpu" and _cpu_given_notes_only(node)


# --- index layouts and types ---------------------------------------------------------------------------


@pytest.mark.parametrize("index_elem", [TensorProto.INT32, TensorProto.INT64], ids=["int32", "int64"])
def test_index_layouts(index_elem: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broadcast (stride 0), Fortran-ordered and strided index feeds: distinct ones taken, ones whose
    repeats hide in the layout verified, with the repeats counted."""
    dtype = helper.tensor_dtype_to_np_dtype(index_elem)
    rows, cols = 512, 512
    rng = np.random.default_rng(11)
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    down = scatter_model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [4, cols], [4, cols]),
        {"axis": 0},
        index_elem=index_elem,
    )
    pair = session_pair(down, monkeypatch)
    upd = rng.standard_normal((4, cols)).astype(np.float32)
    broadcast = np.broadcast_to(np.array([5, 100, 7, 300], dtype)[:, None], (4, cols))
    fortran = np.asfortranarray(np.stack([rng.permutation(rows)[:4] for _ in range(cols)], 1).astype(dtype))
    strided = np.stack([rng.permutation(rows)[:8] for _ in range(cols)], 1).astype(dtype)[::2]
    assert broadcast.strides[1] == 0 and fortran.flags.f_contiguous and not strided.flags.contiguous
    for idx, updates in [(broadcast, upd), (fortran, np.asfortranarray(upd)), (strided, upd[:, ::-1])]:
        node = run_pair(pair, down, {"data": data, "idx": idx, "upd": updates})
        assert note_codes(node) == [NOTE_GATHER_GIVEN] and node.duplicate_indices == 0
    # One row broadcast down two rows: each column writes its row twice.
    two = scatter_model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [2, cols], [2, cols]),
        {"axis": 0},
        index_elem=index_elem,
    )
    node = run_pair(
        session_pair(two, monkeypatch),
        two,
        {"data": data, "idx": np.broadcast_to(np.array([9], dtype), (2, cols)), "upd": upd[:2]},
    )
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == cols
    # A transposed (Fortran) view whose two columns are equal: a repeat along axis 1 in every row.
    across = scatter_model(
        "ScatterElements",
        TensorProto.FLOAT,
        ([rows, cols], [rows, 2], [rows, 2]),
        {"axis": 1},
        index_elem=index_elem,
    )
    twice = np.stack([np.arange(rows) % cols] * 2, 0).astype(dtype).T
    assert twice.flags.f_contiguous
    node = run_pair(
        session_pair(across, monkeypatch),
        across,
        {"data": data, "idx": twice, "upd": rng.standard_normal((rows, 2)).astype(np.float32)},
    )
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == rows


# --- ScatterND shapes -----------------------------------------------------------------------------------


def test_scatternd_tuple_depths_and_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(12)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    # k = rank: element tuples, one repeated.
    full = scatter_model("ScatterND", TensorProto.FLOAT, ([H, L, D], [50, 3], [50]))
    flat = rng.choice(H * L * D, 50, replace=False)
    idx = np.stack(np.unravel_index(flat, (H, L, D)), axis=1).astype(np.int64)
    rep = idx.copy()
    rep[7] = rep[30]
    pair = session_pair(full, monkeypatch)
    upd = rng.standard_normal(50).astype(np.float32)
    assert note_codes(run_pair(pair, full, {"data": data, "idx": idx, "upd": upd})) == [NOTE_GATHER_GIVEN]
    node = run_pair(pair, full, {"data": data, "idx": rep, "upd": upd})
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == 1
    # Tuples (h, l) and (h', l') that one linear stride would confuse: (0, 255) vs (1, -1) is negative,
    # (1, 0) vs (0, 256) out of range; only the exact pair repeats.
    rows = scatter_model("ScatterND", TensorProto.FLOAT, ([H, L, D], [2, 3, 2], [2, 3, D]))
    pair = session_pair(rows, monkeypatch)
    tuples = np.array([[[0, 255], [1, 0], [2, 1]], [[0, 2], [1, 2], [3, 255]]], np.int64)
    upd2 = rng.standard_normal((2, 3, D)).astype(np.float32)
    assert note_codes(run_pair(pair, rows, {"data": data, "idx": tuples, "upd": upd2})) == [NOTE_GATHER_GIVEN]
    again = tuples.copy()
    again[1, 2] = again[0, 0]
    node = run_pair(pair, rows, {"data": data, "idx": again, "upd": upd2})
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == 1
    wrapped = tuples.copy()
    wrapped[1, 2] = [0, -1]  # (0, 255) again, through a negative index
    node = run_pair(pair, rows, {"data": data, "idx": wrapped, "upd": upd2})
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.negative_indices and node.duplicate_indices == 1
    # k = 1: whole [L, D] slabs.
    slabs = scatter_model("ScatterND", TensorProto.FLOAT, ([H, L, D], [2, 1], [2, L, D]))
    pair = session_pair(slabs, monkeypatch)
    upd3 = rng.standard_normal((2, L, D)).astype(np.float32)
    assert note_codes(run_pair(pair, slabs, {"data": data, "idx": np.array([[0], [3]]), "upd": upd3})) == [
        NOTE_GATHER_GIVEN
    ]
    node = run_pair(pair, slabs, {"data": data, "idx": np.array([[2], [2]]), "upd": upd3})
    assert NOTE_GATHER_GIVEN not in note_codes(node) and node.duplicate_indices == 1


def test_empty_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    """No write at all: DirectML has no operator for empty tensors, the node runs on the CPU in both."""
    rng = np.random.default_rng(13)
    data = rng.standard_normal((H, L, D)).astype(np.float32)
    for model, idx, upd in [
        (
            scatter_model("ScatterND", TensorProto.FLOAT, ([H, L, D], [0, 2], [0, D])),
            np.zeros((0, 2), np.int64),
            np.zeros((0, D), np.float32),
        ),
        (
            scatter_model(
                "ScatterElements", TensorProto.FLOAT, ([H, L, D], [H, 0, D], [H, 0, D]), {"axis": 1}
            ),
            np.zeros((H, 0, D), np.int64),
            np.zeros((H, 0, D), np.float32),
        ),
    ]:
        node = run_pair(session_pair(model, monkeypatch), model, {"data": data, "idx": idx, "upd": upd})
        assert node.placement == "onnxruntime-cpu" and node.duplicate_indices == 0
        assert _cpu_given_notes_only(node)  # the check session's output, on the proof of no write


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
        model = scatter_model(
            op, TensorProto.FLOAT, ([H, L, D], [4, 2], [4, D]), {"reduction": reduction}, opset=opset
        )
        feeds = {
            "data": data,
            "idx": np.array([[0, 1], [1, 1], [2, 5], [3, 7]], np.int64),
            "upd": rng.standard_normal((4, D)).astype(np.float32),
        }
    else:
        model = scatter_model(
            op,
            TensorProto.FLOAT,
            ([H, L, D], [H, 1, D], [H, 1, D]),
            {"axis": 1, "reduction": reduction},
            opset=opset,
        )
        feeds = {
            "data": data,
            "idx": index_array([17]),
            "upd": rng.standard_normal((H, 1, D)).astype(np.float32),
        }
    default, full = session_pair(model, monkeypatch)
    want = ort_run(model, feeds)
    for _ in range(2):
        for session in (default, full):
            same_bits_as(session.run(None, dict(feeds)), want)
        assert untaken(default.last_run_record) == untaken(full.last_run_record)
        assert NOTE_GATHER_GIVEN not in note_codes(scatter_node(default))
    assert not scatter_output_is_given(
        op,
        {"axis": 1, "reduction": reduction.encode()},
        [feeds["data"], feeds["idx"], feeds["upd"]],
        feeds["data"],
    )
