"""Runs of sessions a worker makes while importing the program's main module are counted in the summary.

Found in the fourth held-out round (client libraries): fastembed's ``embed(parallel=2)`` starts forkserver
workers; a script whose top level made and ran a session (the worker re-imports it as ``__mp_main__``)
lost those workers' runs from the summary. The worker's exit flush was registered as a multiprocessing
finalizer while the module was imported, and the process start then clears the finalizers; forkserver
workers end with ``os._exit``, so nothing handed the tally on. Reduced here to plain onnxruntime API and
multiprocessing; the expected counts are the runs the script makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import REPO

MODEL = REPO / "onnx_models" / "embedding_gather.onnx"

SCRIPT = textwrap.dedent(
    f"""
    import multiprocessing as mp, sys
    import numpy as np
    import onnxruntime as ort

    def run(n):
        s = ort.InferenceSession({str(MODEL)!r}, providers=["DmlExecutionProvider"])
        feeds = {{i.name: np.zeros((2, 6), dtype=np.int64) for i in s.get_inputs()}}
        for _ in range(n):
            s.run(None, feeds)

    run(2)  # the top level: every spawn or forkserver worker runs it again while importing this module

    if __name__ == "__main__":
        ctx = mp.get_context(sys.argv[1])
        ps = [ctx.Process(target=run, args=(int(sys.argv[2]),)) for _ in range(2)]
        [p.start() for p in ps]
        [p.join() for p in ps]
    """
)


@pytest.mark.parametrize(("method", "worker_runs"), [("forkserver", 0), ("forkserver", 3), ("spawn", 0)])
def test_runs_made_while_a_worker_imports_main_are_counted(
    tmp_path: Path, method: str, worker_runs: int
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT, encoding="utf-8")
    summary_file = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlshim.ort",
            "--summary",
            "off",
            "--summary-file",
            str(summary_file),
            str(script),
            method,
            str(worker_runs),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    totals = json.loads(summary_file.read_text(encoding="utf-8"))["totals"]
    # the program: 1 session, 2 runs; each of 2 workers: the top level's session and 2 runs, then its own
    assert totals["runs"] == 2 + 2 * (2 + worker_runs)
    assert totals["sessions"] == 1 + 2 * 2
