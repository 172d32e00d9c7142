"""Peak memory of one command, as ``bench/inference_memory.py`` and ``tests/test_inference_bounds.py``
measure it.

The command runs as the only child of a small wrapper interpreter, which reports
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``: the child's own peak, not inherited from a large
parent (Linux keeps ``ru_maxrss`` across fork and execve, so the wrapper must itself be small).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "try:\n"
    "    done = subprocess.run(sys.argv[2:], capture_output=True, timeout=float(sys.argv[1]))\n"
    "except subprocess.TimeoutExpired as exc:  # the child is killed: no orphan left running\n"
    "    done = subprocess.CompletedProcess(exc.cmd, -9, exc.stdout or b'', exc.stderr or b'')\n"
    "wall = time.perf_counter() - start\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'code': done.returncode, 'peak_kb': usage.ru_maxrss, 'wall': wall,\n"
    "                  'cpu': usage.ru_utime + usage.ru_stime,\n"
    "                  'out': done.stdout.decode('utf-8', 'replace'),\n"
    "                  'err': done.stderr.decode('utf-8', 'replace')[-4000:]}))\n"
)

ORT_SESSION = (
    "import sys, onnxruntime as ort\n"
    "so = ort.SessionOptions(); so.intra_op_num_threads = 1\n"
    "ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
)
"""onnxruntime's session creation on the model ``argv[1]`` (what dmlshim's cost is compared with)."""

ORT_RUN = ORT_SESSION.replace("ort.InferenceSession(", "s = ort.InferenceSession(") + (
    "import numpy as np, json\n"
    "feeds = json.loads(sys.argv[2])\n"
    "s.run(None, {k: np.array(v[0], dtype=v[1]) for k, v in feeds.items()})\n"
)
"""onnxruntime's session creation and one run with ``argv[2]`` = JSON {name: [values, dtype]}."""


@dataclass(frozen=True)
class Peak:
    code: int
    peak_bytes: int
    wall: float
    cpu: float
    out: str
    err: str


def measure(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600) -> Peak:
    """Run ``argv`` under the wrapper; its exit code (-9 when killed after ``timeout`` seconds), peak RSS
    (bytes), wall and CPU seconds, output."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(timeout), *argv],
        capture_output=True,
        env=full_env,
        timeout=timeout + 60,
        check=True,
    )
    row = json.loads(done.stdout)
    return Peak(row["code"], int(row["peak_kb"]) * 1024, row["wall"], row["cpu"], row["out"], row["err"])


def dmlshim(*args: str) -> list[str]:
    return [sys.executable, "-m", "dmlshim", *args]


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


if __name__ == "__main__":  # python bench/peak.py CMD...: one row of JSON
    start = time.perf_counter()
    print(measure(sys.argv[1:]))
