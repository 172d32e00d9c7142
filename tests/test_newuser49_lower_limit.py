"""A new user's memory limit below the model's size (newuser-49): `lower` read an inline model whole.

(Since files-50 ``lower`` reads no weight into memory: it lowers both forms under such a limit.)

With ``DMLSHIM_MEMORY_LIMIT`` below a model's size, ``lower`` refused the model when its weights were in
external data ("the external data of 31 initializer(s) would need 442.00 MiB ..., more than the memory
limit"), but read the same weights held inline whole, parsed them and peaked at 3.4 times the limit (a
Qwen3-shaped 463 MB export under a 300 MB limit: 1.57 GB). It now refuses the file before reading it, as
docs/performance.md says of models read whole; the commands that give the weights to onnxruntime (run,
validate, inspect) load the model as before. An inputs file above the limit is refused in words (its
arrays and bytes), no longer as a uint8 tensor of the total's shape. Expected values come from onnxruntime
CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import TooLargeError
from dmlshim.translate import load_model

ROWS, COLS = 4096, 64  # a 1 MiB embedding table, inline


def _model(path: Path, external: bool) -> None:
    table = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="embed", axis=0)],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, COLS])],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
    else:
        onnx.save(model, str(path))


def _cli(*args: str, limit: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DMLSHIM_MEMORY_LIMIT": str(limit)}
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("external", [False, True])
def test_lower_under_a_limit_below_the_model_copies_its_weights(tmp_path: Path, external: bool) -> None:
    """``lower`` refused both forms under the limit (the inline one before reading it whole); it now reads
    the model without its weights and copies them from the source's files a chunk at a time, so the
    limit is kept and the model is lowered: the lowered file gives onnxruntime's values for the source."""
    pytest.importorskip("onnxruntime_extensions")
    from dmlshim.execute.engines.custom_op import session_options_with_custom_ops

    model = tmp_path / "m.onnx"
    _model(model, external)
    out = tmp_path / "lowered.onnx"
    proc = _cli("lower", str(model), "-o", str(out), limit=500_000)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "lowered.onnx.data").exists() == external
    feeds = {"ids": np.array([[0, 5, ROWS - 1], [7, 7, 1]], np.int64)}
    expected = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    so = session_options_with_custom_ops()
    lowered = onnxruntime.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert lowered[0].tobytes() == expected[0].tobytes()


def test_translate_load_model_refuses_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.onnx"
    _model(model, external=False)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "500000")
    with pytest.raises(TooLargeError, match=r"reading the model file whole \(m\.onnx\)"):
        load_model(model)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "50000000")
    assert load_model(model).graph.node[0].op_type == "Gather"


def test_run_and_validate_still_load_it_as_onnxruntime_does(tmp_path: Path) -> None:
    """The weights go to onnxruntime, which reads them itself: the limit is not a cap on its memory."""
    model = tmp_path / "m.onnx"
    _model(model, external=False)
    for command in (["validate", "-q"], ["run", "-q"], ["inspect", "-q"]):
        proc = _cli(*command, str(model), limit=500_000)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])


def test_inputs_file_above_the_limit_names_arrays_and_bytes(tmp_path: Path) -> None:
    """The file inputs together above the limit: said in arrays and bytes, not as a uint8 "tensor of shape
    [25165840]" (the message a 24 MiB Gemma2 step's inputs got under a 10 MB limit)."""
    model = tmp_path / "m.onnx"
    _model(model, external=False)
    inputs = tmp_path / "m.npz"
    half = np.zeros((150_000,), np.int64)  # 1.2 MB each, 2.4 MB together: more than the limit below
    np.savez(inputs, ids=np.array([[0, 1, 2], [3, 4, 5]], np.int64), pad=half, pad2=half)
    proc = _cli("validate", str(model), "--inputs", str(inputs), limit=2_000_000)
    assert proc.returncode == 2
    assert "the 3 arrays of the inputs file together would need" in proc.stderr
    assert "(2400048 bytes)" in proc.stderr and "uint8" not in proc.stderr
