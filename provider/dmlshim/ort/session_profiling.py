"""Profiling of :class:`dmlshim.InferenceSession` as onnxruntime offers it (``enable_profiling``,
``end_profiling``, ``get_profiling_start_time_ns``): one profile file for the whole model."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..runtime.exceptions import raises_onnxruntime_errors
from .profiling import SessionProfiler

if TYPE_CHECKING:
    from ..execute.engine import Engine
    from ..execute.weights.model_source import ModelSource


class SessionProfiling:
    """The profiler of a session, mixed into :class:`dmlshim.InferenceSession`."""

    _profiler: SessionProfiler | None = None
    if TYPE_CHECKING:
        _options: Any
        _engine: Engine

    def _start_profiler(self, path_or_bytes: ModelSource) -> None:
        so = self._options
        if self._profiler is not None or so is None or not so.enable_profiling:
            return
        model_file = os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None
        self._profiler = SessionProfiler(so.profile_file_prefix, inputs=(model_file,))

    def _span(self, name: str) -> contextlib.AbstractContextManager[None]:
        return self._profiler.span(name) if self._profiler is not None else contextlib.nullcontext()

    def _ort_sessions(self) -> list[tuple[str, Any]]:
        sessions: Callable[[], list[tuple[str, Any]]] | None = getattr(self._engine, "ort_sessions", None)
        return list(sessions()) if sessions is not None else []

    @raises_onnxruntime_errors()
    def end_profiling(self) -> str:
        """Write the session's one profile file and return its name ('' if profiling is off or ended).

        The file covers the whole model: onnxruntime's events for the CPU partitions' nodes and dmlshim's
        for each emulated node (Chrome trace format; see :mod:`dmlshim.ort.profiling`).
        """
        if self._profiler is None:
            return ""
        return self._profiler.end(self._ort_sessions(), getattr(self._engine, "emulated_nodes", ()))

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (nanoseconds since the epoch), 0 when profiling is off."""
        return self._profiler.start_time_ns if self._profiler is not None else 0
