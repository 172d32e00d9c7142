"""A test that hangs ends its process with every thread's stack printed, instead of stalling the suite.

Each test runs under :func:`faulthandler.dump_traceback_later` with ``exit=True``: past the limit
(``$DMLSHIM_TEST_HANG_LIMIT`` seconds, default 900) the stacks of every thread go to a file and the process
exits, so pytest-xdist reports the test as crashed and goes on with a new worker. The controller prints the
files of the processes that hit the limit in its summary, so a hang on a CI machine shows where it was.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

LIMIT_ENV = "DMLSHIM_TEST_HANG_LIMIT"
DIR_ENV = "DMLSHIM_TEST_HANG_DIR"


def _limit() -> float:
    try:
        return float(os.environ.get(LIMIT_ENV, "") or 900)
    except ValueError:
        return 900.0


_OWNS_DIR = DIR_ENV not in os.environ
if _OWNS_DIR:  # the first pytest process (the xdist controller): its workers inherit the folder
    os.environ[DIR_ENV] = tempfile.mkdtemp(prefix="dmlshim-test-hangs-")

_file: IO[str] | None = None


def _dump_file() -> IO[str]:
    global _file
    if _file is None:
        _file = open(Path(os.environ[DIR_ENV]) / f"{os.getpid()}.txt", "w", encoding="utf-8")  # noqa: SIM115
    return _file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = _limit()
    if limit <= 0:
        yield
        return
    file = _dump_file()
    file.seek(0)
    file.truncate()
    file.write(f"{item.nodeid} did not finish within {limit:g} s; the stacks of its process:\n")
    file.flush()
    faulthandler.dump_traceback_later(limit, exit=True, file=file)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    folder = Path(os.environ.get(DIR_ENV, ""))
    if not _OWNS_DIR or not folder.is_dir():
        return
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "Thread 0x" in text or "Current thread" in text:
            terminalreporter.section(f"hung test (process {path.stem})", sep="=")
            terminalreporter.write(text)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWNS_DIR:
        shutil.rmtree(os.environ.get(DIR_ENV, ""), ignore_errors=True)
