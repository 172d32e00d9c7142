"""Helpers of the safety tests: run the CLI in a child process and measure that child's own peak memory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int
    """The child's own peak resident set size in bytes (its ``wait4`` rusage, not a max over children)."""


def run_child(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 300) -> ChildResult:
    """``python -m dmlshim ARGV`` in a child process with ``env`` added; exit code, output and peak RSS.

    The child is killed after ``timeout`` seconds (a hang then shows as exit -9, not a stuck suite).
    """
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dmlshim", *argv], stdout=out, stderr=err, env=full_env
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return ChildResult(
            proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            usage.ru_maxrss * 1024,
        )
