"""SIGTERM ends a program run with dmlshim in place of onnxruntime, and each of its pool workers, as it ends
them under plain python: at once, whichever thread the kernel hands the signal to.

Found in CI: a pool worker waiting for a task outlived the pool's SIGTERM and the pool waited forever.
dmlshim had set a Python handler there (to write the worker's tally first), and a Python handler runs only
when the main thread runs Python again; the signal had landed on another thread (onnxruntime's, OpenBLAS's)
while the main thread slept in a semaphore. Here the main thread blocks SIGTERM, so the kernel must hand it
to the helper thread, and waits on a lock forever: only the signal's default action ends the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest

from .conftest import REPO

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")

MODEL = REPO / "onnx_models" / "embedding_gather.onnx"
FEEDS = REPO / "onnx_models" / "embedding_gather.npz"

PROGRAM = f"""
import signal, sys, threading, time
import numpy as np
import onnxruntime

providers = ["DmlExecutionProvider", "CPUExecutionProvider"]
sess = onnxruntime.InferenceSession({str(MODEL)!r}, providers=providers)
with np.load({str(FEEDS)!r}) as data:
    feeds = {{i.name: data[i.name] for i in sess.get_inputs()}}
for _ in range(3):
    sess.run(None, feeds)
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
print("ready", type(sess).__module__, flush=True)
lock = threading.Lock()
lock.acquire()
lock.acquire()
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    return env


def _terminate_when_ready(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
        assert "dmlshim" in line  # the session is dmlshim's: its handlers, if any, are in place
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not end the process (a Python handler waited for the main thread)")
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_sigterm_ends_the_program_of_python_m_dmlshim_ort(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    command = ["-m", "dmlshim.ort", "--summary", "off", str(program)]
    code, err = _terminate_when_ready(command, _env(), tmp_path)
    assert code == -signal.SIGTERM, err[-3000:]


def test_sigterm_ends_a_worker_and_its_tally_holds_every_run(tmp_path: Path) -> None:
    state = tmp_path / "dmlshim-ort-locked-test"  # a state folder the first process made is named so
    state.mkdir()
    program = tmp_path / "worker.py"
    program.write_text("import dmlshim\ndmlshim.install(children=False)\n" + PROGRAM, encoding="utf-8")
    env = _env()
    env["DMLSHIM_ORT_STATE"] = str(state)
    env["DMLSHIM_ORT_OWNER"] = "1"  # another process prints the summary: this one is a worker
    code, err = _terminate_when_ready([str(program)], env, tmp_path)
    assert code == -signal.SIGTERM, err[-3000:]
    (tally_file,) = state.glob("*.json")
    tally = json.loads(tally_file.read_text(encoding="utf-8"))
    (session,) = tally["sessions"]
    assert session["runs"] == 3  # the three runs, though the worker was ended without a chance to write


def test_onnxruntime_itself_is_ended_the_same_way(tmp_path: Path) -> None:
    """The expectation, from onnxruntime alone: the same program ends by the signal."""
    program = tmp_path / "plain.py"
    program.write_text(PROGRAM.replace('"ready", type(sess).__module__', '"ready dmlshim"'), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_")}
    code, err = _terminate_when_ready([str(program)], env, tmp_path)
    assert code == -signal.SIGTERM, err[-3000:]
    assert onnxruntime.__version__  # the installed onnxruntime ran it
