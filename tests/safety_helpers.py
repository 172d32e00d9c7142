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
    """The child's own peak resident set size in bytes (see :func:`own_peak_rss`)."""


# Linux keeps ru_maxrss across fork and execve, so a child of a large test process would report the
# parent's peak; VmHWM belongs to the child's own address space, which execve starts afresh.
_REPORT_PEAK = (
    "import atexit, os, runpy, sys\n"
    "def _peak():\n"
    "    with open('/proc/self/status') as f, open(os.environ['DMLSHIM_TEST_PEAK_FILE'], 'w') as o:\n"
    "        o.write(next(l.split()[1] for l in f if l.startswith('VmHWM:')))\n"
    "atexit.register(_peak)\n"
    "sys.argv[0] = 'dmlshim'\n"
    "runpy.run_module('dmlshim', run_name='__main__', alter_sys=True)\n"
)


def own_peak_rss(script_args: list[str]) -> list[str]:
    """The command line that runs ``python -m dmlshim`` and writes its own peak RSS (kB, VmHWM) to the file
    ``$DMLSHIM_TEST_PEAK_FILE`` names (Linux); elsewhere plain ``python -m dmlshim`` (wait4's figure)."""
    if not Path("/proc/self/status").is_file():
        return [sys.executable, "-m", "dmlshim", *script_args]
    return [sys.executable, "-c", _REPORT_PEAK, *script_args]


def run_child(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 300) -> ChildResult:
    """``python -m dmlshim ARGV`` in a child process with ``env`` added; exit code, output and peak RSS.

    The child is killed after ``timeout`` seconds (a hang then shows as exit -9, not a stuck suite).
    """
    tmp_dir = tempfile.TemporaryDirectory()
    with tmp_dir as tmp, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        peak_file = Path(tmp) / "peak"
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "provider"),
            "DMLSHIM_TEST_PEAK_FILE": str(peak_file),
            **(env or {}),
        }
        proc = subprocess.Popen(own_peak_rss(argv), stdout=out, stderr=err, env=full_env)
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
            int(peak_file.read_text()) * 1024 if peak_file.is_file() else usage.ru_maxrss * 1024,
        )
