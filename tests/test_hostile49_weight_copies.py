"""Hostile round 49: the session's private copy of a model's inline weights (``execute/weights/snapshot.py``)
when the process is killed.

A program holding a session of a model with inline weights, stopped by SIGTERM (a service manager, a
container stop) or SIGKILL (the OOM killer), runs no finalizer: before this round each kill left the whole
copy (``dmlshim-weights-*/weights.bin``, 307 MB for a 307 MB model) in the temporary directory for good,
which is memory where that is a tmpfs; onnxruntime leaves nothing. A copy is now locked while any
process (or forked child) may read it, and the next session that makes a copy removes the unlocked ones
older than a minute. Values still onnxruntime's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.oracle import ort_run
from tests.safety_helpers import REPO

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and advisory locks")

_CHILD = """
import sys, time, numpy as np, dmlshim
s = dmlshim.InferenceSession(sys.argv[1], engine=sys.argv[2])
first = s.run(None, {"idx": np.array([1, 2])})[0].sum()
if sys.argv[3] == "fork":
    import os
    if os.fork() == 0:  # the child keeps using the session after its parent is killed
        time.sleep(1.5)
        print("child", s.run(None, {"idx": np.array([3])})[0].sum(), flush=True)
        os._exit(0)
print(first, flush=True)  # after the fork: the parent may be killed from here on
time.sleep(60)
"""


def _model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(2048 * 1024, dtype=np.float32).reshape(2048, 1024), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["y"], name="g")],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def _copies(folder: Path) -> list[Path]:
    return sorted(folder.glob("dmlshim-weights-*"))


def _killed_child(tmp_path: Path, engine: str, sig: int, mode: str = "plain") -> subprocess.Popen[str]:
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(model), engine, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    expected = ort_run(_model(), {"idx": np.array([1, 2])})[0].sum()
    assert float(first) == float(expected)
    assert len(_copies(tmp_path / "tmp")) == 1  # the session made its copy
    child.send_signal(sig)
    child.wait(timeout=60)
    return child


def _age(folder: Path) -> None:
    old = time.time() - 3600
    os.utime(folder, (old, old))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize("engine", ["partitioned", "customop"])
def test_a_killed_programs_copy_is_removed_by_the_next_session(tmp_path: Path, engine: str, sig: int) -> None:
    import dmlshim
    from dmlshim.execute.weights.snapshot import sweep_stale

    _killed_child(tmp_path, engine, sig)
    (left,) = _copies(tmp_path / "tmp")
    assert sweep_stale(str(tmp_path / "tmp")) == []  # a minute's grace: it may be locked in a moment
    _age(left)
    os.environ["TMPDIR"] = str(tmp_path / "tmp")
    try:
        import tempfile

        tempfile.tempdir = None  # read TMPDIR again
        session = dmlshim.InferenceSession(str(tmp_path / "m.onnx"), engine=engine)
        assert not left.exists()  # swept when this session made its own copy
        (own,) = _copies(tmp_path / "tmp")
        _age(own)
        assert sweep_stale(str(tmp_path / "tmp")) == []  # locked: this session still reads it
        feeds = {"idx": np.array([5, 2047])}
        np.testing.assert_array_equal(session.run(None, feeds)[0], ort_run(_model(), feeds)[0])
        del session
    finally:
        del os.environ["TMPDIR"]
        tempfile.tempdir = None


def test_a_forked_child_keeps_the_copy_after_its_parent_is_killed(tmp_path: Path) -> None:
    from dmlshim.execute.weights.snapshot import sweep_stale

    child = _killed_child(tmp_path, "partitioned", signal.SIGKILL, mode="fork")
    (left,) = _copies(tmp_path / "tmp")
    _age(left)
    assert sweep_stale(str(tmp_path / "tmp")) == []  # the forked child holds the lock
    assert child.stdout is not None
    line = child.stdout.readline()  # the forked child's run, after its parent died
    assert line.startswith("child "), line
    assert float(line.split()[1]) == float(ort_run(_model(), {"idx": np.array([3])})[0].sum())
    deadline = time.monotonic() + 30
    while sweep_stale(str(tmp_path / "tmp")) == [] and time.monotonic() < deadline:
        time.sleep(0.2)  # the forked child has exited: nobody holds the lock any more
    assert not left.exists()
