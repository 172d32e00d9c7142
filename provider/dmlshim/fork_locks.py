"""Locks that a forked child gets new.

A lock another thread of the parent held at ``fork`` stays held in the child, where that thread does not
exist: the child's first ``with lock:`` would wait forever. Each :class:`ChildLock` is replaced by a new
lock of its kind in a forked child (Windows has no fork).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any


class ChildLock:
    """A lock used as ``with lock:`` (``factory``: ``threading.Lock`` or ``threading.RLock``), new in every
    forked child."""

    __slots__ = ("__weakref__", "_factory", "_lock")

    def __init__(self, factory: Callable[[], Any] = threading.Lock) -> None:
        self._factory = factory
        self._lock = factory()
        _LOCKS.add(self)

    def __enter__(self) -> bool:
        return bool(self._lock.__enter__())

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)

    def _renew(self) -> None:
        self._lock = self._factory()


_LOCKS: weakref.WeakSet[ChildLock] = weakref.WeakSet()


def _renew_in_child() -> None:
    for lock in list(_LOCKS):
        lock._renew()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_renew_in_child)
