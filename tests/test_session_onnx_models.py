"""Every shipped model in onnx_models/ through dmlshim.InferenceSession, bit for bit against
onnxruntime CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.oracle import ort_session
from tests.test_session_models import assert_bitwise, session

MODELS = sorted((Path(__file__).resolve().parents[1] / "onnx_models").glob("*.onnx"))


@pytest.mark.skipif(not MODELS, reason="onnx_models/ holds no models yet")
@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_shipped_model_matches_onnxruntime(path: Path) -> None:
    sample = path.with_suffix(".npz")
    if not sample.exists():
        pytest.skip(f"no sample inputs {sample.name}")
    with np.load(sample, allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    sess = session(str(path))
    got = sess.run(None, feeds)
    assert_bitwise(got, ort_session(str(path)).run(None, feeds))
    record = sess.last_run_record
    assert record is not None and record.engine == "partitioned"
    for node in record.nodes:
        assert node.placement in ("dml", "onnxruntime-cpu")
        if node.placement == "dml":
            assert node.operator and node.operator.startswith("DML_OPERATOR_")
        else:
            assert node.reasons, f"{node.name} ran on the CPU without a reason"
