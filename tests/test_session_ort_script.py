"""A script written for onnxruntime runs unchanged but for ``import dmlshim as ort``, and gives
onnxruntime's results (onnxruntime CPU, single-threaded, is the reference)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "scripts" / "ort_user_script.py"
ORT_IMPORT = "import onnxruntime as ort\n"
DMLSHIM_IMPORT = "import dmlshim as ort\n"


def _run(script: Path, out_dir: Path) -> dict[str, object]:
    out_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider")}
    done = subprocess.run(
        [sys.executable, str(script), str(REPO / "onnx_models"), str(out_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path, dict]:
    tmp = tmp_path_factory.mktemp("ort_script")
    text = SCRIPT.read_text(encoding="utf-8")
    assert text.count(ORT_IMPORT) == 1
    ours = tmp / "dmlshim_script.py"
    ours.write_text(text.replace(ORT_IMPORT, DMLSHIM_IMPORT), encoding="utf-8")
    theirs_dir, ours_dir = tmp / "onnxruntime", tmp / "dmlshim"
    theirs_summary = _run(SCRIPT, theirs_dir)
    ours_summary = _run(ours, ours_dir)
    return theirs_dir, theirs_summary, ours_dir, ours_summary


def test_outputs_equal_onnxruntime(both_runs: tuple[Path, dict, Path, dict]) -> None:
    theirs_dir, _, ours_dir, _ = both_runs
    with np.load(theirs_dir / "outputs.npz") as theirs, np.load(ours_dir / "outputs.npz") as ours:
        assert sorted(theirs.files) == sorted(ours.files)
        for name in theirs.files:
            assert ours[name].dtype == theirs[name].dtype, name
            np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
        assert len(set(theirs["tokens"].tolist())) > 1  # the decode loop really fed tokens back


def test_the_script_ran_on_the_emulated_provider(both_runs: tuple[Path, dict, Path, dict]) -> None:
    _, theirs, _, ours = both_runs
    assert theirs["providers"] == ["CPUExecutionProvider"]  # onnxruntime here has no DirectML
    assert ours["providers"] == ["DmlExecutionProvider", "CPUExecutionProvider"]
    assert ours["available"] == ["DmlExecutionProvider", *theirs["available"]]  # DirectML, then onnxruntime's
    for key in ("producer", "inputs", "beam_inputs"):
        assert ours[key] == theirs[key], key


def test_one_profile_with_emulated_nodes(both_runs: tuple[Path, dict, Path, dict]) -> None:
    _, _, ours_dir, ours = both_runs
    profiles = sorted(ours_dir.glob("decoder_profile*.json"))
    assert [str(p) for p in profiles] == [str(ours["profile"])]
    events = json.loads(profiles[0].read_text(encoding="utf-8"))
    runs = [e for e in events if e["cat"] == "Session" and e["name"] == "model_run"]
    assert len(runs) == 6 + 2  # six decode steps, the IOBinding step, run_with_ort_values
    emulated = {e["args"]["op_name"] for e in events if e["args"].get("emulated_by") == "dmlshim"}
    assert emulated == {"Gather", "ScatterND", "GatherElements"}
    cpu_ops = {e["args"]["op_name"] for e in events if e["cat"] == "Node" and "partition" in e["args"]}
    assert {"MatMul", "Softmax", "TopK"} <= cpu_ops


def test_one_whole_optimized_model(both_runs: tuple[Path, dict, Path, dict]) -> None:
    theirs_dir, _, ours_dir, _ = both_runs
    theirs = onnx.load(str(theirs_dir / "decoder_optimized.onnx"))
    ours = onnx.load(str(ours_dir / "decoder_optimized.onnx"))
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in theirs.graph.node]
    assert [o.name for o in ours.graph.output] == [o.name for o in theirs.graph.output]
    assert len(list(ours_dir.glob("*.onnx"))) == 1
