"""``dmlshim validate DIR --jobs 2`` ends with its worker processes on SIGTERM and SIGHUP, as on Ctrl-C:
no orphan, the pipes closed, "interrupted" reported, exit 128 + the signal."""

from __future__ import annotations

import contextlib
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

REPO = Path(__file__).resolve().parents[1]


def slow_model(iterations: int) -> onnx.ModelProto:
    """A Loop of ``iterations`` steps around a Gather: seconds of onnxruntime work per run."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["v", "idx"], ["g"], axis=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Add", ["g", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4]),
        ],
        [
            numpy_helper.from_array(np.array([3, 2, 1, 0], dtype=np.int64), "idx"),
            numpy_helper.from_array(np.ones(4, dtype=np.float32), "one"),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "c", "x"], ["y"], body=body)],
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [
            numpy_helper.from_array(np.array(iterations, dtype=np.int64), "n"),
            numpy_helper.from_array(np.array(True), "c"),
        ],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the workers")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_ends_the_workers_with_the_parent(tmp_path: Path, signum: int) -> None:
    for i in range(3):
        onnx.save(slow_model(20_000_000), str(tmp_path / f"slow{i}.onnx"))
    env = dict(os.environ, PYTHONPATH=str(REPO / "provider"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmlshim", "validate", str(tmp_path), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        workers |= children(proc.pid)
    assert proc.poll() is None and len(workers) >= 2, "the workers never started"
    time.sleep(1.0)  # let them reach the models
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=30)  # returns only once every holder of the pipes is gone
    except subprocess.TimeoutExpired:
        proc.kill()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        pytest.fail("the command did not end (or its workers kept its pipes open)")
    assert proc.returncode == 128 + signum, err
    assert "interrupted" in err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not [pid for pid in workers if alive(pid)]


def sigint_default() -> None:
    """In the child, before it runs: SIGINT's default action and an empty signal mask, as a terminal's
    foreground job starts (the mask is inherited through exec, and a test earlier in this pytest process
    may leave SIGINT blocked in it: the child then never sees the Ctrl-C the test sends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the workers")
@pytest.mark.parametrize("moment", ["starting", "workers_importing", "workers_running", "command_alone"])
def test_ctrl_c_to_the_whole_group_is_interrupted_without_a_traceback(tmp_path: Path, moment: str) -> None:
    """A terminal's Ctrl-C reaches the command and its workers at once (the process group): while the
    command imports, while the workers import, or while they run, the answer is "interrupted", exit 130,
    no traceback from any process, no worker left. ``command_alone``: ``kill -INT`` of the command only
    (not its group) while the workers run: the same answer, and the command ends its workers."""
    for i in range(3):
        onnx.save(slow_model(20_000_000), str(tmp_path / f"slow{i}.onnx"))
    env = dict(os.environ, PYTHONPATH=str(REPO / "provider"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmlshim", "validate", str(tmp_path), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # a foreground job's Ctrl-C is not ignored, even where this test runs as a background job (which
        # a shell without job control starts with SIGINT ignored, and Python then never interrupts)
        preexec_fn=sigint_default,
    )
    workers: set[int] = set()
    if moment == "starting":
        time.sleep(0.8)
    else:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            workers |= children(proc.pid)
        assert len(workers) >= 2, "the workers never started"
        time.sleep({"workers_importing": 0.1, "command_alone": 2.0}.get(moment, 4.0))
    if moment == "command_alone":
        os.kill(proc.pid, signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the command did not end after Ctrl-C")
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    time.sleep(0.5)
    assert not [pid for pid in workers if alive(pid)]


def test_stopping_the_pool_ends_its_manager_thread_before_returning() -> None:
    """An interrupted validate stops its pool and then leaves: the pool's manager thread must have ended by
    then, or concurrent.futures' exit hook writes to the wake-up pipe the thread is closing (CPython 3.11
    prints "Exception ignored ... Bad file descriptor" after "interrupted"). ``shutdown(wait=False)``
    forgets the thread, so it has to be taken first."""
    import multiprocessing
    import threading

    from dmlshim.cli.validate_many import _pool, _stop_workers

    pool = _pool(2)
    futures = [pool.submit(time.sleep, 30) for _ in range(3)]
    deadline = time.monotonic() + 60
    while not any(f.running() for f in futures) and time.monotonic() < deadline:
        time.sleep(0.05)
    managers = [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]
    assert managers, "the pool never started its manager thread"
    _stop_workers(pool)
    assert not [t for t in managers if t.is_alive()]
    assert not multiprocessing.active_children()
