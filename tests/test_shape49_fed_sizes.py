"""A gather whose output size the feeds set is refused under the memory limit before anything allocates it.

Issue 35 leftover: a Gather of a 1000 x 1000 float table by 10^6 fed indices (8 MB of feeds, a 4 GB
output) was refused by the memory limit only after onnxruntime had allocated it: in the whole-model check's
run (partitioned engine: 4 GB peak, 8 GB with a node after the gather), in the custom-op engine's session
and in the cpu engine (both ran it: 8 GB). The session now sizes such a gather from the feeds' shapes
before any engine runs (``dmlshim.execute.plan.fed_sizes``). Measured in a child process: its own peak
RSS before and after the refused run, with DMLSHIM_MEMORY_LIMIT=100000000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError

ROOT = Path(__file__).resolve().parents[1]
F = TensorProto.FLOAT
LIMIT = 100_000_000
ENGINES = ("partitioned", "customop", "cpu")


def _model(kind: str) -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000) / 7, "d")
    vi = helper.make_tensor_value_info
    inputs = [vi("i", TensorProto.INT64, ["n"])]
    if kind == "gather":
        nodes = [helper.make_node("Gather", ["d", "i"], ["y"])]
    elif kind == "chain":  # the gather between two onnxruntime nodes: the whole-model check answers
        nodes = [
            helper.make_node("Relu", ["d"], ["r"]),
            helper.make_node("Gather", ["r", "i"], ["g"], axis=1),
            helper.make_node("Neg", ["g"], ["y"]),
        ]
    elif kind == "gathernd":
        inputs = [vi("i", TensorProto.INT64, ["n", 1])]
        nodes = [helper.make_node("GatherND", ["d", "i"], ["y"])]
    else:  # gatherelements: the output is the indices' shape, the indices a feed of two free dims
        inputs = [vi("i", TensorProto.INT64, ["n", "m"])]
        nodes = [helper.make_node("GatherElements", ["d", "i"], ["y"])]
    graph = helper.make_graph(nodes, kind, inputs, [vi("y", F, None)], [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _indices(kind: str, n: int) -> np.ndarray:
    if kind == "gathernd":
        return np.zeros((n, 1), np.int64)
    if kind == "gatherelements":
        return np.zeros((1000, n), np.int64)
    return np.arange(n, dtype=np.int64) % 1000


_CHILD = """
import json, sys
import numpy as np
import dmlshim

def peak():
    with open("/proc/self/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("VmHWM:"))) * 1024

path, engine, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
session = dmlshim.InferenceSession(path, engine=engine)
if kind == "gathernd":
    i = np.zeros((n, 1), np.int64)
elif kind == "gatherelements":
    i = np.zeros((1000, n), np.int64)
else:
    i = np.arange(n, dtype=np.int64) % 1000
before = peak()
try:
    session.run(None, {"i": i})
    error = None
except Exception as exc:
    error = [type(exc).__name__, str(exc)]
print(json.dumps({"before": before, "after": peak(), "error": error}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak RSS read from /proc (Linux)")
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("kind", "n"),
    [("gather", 1_000_000), ("chain", 1_000_000), ("gathernd", 1_000_000), ("gatherelements", 1_000_000)],
)
def test_a_feed_sized_gather_past_the_limit_is_refused_before_allocating(
    tmp_path: Path, engine: str, kind: str, n: int
) -> None:
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(_model(kind).SerializeToString())
    env = {**os.environ, "PYTHONPATH": str(ROOT / "provider"), "DMLSHIM_MEMORY_LIMIT": str(LIMIT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), engine, kind, str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["error"] is not None and report["error"][0] == "TooLargeError", report
    message = report["error"][1]
    assert "would need 3.73 GiB" in message and "more than the memory limit" in message, message
    assert "refusing before allocating" in message
    # the run allocated nothing of the kind (it was 3.9 to 7.8 GB more before)
    assert report["after"] - report["before"] < 50 * 2**20, report


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["gather", "chain", "gathernd", "gatherelements"])
def test_under_the_limit_runs_give_onnxruntimes_values(
    engine: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    data = _model(kind).SerializeToString()
    session = dmlshim.InferenceSession(data, engine=engine)
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for n in (3, 20):
        feed = {"i": _indices(kind, n)}
        np.testing.assert_array_equal(session.run(None, feed)[0], theirs.run(None, feed)[0])


def test_the_refusal_names_the_node_op_and_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    session = dmlshim.InferenceSession(_model("chain").SerializeToString())
    with pytest.raises(TooLargeError) as info:
        session.run(None, {"i": _indices("chain", 100_000)})  # [1000, 100000] floats: 400 MB
    assert info.value.op_type == "Gather" and info.value.tensor == "g"
    assert info.value.value == 1000 * 100_000 * 4
    np.testing.assert_array_equal(  # the session still runs what fits
        session.run(None, {"i": _indices("chain", 5)})[0],
        -np.maximum(np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000) / 7, 0)[:, :5],
    )


def test_a_fed_over_table_is_sized_by_the_feed_or_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """An initializer listed as a graph input may be fed over: its default's shape, or the feed's."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    model = _model("gather")
    model.graph.input.append(helper.make_tensor_value_info("d", F, [None, None]))
    session = dmlshim.InferenceSession(model.SerializeToString())
    with pytest.raises(TooLargeError):
        session.run(None, {"i": _indices("gather", 100_000)})  # [100000, 1000] of the default: 400 MB
    small = np.ones((1000, 2), np.float32)
    out = session.run(None, {"i": _indices("gather", 100_000), "d": small})[0]  # 800 KB: runs
    assert out.shape == (100_000, 2)


def test_ortvalue_feeds_are_sized_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    session = dmlshim.InferenceSession(_model("gather").SerializeToString())
    big = onnxruntime.OrtValue.ortvalue_from_numpy(_indices("gather", 100_000))
    with pytest.raises(TooLargeError, match="output 'y' of shape \\[100000, 1000\\]"):
        session.run_with_ort_values(None, {"i": big})
    small = onnxruntime.OrtValue.ortvalue_from_numpy(_indices("gather", 4))
    (out,) = session.run_with_ort_values(None, {"i": small})
    assert out.shape() == [4, 1000]
