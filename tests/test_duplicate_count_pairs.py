"""ScatterElements with 64-bit data below FL 4_1 (UINT32 pairs, indices repeated for both halves) reports
each overwritten ONNX element once, as at 4_1 (issue 12: the count was doubled).

The expected count is computed here from the indices alone: writes minus distinct target elements.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dmlshim import InferenceSession
from dmlshim.dxdispatch.export import export_model
from tests.oracle import make_node_model, ort_run

ENGINES = ["partitioned"]
if importlib.util.find_spec("onnxruntime_extensions") is not None:
    ENGINES.append("customop")

INDICES = np.array([[1, 0, 1, 2], [1, 0, 2, 2], [0, 0, 1, 2]], dtype=np.int64)


def _overwritten(indices: np.ndarray, axis: int = 0) -> int:
    """Writes that a later write to the same element overwrites: ONNX ScatterElements along ``axis``."""
    cols = np.broadcast_to(np.arange(indices.shape[1]), indices.shape)
    targets = indices * 10 + cols if axis == 0 else cols * 10 + indices
    return int(targets.size - np.unique(targets).size)


def _feeds(dtype: type) -> dict[str, np.ndarray]:
    data = np.arange(12, dtype=np.int64).reshape(3, 4).astype(dtype)
    updates = (np.arange(12, dtype=np.int64) + 2**40).reshape(3, 4).astype(dtype)
    return {"data": data, "indices": INDICES, "updates": updates}


def test_the_expected_count() -> None:
    # Column by column: [1,1,0] -> 1 overwritten, [0,0,0] -> 2, [1,2,1] -> 1, [2,2,2] -> 2.
    assert _overwritten(INDICES) == 6


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("level", ["3_0", "4_1", "5_0", "2_1"])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.float64, np.int32])
def test_duplicates_counted_once_per_element(engine: str, level: str, dtype: type) -> None:
    feeds = _feeds(dtype)
    model = make_node_model("ScatterElements", feeds, {"axis": 0}, 13)
    session = InferenceSession(model, feature_level=level, engine=engine)
    (got,) = session.run(None, feeds)
    (expected,) = ort_run(model, feeds)
    assert got.tobytes() == expected.tobytes()
    record = session.last_run_record
    assert record is not None
    (node,) = record.nodes
    assert node.placement == "dml", node.reasons
    assert node.duplicate_indices == _overwritten(INDICES)


def test_export_reports_the_onnx_count(tmp_path: Path) -> None:
    feeds = _feeds(np.int64)
    model = make_node_model("ScatterElements", feeds, {"axis": 0}, 13)
    result = export_model(model, tmp_path / "out", inputs=feeds, feature_level="3_0")
    (node,) = result.exported
    assert "duplicate_for_pairs" in " ".join(step for _, steps in node.steps for step in steps)
    assert node.duplicate_indices == _overwritten(INDICES)
