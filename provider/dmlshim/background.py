"""Building an onnxruntime session on another thread while this one goes on with other work.

onnxruntime releases the GIL while it builds a session (graph optimizations, kernel creation, weight
placement), so Python work done meanwhile (onnx's checker beside the acceptance check, the engine's step
list beside the whole-model check's session) runs on a second core instead of after it. Only the
onnxruntime call runs on the worker: its payload and options are made by the caller first, so no protobuf
object is shared between threads.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_forked = False
"""Whether this process is a forked child: it builds on the calling thread (see :func:`_in_child`)."""


def _in_child() -> None:
    """After ``fork``: a forked copy of a threaded process is not safe to start threads in (a thread started
    inside onnxruntime's custom-op call of a forked child never ran, with onnxruntime 1.24.4), so its
    builds run on the calling thread, as its kernels do (:mod:`dmlshim.kernels.parallel`)."""
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_in_child)


class BackgroundBuild(Generic[T]):
    """``build()`` started on a worker thread, in the caller's context (context variables such as the
    session's ``disabled_optimizers`` carry over). :meth:`result` waits for it.

    The worker is not a daemon: a build left unfinished (its caller failed) is waited for at interpreter
    exit rather than cut off inside onnxruntime.
    """

    __slots__ = ("_error", "_result", "_thread")

    def __init__(self, build: Callable[[], T], name: str = "dmlshim-session-build") -> None:
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if _forked:
            self._work(build)
            return
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._work, build), name=name)
        self._thread.start()

    def _work(self, build: Callable[[], T]) -> None:
        try:
            self._result = build()
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def wait(self) -> None:
        """Wait for the build to end, whatever its outcome."""
        if self._thread is not None:
            self._thread.join()

    def result(self) -> T:
        """What ``build()`` returned; what it raised is raised here."""
        self.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result  # type: ignore[return-value]
