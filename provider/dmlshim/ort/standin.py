"""The stand-in for the ``onnxruntime`` module: onnxruntime's own names and submodules, with the session
and the provider functions answered by dmlshim.

``sys.modules["onnxruntime"] = dmlshim.ort.standin_module()`` (what :func:`dmlshim.ort.install` does)
makes every later ``import onnxruntime`` get it. It carries every public name of the real package (the
option types, ``OrtValue``, ``AdapterFormat``, ``OrtArenaCfg``, ``set_global_thread_pool_sizes``, ...), its
``__version__`` and ``__path__``, so ``onnxruntime.transformers``, ``onnxruntime.quantization``,
``onnxruntime.backend`` and ``onnxruntime.capi`` import from the real package (and see the stand-in's
names). Only these differ:

* ``InferenceSession``: :class:`TrackedInferenceSession` (dmlshim's session, counted for the summary);
* ``IOBinding``: dmlshim's;
* ``NodeArg`` and ``ModelMetadata``: dmlshim's, the classes its sessions return (``isinstance(arg,
  onnxruntime.NodeArg)`` holds, as with onnxruntime; neither can be made by a program in onnxruntime);
* ``get_available_providers()``: ``DmlExecutionProvider`` first, then what onnxruntime lists here;
* ``get_device()``: ``"CPU-DML"``, as onnxruntime-directml says.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ..errors import DmlShimError
from ..execute.feeds import ModelMetadata, NodeArg
from ..runtime.real import REAL_MODULE_ATTR, ort
from . import tracking
from .emulate import EMULATE_ENV
from .iobinding import IOBinding
from .providers import available_providers
from .session import InferenceSession


class TrackedInferenceSession(InferenceSession):
    """dmlshim's ``InferenceSession``, counted in the exit summary of a program bound with
    :func:`dmlshim.ort.install`."""

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
        model = self._model_path or f"<in-memory model {self._meta.graph_name or 'unnamed'}>"
        # absolute now (the program may change directory): the summary must never replace this file
        model_file = os.path.abspath(self._model_path) if self._model_path else ""
        self._tally = tracking.TRACKER.add_session(
            model, self.get_providers(), self._engine.name, model_file=model_file
        )
        self._outcome = threading.local()  # what this thread's latest run was counted as
        tracking.changed()

    def _wanted(self, output_names: Sequence[str] | None) -> list[str]:
        try:
            return super()._wanted(output_names)
        except DmlShimError as exc:  # a run refused for its output names: a run that raised
            self._failed(exc)
            raise

    def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return super()._feeds(input_feed)
        except DmlShimError as exc:  # a run refused for its feeds (missing, extra, dtype, shape)
            self._failed(exc)
            raise

    def run_async(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().run_async(*args, **kwargs)
        except DmlShimError as exc:  # refused before its thread starts (a missing input, one thread)
            self._failed(exc)
            raise

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        self._outcome.counted = None
        try:
            super().run_with_iobinding(iobinding, run_options)
        except DmlShimError as exc:
            counted = self._outcome.counted
            if counted == "run":  # the model ran, then its outputs did not fit what was bound to them
                tracking.TRACKER.undo_run(self._tally)
            if counted != "failed":  # refused before a run (no output bound), or after one
                self._failed(exc)
            raise

    def _failed(self, exc: DmlShimError) -> None:
        self._outcome.counted = "failed"
        tracking.TRACKER.add_failure(self._tally, exc)
        tracking.changed()

    def _ran(self) -> None:
        self._outcome.counted = "run"
        tracking.TRACKER.add_run(self._tally, self._last_run_record)
        tracking.changed()

    def _execute(self, names: list[str], feeds: dict[str, Any], run_options: Any) -> list[Any]:
        try:
            outputs = super()._execute(names, feeds, run_options)
        except DmlShimError as exc:
            self._failed(exc)
            raise
        self._ran()
        return outputs

    def _run_steady(
        self, steady: Callable[..., Any], names: list[str], feeds: dict[str, Any], key: Any
    ) -> list[Any] | None:
        try:
            outputs = super()._run_steady(steady, names, feeds, key)
        except DmlShimError as exc:
            self._failed(exc)
            raise
        if outputs is not None:
            self._ran()
        return outputs


TrackedInferenceSession.__name__ = TrackedInferenceSession.__qualname__ = "InferenceSession"


def get_device() -> str:
    """``"CPU-DML"``: what onnxruntime-directml reports (the DirectML device is emulated on the CPU)."""
    return "CPU-DML"


_STANDIN: ModuleType | None = None


def standin_module() -> ModuleType:
    """The stand-in ``onnxruntime`` module (made once): put it in ``sys.modules["onnxruntime"]``."""
    global _STANDIN
    if _STANDIN is not None:
        return _STANDIN
    standin = ModuleType("onnxruntime", ort.__doc__)
    for name, value in vars(ort).items():
        if name not in ("__name__", "__doc__"):
            setattr(standin, name, value)
    standin.InferenceSession = TrackedInferenceSession  # type: ignore[attr-defined]
    standin.IOBinding = IOBinding  # type: ignore[attr-defined]
    standin.NodeArg = NodeArg  # type: ignore[attr-defined]
    standin.ModelMetadata = ModelMetadata  # type: ignore[attr-defined]
    standin.get_available_providers = available_providers  # type: ignore[attr-defined]
    standin.get_device = get_device  # type: ignore[attr-defined]
    setattr(standin, REAL_MODULE_ATTR, ort)
    standin.__dmlshim__ = True  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:  # names the real package gains later (submodules imported there)
        try:
            return getattr(ort, name)
        except AttributeError:
            raise AttributeError(f"module 'onnxruntime' has no attribute {name!r}") from None

    setattr(standin, "__getattr__", __getattr__)  # noqa: B010 - a module-level __getattr__
    _STANDIN = standin
    return standin


def is_standin(module: Any) -> bool:
    """Whether ``module`` is dmlshim's stand-in."""
    return isinstance(module, ModuleType) and getattr(module, "__dmlshim__", False) is True


def bound_module() -> ModuleType | None:
    """What ``import onnxruntime`` gives now, if anything was imported."""
    found = sys.modules.get("onnxruntime")
    return found if isinstance(found, ModuleType) else None


__all__ = ["EMULATE_ENV", "TrackedInferenceSession", "bound_module", "is_standin", "standin_module"]
