"""Indices: out of range for every op (positive and negative, first and last position, session and CLI),
float index types in DirectML descriptors, duplicate scatter indices, empty tensors and rank above 8."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from dmlshim import IndexOutOfRangeError, InferenceSession, InvalidDescriptorError
from dmlshim.dml import BufferTensorDesc, DataType, FeatureLevel, GatherDesc, ScatterNdDesc
from dmlshim.dml.validate import validate
from dmlshim.kernels import execute
from tests.fuzz_settings import assert_cli_error, one_node_model, opset_for, run_cli
from tests.oracle import ort_run

DATA = np.arange(12, dtype=np.float32).reshape(3, 4)

# op -> (attrs, valid indices of the case, updates or None, size of the dimension the indices address)
CASES: dict[str, tuple[dict[str, Any], np.ndarray, np.ndarray | None, int]] = {
    "Gather": ({"axis": 1}, np.array([[0, 1, 2], [3, 2, 1]]), None, 4),
    "GatherElements": ({"axis": 0}, np.array([[0, 1, 2, 0], [2, 1, 0, 1]]), None, 3),
    "GatherND": ({}, np.array([[0, 1], [2, 3]]), None, 3),
    "Scatter": ({"axis": 1}, np.array([[0, 1, 2], [3, 2, 1]]), np.ones((2, 3), np.float32), 4),
    "ScatterElements": ({"axis": 0}, np.array([[0, 1, 2, 0], [2, 1, 0, 1]]), np.ones((2, 4), np.float32), 3),
    "ScatterND": ({}, np.array([[0], [2]]), np.ones((2, 4), np.float32), 3),
}


def _feeds(indices: np.ndarray, updates: np.ndarray | None) -> dict[str, np.ndarray]:
    feeds = {"data": DATA, "indices": indices}
    if updates is not None:
        feeds["updates"] = updates
    return feeds


def _model(op: str, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    return one_node_model(op, feeds, CASES[op][0], opset_for(op), name=f"{op.lower()}_node")


def _bad_indices(op: str, where: str, value: int) -> np.ndarray:
    indices = CASES[op][1].copy()
    flat = indices.reshape(-1)
    # For GatherND the first component of the first/last tuple addresses dimension 0 (size 3).
    if op == "GatherND":
        flat[0 if where == "first" else flat.size - 2] = value
    else:
        flat[0 if where == "first" else flat.size - 1] = value
    return indices


def _out_of_range_values(size: int) -> dict[str, int]:
    return {"past-end": size, "before-start": -size - 1, "huge": 2**40, "very-negative": -(2**40)}


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("kind", ["past-end", "before-start", "huge", "very-negative"])
@pytest.mark.parametrize("op", list(CASES))
def test_out_of_range_session(op: str, kind: str, where: str) -> None:
    _, _, updates, size = CASES[op]
    value = _out_of_range_values(size)[kind]
    feeds = _feeds(_bad_indices(op, where, value), updates)
    model = _model(op, feeds)
    with pytest.raises(Exception) as ort_error:  # the oracle agrees that this is an error
        ort_run(model, feeds)
    assert "Traceback" not in str(ort_error.value)
    with pytest.raises(IndexOutOfRangeError) as info:
        InferenceSession(model).run(None, feeds)
    err = info.value
    text = str(err)
    assert err.node == f"{op.lower()}_node"
    assert err.op_type == op
    assert err.tensor == "indices"
    assert err.value == value
    assert str(value) in text
    assert f"[{-size}, {size - 1}]" in text, text  # the valid range
    position = getattr(err, "position", None)
    assert position is not None
    flat_pos = int(np.ravel_multi_index(position, feeds["indices"].shape))
    expected_flat = 0 if where == "first" else feeds["indices"].size - (2 if op == "GatherND" else 1)
    assert flat_pos == expected_flat
    assert f"indices{list(position)}" in text


@pytest.mark.parametrize("op", list(CASES))
def test_out_of_range_cli_run(op: str, tmp_path: Path) -> None:
    _, _, updates, size = CASES[op]
    feeds = _feeds(_bad_indices(op, "last", size), updates)
    path = tmp_path / "m.onnx"
    onnx.save(_model(op, feeds), path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    r = run_cli("run", path, "--inputs", inputs)
    assert_cli_error(r.code, r.err, f"'{op.lower()}_node'", f"op {op}", str(size), f"[{-size}, {size - 1}]")
    assert not r.out


@pytest.mark.parametrize("op", list(CASES))
def test_out_of_range_clamp_mode_is_defined(op: str) -> None:
    _, _, updates, size = CASES[op]
    feeds = _feeds(_bad_indices(op, "first", size + 5), updates)
    out = InferenceSession(_model(op, feeds), index_mode="clamp").run(None, feeds)[0]
    clamped = _bad_indices(op, "first", size - 1)
    want = ort_run(_model(op, _feeds(clamped, updates)), _feeds(clamped, updates))[0]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("index_type", [DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64])
def test_float_indices_descriptor(index_type: DataType) -> None:
    data = BufferTensorDesc(DataType.FLOAT32, (1, 1, 3, 4))
    indices = BufferTensorDesc(index_type, (1, 1, 1, 2))
    out = BufferTensorDesc(DataType.FLOAT32, (1, 1, 3, 2))
    gather = GatherDesc(data, indices, out, axis=3, index_dimensions=1)
    rules = {(v.rule, v.field) for v in validate(gather, FeatureLevel.FL_5_0)}
    assert ("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType") in rules
    bound = {
        "InputTensor": DATA.reshape(1, 1, 3, 4),
        "IndicesTensor": np.zeros((1, 1, 1, 2), index_type.numpy_dtype),
    }
    with pytest.raises(InvalidDescriptorError) as info:
        execute(gather, bound)
    assert "IndicesTensor" in str(info.value)

    snd = ScatterNdDesc(
        BufferTensorDesc(DataType.FLOAT32, (3, 4)),
        BufferTensorDesc(index_type, (2, 1)),
        BufferTensorDesc(DataType.FLOAT32, (2, 4)),
        BufferTensorDesc(DataType.FLOAT32, (3, 4)),
        input_dimension_count=2,
        indices_dimension_count=2,
    )
    assert any(v.rule == "DATA_TYPE_UNSUPPORTED" for v in validate(snd, FeatureLevel.FL_5_0))
    with pytest.raises(InvalidDescriptorError):
        execute(
            snd,
            {
                "InputTensor": DATA,
                "IndicesTensor": np.zeros((2, 1), index_type.numpy_dtype),
                "UpdatesTensor": np.ones((2, 4), np.float32),
            },
        )


# Duplicate scatter indices: the last write in index order wins, as onnxruntime CPU single-threaded.
DUPLICATES: dict[str, tuple[str, dict[str, Any], int, np.ndarray, np.ndarray]] = {
    "scatter_elements": (
        "ScatterElements",
        {"axis": 0},
        13,
        np.array([[1, 1, 1, 1], [1, 0, 1, 2]]),
        np.arange(8, dtype=np.float32).reshape(2, 4) + 100,
    ),
    "scatter_elements_add": (
        "ScatterElements",
        {"axis": 1, "reduction": "add"},
        16,
        np.array([[1, 1, 1], [0, 0, 3], [2, 2, 2]]),
        np.arange(9, dtype=np.float32).reshape(3, 3) + 100,
    ),
    "scatter_opset10": (
        "Scatter",
        {"axis": 1},
        10,
        np.array([[3, 3], [0, 0], [1, 2]]),
        np.arange(6, dtype=np.float32).reshape(3, 2) + 100,
    ),
    "scatter_nd": (
        "ScatterND",
        {},
        13,
        np.array([[1], [1], [0], [1]]),
        np.arange(16, dtype=np.float32).reshape(4, 4) + 100,
    ),
    "scatter_nd_mul": (
        "ScatterND",
        {"reduction": "mul"},
        16,
        np.array([[2, 1], [2, 1], [0, 0]]),
        np.array([2.0, 3.0, 5.0], np.float32),
    ),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_duplicate_scatter_indices(case: str, tmp_path: Path) -> None:
    op, attrs, opset, indices, updates = DUPLICATES[case]
    feeds = {"data": DATA, "indices": indices, "updates": updates}
    model = one_node_model(op, feeds, attrs, opset, name="dup")
    want = ort_run(model, feeds)[0]
    session = InferenceSession(model)
    first = session.run(None, feeds)[0]
    np.testing.assert_array_equal(first, want)
    record = session.last_run_record
    assert record is not None
    (node,) = record.nodes
    # With a reduction every write counts (nothing is overwritten); without, overwritten writes are reported.
    assert (node.duplicate_indices > 0) == ("reduction" not in attrs)
    for _ in range(3):  # deterministic
        assert np.array_equal(session.run(None, feeds)[0], first)
    path = tmp_path / "dup.onnx"
    onnx.save(model, path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    r = run_cli("run", path, "--inputs", inputs, "--json")
    assert r.code == 0, r.err
    assert '"duplicate_indices": ' + str(node.duplicate_indices) in r.out


# Zero-size dimensions: DirectML forbids size 0, the runtime must still give ONNX's answer.
EMPTY: dict[str, tuple[str, dict[str, Any], int, dict[str, np.ndarray]]] = {
    "gather_empty_indices": ("Gather", {"axis": 0}, 13, {"data": DATA, "indices": np.zeros((0,), np.int64)}),
    "gather_empty_data": (
        "Gather",
        {"axis": 1},
        13,
        {"data": np.zeros((0, 4), np.float32), "indices": np.array([1, 3])},
    ),
    "gather_empty_2d_indices": (
        "Gather",
        {"axis": 1},
        13,
        {"data": DATA, "indices": np.zeros((2, 0), np.int64)},
    ),
    "gather_elements_empty": (
        "GatherElements",
        {"axis": 1},
        13,
        {"data": DATA, "indices": np.zeros((3, 0), np.int64)},
    ),
    "gather_elements_empty_data": (
        "GatherElements",
        {"axis": 0},
        13,
        {"data": np.zeros((3, 0), np.float32), "indices": np.zeros((2, 0), np.int64)},
    ),
    "gather_nd_empty": ("GatherND", {}, 13, {"data": DATA, "indices": np.zeros((0, 2), np.int64)}),
    "gather_nd_empty_slices": (
        "GatherND",
        {},
        13,
        {"data": np.zeros((3, 0), np.float32), "indices": np.array([[1], [2]])},
    ),
    "scatter_opset10_empty": (
        "Scatter",
        {"axis": 0},
        10,
        {"data": DATA, "indices": np.zeros((0, 4), np.int64), "updates": np.zeros((0, 4), np.float32)},
    ),
    "scatter_elements_empty": (
        "ScatterElements",
        {"axis": 1},
        13,
        {"data": DATA, "indices": np.zeros((3, 0), np.int64), "updates": np.zeros((3, 0), np.float32)},
    ),
    "scatter_elements_empty_data": (
        "ScatterElements",
        {"axis": 0},
        13,
        {
            "data": np.zeros((0, 4), np.float32),
            "indices": np.zeros((0, 4), np.int64),
            "updates": np.zeros((0, 4), np.float32),
        },
    ),
    "scatter_nd_empty": (
        "ScatterND",
        {},
        13,
        {"data": DATA, "indices": np.zeros((0, 1), np.int64), "updates": np.zeros((0, 4), np.float32)},
    ),
    "scatter_nd_empty_data": (
        "ScatterND",
        {},
        13,
        {
            "data": np.zeros((3, 0), np.float32),
            "indices": np.array([[1], [0]]),
            "updates": np.zeros((2, 0), np.float32),
        },
    ),
}


@pytest.mark.parametrize("case", list(EMPTY))
def test_empty_tensors_match_onnxruntime(case: str) -> None:
    op, attrs, opset, feeds = EMPTY[case]
    model = one_node_model(op, feeds, attrs, opset, name="empty")
    want = ort_run(model, feeds)[0]
    session = InferenceSession(model)
    got = session.run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    record = session.last_run_record
    assert record is not None
    (node,) = record.nodes
    # DirectML has no size-0 tensors: such a node must not claim to have run as a DirectML operator.
    assert node.placement != "dml" or want.size > 0


RANK9 = (1, 2, 1, 2, 1, 1, 2, 1, 2)


def _rank9_case(op: str) -> tuple[dict[str, Any], int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    data = rng.standard_normal(RANK9).astype(np.float32)
    if op == "Gather":
        return {"axis": 8}, 13, {"data": data, "indices": np.array([1, 0, -1])}
    if op == "GatherElements":
        return {"axis": 3}, 13, {"data": data, "indices": rng.integers(0, 2, RANK9)}
    if op == "GatherND":
        return {}, 13, {"data": data, "indices": np.array([[0, 1, 0, 1], [0, 0, 0, 0]])}
    if op in ("Scatter", "ScatterElements"):
        idx = np.zeros(RANK9, np.int64)
        return (
            {"axis": 1},
            opset_for(op),
            {"data": data, "indices": idx, "updates": np.ones(RANK9, np.float32)},
        )
    upd = np.ones((1, *RANK9[2:]), np.float32)
    return {}, 13, {"data": data, "indices": np.array([[0, 1]]), "updates": upd}


def test_duplicates_reported_when_the_node_falls_back() -> None:
    # Rank 9: no DirectML operator, the node runs on onnxruntime; the duplicates must still be reported.
    data = np.zeros(RANK9, np.float32)
    updates = np.arange(2 * 4, dtype=np.float32).reshape((2, 1, 1, 1, 1, 1, 2, 1, 2)) + 1
    indices = np.zeros(updates.shape, np.int64)  # both rows of axis 1 write row 0
    nd_indices = np.array([[0, 1], [0, 1], [0, 0]])
    nd_updates = np.ones((3, *RANK9[2:]), np.float32)
    cases = [
        ("ScatterElements", {"axis": 0}, 13, {"data": data, "indices": indices, "updates": updates}, 4),
        ("ScatterND", {}, 13, {"data": data, "indices": nd_indices, "updates": nd_updates}, 1),
    ]
    for op, attrs, opset, feeds, overwritten in cases:
        model = one_node_model(op, feeds, attrs, opset, name="dup9")
        session = InferenceSession(model)
        np.testing.assert_array_equal(session.run(None, feeds)[0], ort_run(model, feeds)[0])
        record = session.last_run_record
        assert record is not None
        (node,) = record.nodes
        assert node.placement != "dml"
        assert node.duplicate_indices == overwritten, (op, node)


@pytest.mark.parametrize("op", list(CASES))
def test_rank_above_eight_falls_back_correctly(op: str) -> None:
    attrs, opset, feeds = _rank9_case(op)
    model = one_node_model(op, feeds, attrs, opset, name="rank9")
    want = ort_run(model, feeds)[0]
    session = InferenceSession(model)
    got = session.run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    record = session.last_run_record
    assert record is not None
    (node,) = record.nodes
    assert node.placement != "dml"
    assert "RANK_TOO_LARGE" in {code for code, _ in node.reasons}
