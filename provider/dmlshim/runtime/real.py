"""The real onnxruntime, captured once, for every onnxruntime object dmlshim builds for itself.

A program binds dmlshim in place of onnxruntime in one of two ways: it patches
``onnxruntime.InferenceSession = dmlshim.InferenceSession``, or it replaces ``sys.modules["onnxruntime"]``
with dmlshim's stand-in (:mod:`dmlshim.ort.standin`). Either way the name ``onnxruntime.InferenceSession``
then means dmlshim, so dmlshim's own sessions (CPU segments, the whole-model check, references) must never
look it up at call time: they use :data:`OrtInferenceSession`, the class onnxruntime defines in
``onnxruntime.capi.onnxruntime_inference_collection`` (where no binding form patches it), and :data:`ort`,
the real package module even when the stand-in occupies ``sys.modules["onnxruntime"]``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any, TypeVar

from onnxruntime.capi import _pybind_state as C
from onnxruntime.capi import onnxruntime_pybind11_state as pybind_state
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as _RealInferenceSession
from onnxruntime.capi.onnxruntime_inference_collection import IOBinding as OrtIOBinding

DISABLED_OPTIMIZERS: ContextVar[frozenset[str]] = ContextVar(
    "dmlshim_disabled_optimizers", default=frozenset()
)
"""The ``disabled_optimizers=`` of the dmlshim session being built or run (:func:`optimizers_disabled`)."""


_GLOBAL_POOL = [False]
_CALLERS: weakref.WeakSet[Any] = weakref.WeakSet()


def use_global_thread_pool() -> None:
    """The program runs its sessions on onnxruntime's global thread pool (``set_global_thread_pool_sizes``
    and ``use_per_session_threads = False``): onnxruntime then refuses any session with threads of its own,
    so every session dmlshim builds for itself from now on uses the global pool too."""
    _GLOBAL_POOL[0] = True


def callers_options(options: Any) -> None:
    """``options`` are a program's own: never changed here (onnxruntime refuses them as they are)."""
    with contextlib.suppress(TypeError):
        _CALLERS.add(options)


_OPTION_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_OPTION_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def options_held(options: Any) -> Iterator[None]:
    """Hold ``options`` (a program's ``SessionOptions``) for the block: dmlshim switches some of the
    caller's own fields off for a moment (profiling, ``optimized_model_filepath``, the log level, while
    a probe session is built: free dimension overrides and added initializers cannot be copied), so every
    such change, and every dmlshim session built from the same object, runs under this object's lock.
    Before, a session built on another thread from one shared options object read the fields while they
    were off, and silently wrote no optimized model (2 of 4 threads) or no profile."""
    if options is None:
        yield
        return
    try:
        with _OPTION_LOCKS_GUARD:
            lock = _OPTION_LOCKS.setdefault(options, threading.RLock())
    except TypeError:  # not weakly referenceable: no program's SessionOptions
        yield
        return
    with lock:
        yield


def _fresh_option_locks() -> None:
    """In a forked child: the parent's threads holding option locks do not exist here, so their locks
    would stay held forever (a child building a session from the options object a parent thread was
    building one from waited for good); the child starts with none."""
    global _OPTION_LOCKS, _OPTION_LOCKS_GUARD
    _OPTION_LOCKS = weakref.WeakKeyDictionary()
    _OPTION_LOCKS_GUARD = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_fresh_option_locks)

_M = TypeVar("_M", bound=Callable[..., Any])


def holding_options(method: _M) -> _M:
    """Run a session method (the constructor, ``set_providers``) under :func:`options_held` for its
    options: ``self._options`` once set, else the constructor's ``sess_options``."""

    @functools.wraps(method)
    def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
        options = getattr(self, "_options", None)
        if options is None:
            options = args[1] if len(args) > 1 else kwargs.get("sess_options")
        with options_held(options):
            return method(self, *args, **kwargs)

    return inner  # type: ignore[return-value]


def is_callers_options(options: Any) -> bool:
    """Whether ``options`` is a program's own object (:func:`callers_options`), which the program may go on
    changing after its session is built (onnxruntime reads it once, when each session is built)."""
    try:
        return options in _CALLERS
    except TypeError:
        return False


def _on_global_pool(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    options = args[1] if len(args) > 1 else kwargs.get("sess_options")
    if options is None:
        options = ort.SessionOptions()
        if len(args) > 1:
            args = (args[0], options, *args[2:])
        else:
            kwargs = {**kwargs, "sess_options": options}
    if getattr(options, "use_per_session_threads", False) and options not in _CALLERS:
        options.use_per_session_threads = False  # dmlshim's own options object, or a copy of the caller's
    return args, kwargs


class OrtInferenceSession(_RealInferenceSession):
    """onnxruntime's own ``InferenceSession`` (never a name a program patched), built with the
    ``disabled_optimizers`` of the dmlshim session at work, as onnxruntime's session for the whole model
    would be, and on onnxruntime's global thread pool once the program uses it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not kwargs.pop("cpu_fallback_asked", False):
            kwargs = _default_providers_without_fallback(args, kwargs)
        disabled = DISABLED_OPTIMIZERS.get()
        if disabled and "disabled_optimizers" not in kwargs:
            kwargs["disabled_optimizers"] = set(disabled)
        if _GLOBAL_POOL[0]:
            args, kwargs = _on_global_pool(args, kwargs)
        if args or "path_or_bytes" in kwargs:
            args, kwargs = _guarded(args, kwargs)
        options = args[1] if len(args) > 1 else kwargs.get("sess_options")
        if kwargs.get("providers") and _chooses_providers(options):
            # onnxruntime warns that the options' providers give way to those named: dmlshim's sessions name
            # the ones the caller's session runs on, and the caller's session warns as onnxruntime's would
            # (dmlshim.ort.providers.warn_options_providers)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_OPTIONS_PROVIDERS_WARNING)
                super().__init__(*args, **kwargs)
            return
        super().__init__(*args, **kwargs)


_OPTIONS_PROVIDERS_WARNING = "Specified 'providers'/'provider_options' when creating InferenceSession"


def _chooses_providers(options: Any) -> bool:
    """Whether ``options`` chose providers themselves (``add_provider_for_devices``, a selection policy;
    ``has_providers`` arrived in onnxruntime 1.22)."""
    has = getattr(options, "has_providers", None)
    return bool(has is not None and has())


def _default_providers_without_fallback(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """dmlshim's own session, which names the CPU provider, with onnxruntime's default providers instead
    when its options set ``session.disable_cpu_ep_fallback = 1``: onnxruntime refuses the CPU provider
    named beside that entry (``InvalidArgument``), while the caller's session, which did not name it, was
    accepted by onnxruntime itself (:mod:`dmlshim.ort.cpu_fallback`); with the defaults dmlshim's sessions
    are placed as the caller's is."""
    if kwargs.get("providers") != ["CPUExecutionProvider"]:
        return kwargs
    options = args[1] if len(args) > 1 else kwargs.get("sess_options")
    if options is None:
        return kwargs
    try:
        entry = options.get_session_config_entry("session.disable_cpu_ep_fallback")
    except Exception:  # onnxruntime raises when the entry is not set
        return kwargs
    return {**kwargs, "providers": None} if entry == "1" else kwargs


def _guarded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Never a node that kills this onnxruntime (ScatterND with empty index tuples before 1.32, a sparse
    Constant in a local function: :mod:`dmlshim.runtime.sparse_functions`): the model source rewritten,
    and, for a file whose weights are external, options naming the file's folder."""
    from ..model.zero_depth_scatternd import guarded_model_source
    from .sparse_functions import dense_function_constants

    guarded = guarded_model_source(args[0] if args else kwargs["path_or_bytes"])
    source, dense_folder = dense_function_constants(guarded.source)  # onnxruntime crashes on the sparse form
    given = args[1] if len(args) > 1 else kwargs.get("sess_options")
    if dense_folder is not None and guarded.weights_folder is None and is_callers_options(given):
        source, dense_folder = guarded.source, None  # a program's own options are never changed: as given
    if args:
        args = (source, *args[1:])
    else:
        kwargs = {**kwargs, "path_or_bytes": source}
    folder = guarded.weights_folder or dense_folder
    if folder is None:
        return args, kwargs
    options = args[1] if len(args) > 1 else kwargs.get("sess_options")
    options = _with_weights_folder(options, folder, guarded.nodes)
    if len(args) > 1:
        return (args[0], options, *args[2:]), kwargs
    return args, {**kwargs, "sess_options": options}


def _with_weights_folder(options: Any, folder: str, nodes: tuple[str, ...]) -> Any:
    """``options`` telling onnxruntime that external-data locations are relative to ``folder``: new
    options, or dmlshim's own object with that entry (each is built for one session). Options that
    already name a folder are left as they are.

    Raises:
        NotSupportedError: ``options`` is a program's own object, which dmlshim never changes.
    """
    from .options_copy import FOLDER_KEY, config_entry

    if options is None:
        options = ort.SessionOptions()
    elif config_entry(options, FOLDER_KEY) is not None:
        return options
    elif is_callers_options(options):
        from ..errors import NotSupportedError

        raise NotSupportedError(
            f"node {nodes[0]!r} (ScatterND): its indices' last dimension is 0, which kills onnxruntime "
            f"{ort.__version__} with SIGFPE; dmlshim hands onnxruntime the node as other ONNX operators, but "
            "the model's weights are external and telling onnxruntime their folder would change the "
            "program's own SessionOptions: load the model as a ModelProto, or use onnxruntime 1.32 or newer",
            node=nodes[0],
            op_type="ScatterND",
            rule="onnxruntime before 1.32 crashes on ScatterND with empty index tuples",
        )
    options.add_session_config_entry(FOLDER_KEY, folder)
    return options


def loaded_outputs(model: bytes, options: Any) -> list[Any]:
    """The graph outputs (``NodeArg``: name, type, shape) of onnxruntime's session of ``model`` when it is
    loaded but not initialized: its graph is resolved, so every type is onnxruntime's own inference, and no
    kernel, memory plan or optimization is made (that is ``initialize_session``, the most of a session's
    build). ``options``: dmlshim's own ``SessionOptions`` (put on the global thread pool when the program
    uses it, as :class:`OrtInferenceSession` does).

    Raises:
        What onnxruntime raises for a model it cannot load.
    """
    if _GLOBAL_POOL[0]:
        options.use_per_session_threads = False
    session = C.InferenceSession(options, model, False, False)  # loads; initialize_session is not called
    return list(session.outputs_meta)


_UNCHANGED = contextlib.nullcontext()


def optimizers_disabled(names: frozenset[str]) -> contextlib.AbstractContextManager[None]:
    """Within: every :class:`OrtInferenceSession` built leaves ``names`` out (onnxruntime's optimizers).
    Nothing to do (on every run, usually) when they are already the ones left out."""
    return _UNCHANGED if DISABLED_OPTIMIZERS.get() == names else _disabled(names)


@contextlib.contextmanager
def _disabled(names: frozenset[str]) -> Iterator[None]:
    token = DISABLED_OPTIMIZERS.set(names)
    try:
        yield
    finally:
        DISABLED_OPTIMIZERS.reset(token)


REAL_MODULE_ATTR = "__dmlshim_real_module__"
"""The attribute on dmlshim's stand-in module that holds the real onnxruntime package module."""


def _capture() -> ModuleType:
    found = sys.modules["onnxruntime"]  # imported by the lines above
    real = getattr(found, REAL_MODULE_ATTR, None)
    return real if isinstance(real, ModuleType) else found


ort: ModuleType = _capture()
"""The real onnxruntime package (never dmlshim's stand-in)."""

ORT_VERSION: str = str(ort.__version__)
"""The version of the onnxruntime that runs the non-emulated nodes."""


def ort_available_providers() -> list[str]:
    """What the real onnxruntime lists as available on this machine (never the emulated provider)."""
    return list(C.get_available_providers())


__all__ = [
    "DISABLED_OPTIMIZERS",
    "ORT_VERSION",
    "REAL_MODULE_ATTR",
    "C",
    "OrtIOBinding",
    "OrtInferenceSession",
    "callers_options",
    "is_callers_options",
    "loaded_outputs",
    "optimizers_disabled",
    "ort",
    "ort_available_providers",
    "pybind_state",
    "use_global_thread_pool",
]
