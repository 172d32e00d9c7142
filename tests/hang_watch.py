"""A test that hangs ends its process with every thread's stack printed, instead of stalling the suite.

A watchdog thread (one per test process) checks every few seconds whether the running test has been
running longer than ``$DMLSHIM_TEST_HANG_LIMIT`` seconds (default 900); if so it writes the stacks of
every thread to a file and ends the process, so pytest-xdist reports the test as crashed and goes on with
a new worker. The controller prints the files of the processes that hit the limit in its summary, so a
hang on a CI machine shows where it was. A Python thread, not ``faulthandler.dump_traceback_later``:
that one's C watchdog does not survive ``fork``, and a forked child that then exits normally waits for it
forever; nor ``signal.alarm``, which tests use themselves.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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

_running: tuple[str, float] | None = None
"""The running test's node id and the monotonic time past which it counts as hung."""
_watcher: tuple[int, threading.Thread] | None = None


def _watch() -> None:
    while True:
        time.sleep(2.0)
        running = _running
        if running is None or time.monotonic() < running[1]:
            continue
        with open(Path(os.environ[DIR_ENV]) / f"{os.getpid()}.txt", "w", encoding="utf-8") as file:
            file.write(f"{running[0]} did not finish within {_limit():g} s; the stacks of its process:\n")
            file.flush()
            faulthandler.dump_traceback(file=file, all_threads=True)
        os._exit(70)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _running, _watcher
    limit = _limit()
    if limit <= 0:
        yield
        return
    if _watcher is None or _watcher[0] != os.getpid():  # none yet in this process (or a forked copy)
        thread = threading.Thread(target=_watch, name="dmlshim-test-hang-watch", daemon=True)
        thread.start()
        _watcher = (os.getpid(), thread)
    _running = (item.nodeid, time.monotonic() + limit)
    try:
        yield
    finally:
        _running = None


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
