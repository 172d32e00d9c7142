"""validate's two partitioned runs (dmlshim's kernels and the like-for-like reference) share the CPU
segments' onnxruntime sessions, and its whole-model onnxruntime run reads the model file itself; the
verdict is unchanged (outputs equal onnxruntime's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from dmlshim.dml.enums import DEFAULT_FEATURE_LEVEL
from dmlshim.execute.plan.cpu_step import CpuStep
from dmlshim.kernels.options import IndexMode
from dmlshim.validate import validate_model
from dmlshim.validate.references import partitioned_run, whole_model_run
from tests.oracle import ort_run
from tests.test_session_models import chain_model


def test_reference_run_uses_the_segments_of_the_kernel_run() -> None:
    model, feeds = chain_model()
    common = {
        "feature_level": DEFAULT_FEATURE_LEVEL,
        "index_mode": IndexMode.ERROR,
        "level": "disabled",
        "model_path": None,
    }
    ours = partitioned_run(model, feeds, reference=False, **common)  # type: ignore[arg-type]
    ref = partitioned_run(model, feeds, reference=True, segments_from=ours.engine, **common)  # type: ignore[arg-type]
    assert ours.engine is not None and ref.engine is not None
    mine = [s for s in ours.engine._steps if isinstance(s, CpuStep)]
    theirs = [s for s in ref.engine._steps if isinstance(s, CpuStep)]
    assert len(mine) >= 2 and all(a is b for a, b in zip(mine, theirs, strict=True))
    expected = ort_run(model, feeds)
    names = [o.name for o in model.graph.output]
    for name, e in zip(names, expected, strict=True):
        assert np.array_equal(ref.outputs[name], e, equal_nan=True) and np.array_equal(
            ours.outputs[name], e, equal_nan=True
        )


def test_whole_model_run_from_the_file_matches_onnxruntime(tmp_path: Path) -> None:
    model, feeds = chain_model()
    path = tmp_path / "chain.onnx"
    onnx.save_model(model, str(path))
    outputs, error = whole_model_run(model, feeds, "disabled", str(path))
    assert error is None and outputs is not None
    for o, e in zip(model.graph.output, ort_run(model, feeds), strict=True):
        assert np.array_equal(outputs[o.name], e, equal_nan=True)
    report = validate_model(str(path), inputs=feeds)
    assert report.match
