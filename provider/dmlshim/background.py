"""Building an onnxruntime session on another thread while this one goes on with other work.

onnxruntime releases the GIL while it builds a session (graph optimizations, kernel creation, weight
placement), so Python work done meanwhile (onnx's checker beside the acceptance check, the engine's step
list beside the whole-model check's session) runs on a second core instead of after it. Only the
onnxruntime call runs on the worker: its payload and options are made by the caller first, so no protobuf
object is shared between threads.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


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
        self._thread.join()

    def result(self) -> T:
        """What ``build()`` returned; what it raised is raised here."""
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._result  # type: ignore[return-value]
