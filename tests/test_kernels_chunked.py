"""The kernels' chunked, multi-threaded paths (and the threads' reusable scratch buffers) give
onnxruntime's results: a subprocess runs gathers and scatters with 64-element chunks and two kernel
threads (the environment variables are read once, at import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "scripts" / "chunked_kernels.py"
PROVIDER = Path(__file__).resolve().parent.parent / "provider"


def test_chunked_kernels_match_onnxruntime() -> None:
    env = {
        **os.environ,
        "DMLSHIM_KERNEL_CHUNK": "64",
        "DMLSHIM_KERNEL_THREADS": "2",
        "PYTHONPATH": os.pathsep.join([str(PROVIDER), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 9, done.stdout
    failed = [line for line in lines if not line.startswith("ok ")]
    assert not failed, failed
