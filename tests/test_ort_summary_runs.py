"""The exit summary of a program bound with ``python -m dmlshim.ort`` counts every run the program made,
including the runs the engine answers on its steady lane (which skip the session's general run path),
and every failed run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.test_ort_binding import _env

_SCRIPT = """
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
node = helper.make_node("Gather", ["data", "idx"], ["out"], name="g1")
graph = helper.make_graph([node], "g",
    [helper.make_tensor_value_info("data", TensorProto.FLOAT, [4, 3]),
     helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
    [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])])
model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
sess = ort.InferenceSession(model.SerializeToString())
data = np.arange(12, dtype=np.float32).reshape(4, 3)
for _ in range({good}):
    out = sess.run(None, {{"data": data, "idx": np.array({idx})}})[0]
    assert out.tolist() == data[np.array({idx})].tolist()
for _ in range({bad}):
    try:
        sess.run(None, {{"data": data, "idx": np.array([1, 9])}})
    except Exception:
        pass
    else:
        raise SystemExit("an out-of-range index ran")
"""


def run_with_summary(folder: Path, client: str) -> tuple[dict[str, Any], str]:
    """Run the program ``client`` under ``python -m dmlshim.ort --summary json``: the summary and the
    program's standard output."""
    script = folder / "client.py"
    script.write_text(client, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "--summary", "json", str(script)],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stderr[proc.stderr.index("{") :]), proc.stdout


@pytest.mark.parametrize(("idx", "good", "bad"), [([1, 2], 40, 0), ([1, -1], 12, 0), ([0, 3], 25, 3)])
def test_every_run_is_counted(tmp_path: Path, idx: list[int], good: int, bad: int) -> None:
    summary, _ = run_with_summary(tmp_path, textwrap.dedent(_SCRIPT.format(good=good, bad=bad, idx=idx)))
    (session,) = summary["sessions"]
    assert session["runs"] == good
    assert session["failed_runs"] == bad
    (node,) = session["nodes"]
    assert sum(node["runs"].values()) == good
