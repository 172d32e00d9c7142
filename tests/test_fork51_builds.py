"""A forked child builds onnxruntime sessions on the calling thread, as it runs its kernels there: a thread
started in a forked copy of a threaded process may never run (floors CI: a session warmed in the parent,
run with the custom-op engine in a forked child, hung in the whole suite with onnxruntime 1.24.4). The
values such a child computes are checked against onnxruntime in tests/test_hostile48_fork.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from dmlshim.background import BackgroundBuild

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


def _child_answers(check: Callable[[], bool]) -> bool:
    """``check()`` in a forked child (which leaves by ``os._exit``, never into pytest)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, b"1" if check() else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        return os.read(read_end, 1) == b"1"
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)


def test_a_forked_child_builds_on_the_calling_thread_and_the_parent_on_another() -> None:
    assert _child_answers(lambda: BackgroundBuild(threading.get_ident).result() == threading.get_ident())
    assert BackgroundBuild(threading.get_ident).result() != threading.get_ident()


def test_an_error_of_a_build_in_a_forked_child_is_raised_by_result() -> None:
    def raised() -> bool:
        try:
            BackgroundBuild(lambda: 1 // 0).result()
        except ZeroDivisionError:
            return True
        return False

    assert _child_answers(raised)
