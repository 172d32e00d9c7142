"""``python -m dmlshim run`` end to end, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from tests.oracle import ort_run
from tests.test_session_models import assert_bitwise, chain_model

REPO = Path(__file__).resolve().parents[1]


def dmlshim(*args: str | Path, cwd: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "provider"), **env_vars)
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", "run", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def write_chain(tmp_path: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    model, feeds = chain_model()
    model_path = tmp_path / "chain.onnx"
    onnx.save(model, model_path)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **feeds)
    return model_path, inputs, feeds


def test_run_prints_summary_and_writes_outputs(tmp_path: Path) -> None:
    model_path, inputs, feeds = write_chain(tmp_path)
    out = tmp_path / "out.npz"
    proc = dmlshim(model_path, "--inputs", inputs, "--output", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "outputs:" in text and "[3,3]" in text and "float32" in text
    assert "gather" in text and "DML_OPERATOR_GATHER" in text and "DML_OPERATOR_SCATTER_ND" in text
    with np.load(out, allow_pickle=False) as data:
        assert list(data.files) == ["y"]
        assert_bitwise([data["y"]], ort_run(onnx.load(model_path), feeds))

    # No overwrite without --overwrite; the file is left as it was.
    before = out.read_bytes()
    proc = dmlshim(model_path, "--inputs", inputs, "--output", out, cwd=tmp_path)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
    assert out.read_bytes() == before
    proc = dmlshim(model_path, "--inputs", inputs, "--output", out, "--overwrite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_run_json(tmp_path: Path) -> None:
    model_path, inputs, _ = write_chain(tmp_path)
    proc = dmlshim(model_path, "--inputs", inputs, "--json", "--feature-level", "3_0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["feature_level"] == "DML_FEATURE_LEVEL_3_0"
    assert doc["outputs"] == [{"name": "y", "shape": [3, 3], "dtype": "float32"}]
    assert [n["placement"] for n in doc["record"]["nodes"]] == ["dml", "dml"]


def test_pickled_inputs_are_refused(tmp_path: Path) -> None:
    model_path, _, feeds = write_chain(tmp_path)
    bad = tmp_path / "pickled.npz"
    np.savez(bad, x=np.array([{"a": 1}], dtype=object), upd=feeds["upd"])
    proc = dmlshim(model_path, "--inputs", bad, cwd=tmp_path)
    assert proc.returncode == 2
    assert "pickl" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_feed_and_engine(tmp_path: Path) -> None:
    model_path, _, feeds = write_chain(tmp_path)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=feeds["x"].astype(np.float64), upd=feeds["upd"])
    proc = dmlshim(model_path, "--inputs", wrong, cwd=tmp_path)
    assert proc.returncode == 2 and "'x'" in proc.stderr
    # no real-DirectML stack in reach (set up on this machine or not): the engine is unavailable
    proc = dmlshim(
        model_path, "--inputs", wrong, "--engine", "directml", cwd=tmp_path, DMLSHIM_CACHE_DIR=str(tmp_path)
    )
    assert proc.returncode == 2 and "DmlExecutionProvider" in proc.stderr
