"""A ChildLock held by another thread at fork is free in the child (a plain lock would stay held there
forever: the thread holding it does not exist in the child)."""

from __future__ import annotations

import os
import threading

import pytest

from dmlshim.fork_locks import ChildLock


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("factory", [threading.Lock, threading.RLock], ids=["Lock", "RLock"])
def test_a_lock_another_thread_holds_at_fork_is_free_in_the_child(factory: object) -> None:
    lock, plain = ChildLock(factory), factory()  # type: ignore[operator]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock, plain:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(30)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when the ChildLock is free and the plain lock still held
            code = 0 if lock._lock.acquire(timeout=5) and not plain.acquire(timeout=0.2) else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join(30)
    assert os.waitstatus_to_exitcode(status) == 0
