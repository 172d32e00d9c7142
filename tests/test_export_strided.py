"""Strided-window exports: GatherElements/ScatterElements whose indices are narrower than the data on a
non-axis dimension become a DirectML tensor with Strides over the data buffer. Every such node must
export, follow DxDispatch's rules (checked on save by tests/conftest.py and again here), replay and
compare as a match, and the replayed values must equal onnxruntime CPU's output for the node."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dxdispatch.compare import compare_export
from dmlshim.dxdispatch.export import export_model

from .dxdispatch_rules import dml_calc_buffer_tensor_size, dxdispatch_rule_violations
from .oracle import make_node_model, ort_run

LEVELS = ("5_0", "3_0", "2_1")
DTYPES = (np.float32, np.float16, np.int64, np.int8)
# (data shape, axis, indices shape): indices narrower than data on at least one non-axis dimension.
SHAPES = [
    ((3, 10), 0, (2, 4)),
    ((3, 10), 1, (2, 3)),
    ((4, 5, 6), 0, (3, 2, 6)),
    ((4, 5, 6), 1, (2, 7, 3)),
    ((4, 5, 6), 2, (4, 1, 9)),
    ((2, 3, 4, 5), 3, (1, 3, 2, 4)),
]
CASES = [
    (op, shape, dtype, level)
    for (op, shape), dtype, level in itertools.product(
        itertools.product(("GatherElements", "ScatterElements"), SHAPES), DTYPES, LEVELS
    )
    # Two dtypes (one 64-bit) at the lower levels keep the family small while covering every op and axis.
    if level == "5_0" or dtype in (np.float32, np.int64)
]


def _values(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), size=shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


def _model(
    op: str, shape: tuple[tuple[int, ...], int, tuple[int, ...]], dtype: type
) -> tuple[Any, dict[str, np.ndarray]]:
    data_shape, axis, idx_shape = shape
    rng = np.random.default_rng(hash((op, data_shape, axis, np.dtype(dtype).str)) & 0xFFFF)
    feeds = {
        "data": _values(rng, dtype, data_shape),
        "indices": rng.integers(-data_shape[axis], data_shape[axis], size=idx_shape, dtype=np.int64),
    }
    if op == "ScatterElements":
        # Distinct targets along the axis, so the result does not depend on which duplicate write wins.
        depth = min(idx_shape[axis], data_shape[axis])
        others = idx_shape[:axis] + idx_shape[axis + 1 :]
        order = np.argsort(rng.random((data_shape[axis], *others)), axis=0)[:depth]
        feeds["indices"] = np.moveaxis(order, 0, axis).astype(np.int64)
        feeds["updates"] = _values(rng, dtype, feeds["indices"].shape)
    return make_node_model(op, feeds, {"axis": axis}, opset=18 if op == "ScatterElements" else 13), feeds


def _contiguous(data_shape: tuple[int, ...], window: list[int]) -> bool:
    """True when the window starting at 0 is one run of the row-major data (a copy, not Strides)."""
    partial = [d for d, (n, w) in enumerate(zip(data_shape, window, strict=True)) if w < n]
    if not partial:
        return True
    first = partial[0]
    return all(w == n for n, w in zip(data_shape[first + 1 :], window[first + 1 :], strict=True)) and all(
        n == 1 for n in data_shape[:first]
    )


def _window(data_shape: tuple[int, ...], axis: int, idx_shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(
        slice(0, n if d == axis else i) for d, (n, i) in enumerate(zip(data_shape, idx_shape, strict=True))
    )


@pytest.mark.parametrize(
    ("op", "shape", "dtype", "level"),
    CASES,
    ids=[f"{c[0]}-{'x'.join(map(str, c[1][0]))}-ax{c[1][1]}-{np.dtype(c[2]).name}-{c[3]}" for c in CASES],
)
def test_strided_window_exports_replays_and_matches_onnxruntime(
    tmp_path: Path, op: str, shape: Any, dtype: type, level: str
) -> None:
    model, feeds = _model(op, shape, dtype)
    (expected_onnx,) = ort_run(model, feeds)
    result = export_model(model, tmp_path / "out", inputs=feeds, feature_level=level)
    assert [e.op_type for e in result.exported] == [op], result.skipped
    node = result.exported[0]
    assert node.matches_onnxruntime
    folder = tmp_path / "out" / node.folder
    doc = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    assert dxdispatch_rule_violations(folder / "model.json") == []
    input_tensor = doc["dispatchables"]["op"]["desc"]["InputTensor"]
    window = [(s.stop or 0) for s in _window(shape[0], shape[1], feeds["indices"].shape)]
    assert ("Strides" in input_tensor) == (not _contiguous(shape[0], window)), input_tensor
    # The input buffer holds exactly the bytes Sizes and Strides address.
    type_name = input_tensor["DataType"].removeprefix("DML_TENSOR_DATA_TYPE_")
    needed = dml_calc_buffer_tensor_size(type_name, input_tensor["Sizes"], input_tensor.get("Strides"))
    assert (np.load(folder / "input.npy").nbytes + 3) & ~3 == needed

    assert main(["replay", str(folder / "model.json"), "--output-path", str(folder), "-q"]) == 0
    assert compare_export(tmp_path / "out").all_match
    replayed = np.load(folder / "dml_output.npy")
    data_shape, axis, _ = shape
    if op == "GatherElements":
        want = expected_onnx
    else:
        want = expected_onnx[_window(data_shape, axis, feeds["indices"].shape)]
    if replayed.dtype != want.dtype:  # 64-bit values as UINT32 pairs below the levels with 64-bit support
        replayed = replayed.view(want.dtype)
    assert replayed.size == want.size
    np.testing.assert_array_equal(replayed.reshape(want.shape), want)
