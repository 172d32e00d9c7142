"""Multi-process and multi-threaded programs under ``python -m dmlshim.ort``, each compared with the same
program under plain onnxruntime (the oracle): same output, same exit status, same ending, no process left.

Found: since the tally of a worker is written after every change (no SIGTERM handler, tests/
test_ort_sigterm51.py), each write replaced the file by a temporary one (a rename: ~2 ms on overlayfs), so a
pool worker's run of a small model was ~50 times slower than under onnxruntime, and the workers of a pool
whose parent SIGTERM ended outlived it by tens of seconds, finishing their chunk of tasks. The tally is now
rewritten in place (``dmlshim.fileio.scratch``): no rename, one write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dmlshim.fileio.scratch import ScratchFile

from .conftest import REPO

MODEL = REPO / "onnx_models" / "embedding_gather.onnx"
FEEDS = REPO / "onnx_models" / "embedding_gather.npz"

HEAD = f"""
import os, signal, sys, threading, time
import multiprocessing as mp
import numpy as np
import onnxruntime

def make():
    providers = ["DmlExecutionProvider", "CPUExecutionProvider"]
    sess = onnxruntime.InferenceSession({str(MODEL)!r}, providers=providers)
    with np.load({str(FEEDS)!r}) as data:
        return sess, {{i.name: data[i.name] for i in sess.get_inputs()}}

S = None

def work(i):
    sess, feeds = S
    return round(float(sess.run(None, feeds)[0].astype(np.float64).sum()), 3) + i
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    return env


def _run(tmp_path: Path, body: str, *, dml: bool, timeout: float = 90) -> tuple[int, str, dict | None]:
    """The program's exit status and output, and the summary's totals (dmlshim) or None (onnxruntime)."""
    program = tmp_path / "program.py"
    program.write_text(HEAD + textwrap.dedent(body), encoding="utf-8")
    summary = tmp_path / f"summary{time.monotonic_ns()}.json"
    args = ["-m", "dmlshim.ort", "--summary", "off", "--summary-file", str(summary)] if dml else []
    proc = subprocess.Popen(
        [sys.executable, *args, str(program)],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the program (dmlshim: {dml}) did not end within {timeout} s")
    assert not _group_alive(proc.pid), "a process of the program outlived it"
    totals = json.loads(summary.read_text(encoding="utf-8"))["totals"] if summary.exists() else None
    assert (totals is not None) == (dml and proc.returncode >= 0), err[-3000:]
    return proc.returncode, out, totals


def _group_alive(pgid: int) -> bool:
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    return True


def _both(tmp_path: Path, body: str) -> tuple[tuple[int, str], tuple[int, str], dict | None]:
    code, out, _ = _run(tmp_path, body, dml=False)
    dml_code, dml_out, totals = _run(tmp_path, body, dml=True)
    return (code, out), (dml_code, dml_out), totals


def test_a_session_made_before_fork_run_by_pool_workers(tmp_path: Path) -> None:
    body = """
    if __name__ == "__main__":
        S = make()
        first = work(0)
        with mp.get_context("fork").Pool(2) as pool:
            print(first, sum(pool.map(work, range(20))))
    """
    want, got, totals = _both(tmp_path, body)
    assert got == want and want[0] == 0
    assert totals is not None and totals["runs"] == 21 and totals["sessions"] == 1


def test_one_session_run_from_several_threads(tmp_path: Path) -> None:
    body = """
    S = make()
    results = []
    def many():
        results.extend(work(0) for _ in range(20))
    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(results), sorted(set(results)), work(1))
    """
    want, got, totals = _both(tmp_path, body)
    assert got == want and want[0] == 0
    assert totals is not None and totals["runs"] == 81


def test_a_pool_worker_ending_by_os_exit_breaks_the_executor_as_under_onnxruntime(tmp_path: Path) -> None:
    body = """
    import concurrent.futures as cf

    def init():
        global S
        S = make()

    def die(i):
        value = work(i)
        if i == 3:
            os._exit(7)
        return value

    if __name__ == "__main__":
        try:
            with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork"), initializer=init) as ex:
                print(sum(ex.map(die, range(10))))
        except cf.process.BrokenProcessPool:
            print("broken")
    """
    want, got, totals = _both(tmp_path, body)
    assert got == want == (0, "broken\n")
    assert totals is not None and totals["runs"] >= 4  # the worker's run before os._exit is counted


def test_sigterm_to_the_parent_of_a_busy_pool(tmp_path: Path) -> None:
    """The parent ends by the signal; its workers end soon after (once their chunk of tasks is done)."""
    body = """
    def init():
        global S
        S = make()

    if __name__ == "__main__":
        pool = mp.get_context("fork").Pool(2, initializer=init)
        result = pool.map_async(work, range(4000))
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        result.get()
    """
    want, got, totals = _both(tmp_path, body)
    assert got == want == (-signal.SIGTERM, "")
    assert totals is None


def test_a_worker_rewrites_its_tally_in_place_after_every_run(tmp_path: Path) -> None:
    """No rename per run (the slow path), and the file always holds the runs made so far."""
    state = tmp_path / "dmlshim-ort-locked-test"  # as the first process names its state folder
    state.mkdir()
    program = tmp_path / "worker.py"
    body = """
    import dmlshim, json
    dmlshim.install(children=False)
    import onnxruntime
    renames = []
    real_replace, real_rename = os.replace, os.rename
    os.replace = lambda *a, **k: renames.append(a) or real_replace(*a, **k)
    os.rename = lambda *a, **k: renames.append(a) or real_rename(*a, **k)
    S = make()
    path = os.path.join(os.environ["DMLSHIM_ORT_STATE"], f"{os.getpid()}.json")
    inodes = set()
    for n in range(1, 51):
        work(n)
        with open(path, encoding="utf-8") as f:
            assert json.load(f)["sessions"][0]["runs"] == n
        inodes.add(os.stat(path).st_ino)
    print(len(renames), len(inodes))
    """
    program.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body), encoding="utf-8")
    env = _env()
    env["DMLSHIM_ORT_STATE"] = str(state)
    env["DMLSHIM_ORT_OWNER"] = "1"  # another process prints the summary: this one is a worker
    proc = subprocess.run(
        [sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["0", "1"]


def test_scratch_file_shorter_content_stays_whole_json(tmp_path: Path) -> None:
    path = tmp_path / "tally.json"
    scratch = ScratchFile(path)
    scratch.write_text(json.dumps({"runs": 10, "first_error": "x" * 100}))
    scratch.write_text(json.dumps({"runs": 11}))
    assert json.loads(path.read_text(encoding="utf-8")) == {"runs": 11}
    scratch.close()
    again = ScratchFile(path)  # a later writer of the same file (a reused process id)
    again.write_text(json.dumps({"runs": 1}))
    again.close()
    assert json.loads(path.read_text(encoding="utf-8")) == {"runs": 1}
