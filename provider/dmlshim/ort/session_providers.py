"""Providers of :class:`dmlshim.InferenceSession` as onnxruntime offers them (``get_providers``,
``set_providers``): choosing them again rebuilds the engine, as onnxruntime re-creates its session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..runtime.exceptions import raises_onnxruntime_errors
from ..runtime.real import holding_options, optimizers_disabled
from .providers import ProviderChoice, normalize_providers, unknown_provider_error
from .session_args import check_provider_list, resolve_engine

if TYPE_CHECKING:
    from ..execute.engine import Engine
    from .profiling import SessionProfiler
    from .session_copy import SessionCopy


class SessionProviders:
    """The providers of a session, mixed into :class:`dmlshim.InferenceSession`."""

    if TYPE_CHECKING:
        _choice: ProviderChoice
        _engine: Engine
        _engine_request: str | None
        _profiler: SessionProfiler | None
        _disabled_optimizers: frozenset[str]
        _copy_box: list[SessionCopy | None]

        def _build_engine(self) -> Engine: ...
        def _ort_sessions(self) -> list[tuple[str, Any]]: ...
        def _copy_holder(self) -> list[SessionCopy | None]: ...

    def get_providers(self) -> list[str]:
        """The providers, e.g. ``["DmlExecutionProvider", "CPUExecutionProvider"]`` (DirectML emulated)."""
        if self._engine.name == "directml":
            return list(self._engine.get_providers())
        return list(self._choice.names)

    @raises_onnxruntime_errors()
    @holding_options
    def set_providers(
        self,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Choose providers again and rebuild the engine, as onnxruntime re-creates its session.

        Raises:
            BadInputError: a malformed provider list (see the constructor).
            DmlShimError: a provider onnxruntime does not know at all (as onnxruntime, a ``RuntimeError``
                saying "Unknown Provider Type"); the session keeps its providers.
        """
        check_provider_list(providers, self._choice)
        choice = normalize_providers(providers, provider_options)
        if choice.unknown:  # onnxruntime re-creates its session here and refuses a name it never heard of
            raise unknown_provider_error(choice.unknown[0], self._choice)
        resolve_engine(self._engine_request, choice)
        if self._profiler is not None:
            self._profiler.harvest(self._ort_sessions(), getattr(self._engine, "emulated_nodes", ()))
        self._choice = choice
        with optimizers_disabled(self._disabled_optimizers):
            self._engine = self._build_engine()
        self._copy_box = self._copy_holder()  # onnxruntime copies the caller's options again
