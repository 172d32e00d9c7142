"""The arguments of ``InferenceSession`` that are not onnxruntime objects: feature level, index mode,
onnxruntime's extra keyword arguments, and which engine runs the session."""

from __future__ import annotations

import functools
import types
from collections.abc import ItemsView, KeysView, Mapping, Sequence, ValuesView
from collections.abc import Set as AbstractSet
from typing import Any

from ..dml.enums import FeatureLevel
from ..errors import BadInputError
from ..kernels.options import IndexMode
from ..runtime.exceptions import with_onnxruntime_class
from .emulate import chosen_engine
from .providers import DML_EP, ProviderChoice, warn_caller

NO_MODEL_VERSION = 2**63 - 1
"""What onnxruntime reports as ``ModelMetadata.version`` when the model sets no ``model_version``."""

_ORT_KWARGS = ("enable_fallback", "read_config_from_model", "disabled_optimizers")
_DMLSHIM_KWARGS = ("feature_level", "engine", "index_mode")


def parse_feature_level(value: FeatureLevel | str | int) -> FeatureLevel:
    if isinstance(value, FeatureLevel):
        return value
    try:
        return FeatureLevel.parse(value)
    except ValueError as exc:
        raise BadInputError(str(exc), value=value) from exc


def parse_index_mode(value: IndexMode | str) -> IndexMode:
    try:
        return IndexMode(value)
    except ValueError:
        raise BadInputError(f"index_mode must be 'error' or 'clamp', not {value!r}", value=value) from None


def fallback_flag(kwargs: dict[str, Any]) -> bool:
    """onnxruntime's keyword arguments: ``enable_fallback`` is kept; the others have no dmlshim meaning."""
    unknown = sorted(set(kwargs) - set(_ORT_KWARGS))
    # onnxruntime ignores keyword arguments it does not know, so a program passing one runs there: it runs
    # here too, with a warning, unless the name is a misspelling of one of dmlshim's own.
    misspelt = []
    if unknown:
        import difflib  # only for a caller's unknown keyword: not on every session's import

        misspelt = [n for n in unknown if difflib.get_close_matches(n, _DMLSHIM_KWARGS, n=1, cutoff=0.75)]
    if misspelt:
        raise BadInputError(
            f"unknown keyword argument(s) {', '.join(misspelt)}; InferenceSession takes onnxruntime's "
            "(path_or_bytes, sess_options, providers, provider_options, enable_fallback=) and dmlshim's "
            "feature_level=, engine=, index_mode=",
            value=misspelt,
        )
    if unknown:
        warn_caller(
            f"InferenceSession ignores the keyword argument(s) {', '.join(unknown)}, as onnxruntime "
            "ignores keyword arguments it does not know"
        )
    return int(kwargs.get("enable_fallback", 1)) == 1


def disabled_optimizers(kwargs: dict[str, Any]) -> frozenset[str]:
    """onnxruntime's ``disabled_optimizers=`` keyword (``onnxruntime.transformers.optimizer`` passes it):
    the optimizers every onnxruntime session dmlshim builds for the session leaves out, as onnxruntime's
    own session would (:func:`dmlshim.runtime.real.optimizers_disabled`)."""
    names = kwargs.get("disabled_optimizers")
    if not names:
        return frozenset()
    wrong = [n for n in names if not isinstance(n, str)]
    if wrong:
        # onnxruntime's binding refuses it with a TypeError; str() made [1] a name no optimizer has
        raise with_onnxruntime_class(
            BadInputError(
                "initialize_session(): incompatible function arguments (dmlshim: disabled_optimizers holds "
                f"{type(wrong[0]).__name__} {wrong[0]!r}; it takes optimizer names, strings)",
                value=repr(wrong[0]),
                rule="disabled_optimizers holds optimizer names (str), as onnxruntime takes them",
            ),
            TypeError,
        )
    return frozenset(names)


def resolve_engine(requested: str | None, choice: ProviderChoice) -> str:
    """The engine a session runs on: ``engine=``, else (for an emulated session) ``$DMLSHIM_ORT_ENGINE``,
    else ``partitioned`` when DirectML is emulated and ``cpu`` when not."""
    if requested is None:
        return (chosen_engine() or "partitioned") if choice.emulates_dml else "cpu"
    if requested not in ("cpu", "directml") and not choice.emulates_dml:
        raise BadInputError(
            f"engine={requested!r} emulates DirectML, but providers {list(choice.names)} leave out "
            f"{DML_EP}; add it to providers, or drop engine= to run the whole model on the CPU",
            value=list(choice.names),
        )
    return requested


def tensor_name(name: Any, what: str) -> str:
    """An input or output name as onnxruntime's bindings take it: a ``str`` (``numpy.str_`` too), or
    ``bytes`` (read as UTF-8, as pybind11 converts them).

    Raises:
        BadInputError: anything else (also a ``TypeError``, as onnxruntime's "incompatible function
            arguments").
    """
    if isinstance(name, str):
        return str(name)
    if isinstance(name, bytes):
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            pass
    error = BadInputError(f"{what} names are strings; got {type(name).__name__} {name!r}", value=name)
    raise with_onnxruntime_class(error, TypeError)


def check_run_options(run_options: Any) -> None:
    """Refuse what onnxruntime's binding refuses as ``run_options``: anything but a ``RunOptions`` or None
    (a ``TypeError``; a partitioned run may never hand it to an onnxruntime session)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RunOptions

    if run_options is not None and not isinstance(run_options, RunOptions):
        error = BadInputError(
            f"run(): incompatible function arguments (dmlshim: run_options must be an onnxruntime.RunOptions "
            f"or None, not {type(run_options).__name__})",
            value=type(run_options).__name__,
        )
        raise with_onnxruntime_class(error, TypeError)


SHRINK_KEY = "memory.enable_memory_arena_shrinkage"
"""The run config entry onnxruntime checks before every run (its device list must name arenas the
session has), wherever the run's nodes execute."""


@functools.cache
def _arena_probe(arena: bool) -> Any:
    """An onnxruntime session of the nodeless probe model, with or without the CPU arena."""
    from ..runtime.real import OrtInferenceSession, ort
    from .session_copy import _probe_model

    so = ort.SessionOptions()
    so.enable_cpu_mem_arena, so.log_severity_level, so.intra_op_num_threads = arena, 3, 1
    return OrtInferenceSession(_probe_model(), so, providers=["CPUExecutionProvider"])


_POOL_READY = [False]


def global_thread_pool_ready() -> bool:
    """Whether onnxruntime's environment has its global thread pools (``set_global_thread_pool_sizes``
    before its first session), so that a session with ``use_per_session_threads = False`` loads: asked of
    onnxruntime on a nodeless session (once it answers yes; the environment keeps its pools). Without
    them onnxruntime refuses such a session, the program's own included, and its later sessions with
    threads of their own load as before: dmlshim's must not move to a pool that is not there."""
    if _POOL_READY[0]:
        return True
    from ..model.ort_errors import ORT_ERRORS
    from ..runtime.real import OrtInferenceSession, ort
    from .session_copy import _probe_model

    so = ort.SessionOptions()
    so.use_per_session_threads, so.log_severity_level = False, 3
    try:
        OrtInferenceSession(_probe_model(), so, providers=["CPUExecutionProvider"])
    except ORT_ERRORS:
        return False
    _POOL_READY[0] = True
    return True


def check_run_config(run_options: Any, sess_options: Any) -> None:
    """Refuse the run config entries onnxruntime refuses before a run starts (a memory arena shrink list
    naming a device or arena the session lacks: ``InvalidArgument``), also when no onnxruntime session
    runs (every node emulated). onnxruntime itself is asked, on a nodeless session with the same arena."""
    try:
        shrink = run_options.get_run_config_entry(SHRINK_KEY)
    except RuntimeError:  # not set: nothing onnxruntime checks
        return
    arena = bool(getattr(sess_options, "enable_cpu_mem_arena", True)) if sess_options is not None else True
    try:
        _arena_probe(arena).run(None, {}, run_options)
    except Exception as exc:  # onnxruntime's error classes share no useful base
        if type(exc).__module__.split(".")[0] != "onnxruntime":
            raise
        error = BadInputError(str(exc), value=shrink, rule=f"RunOptions config entry {SHRINK_KEY!r}")
        raise with_onnxruntime_class(error, type(exc)) from None


def check_feed_names(input_feed: Mapping[Any, Any]) -> None:
    """Refuse a feed key that is neither a str nor bytes, as onnxruntime's binding does (a ``TypeError``;
    bytes it decodes, so those are looked up as names)."""
    for name in input_feed:
        if type(name) is not str and not isinstance(name, (str, bytes)):
            error = BadInputError(
                f"run(): incompatible function arguments (dmlshim: input_feed keys are input names, strings; "
                f"got {type(name).__name__} {name!r})",
                value=name,
            )
            raise with_onnxruntime_class(error, TypeError)


def wanted_outputs(output_names: Sequence[Any] | None, outputs: Sequence[str]) -> list[str]:
    """The outputs ``run`` is asked for, as onnxruntime reads ``output_names``: None or empty means every
    output in graph order; any iterable of names (str or bytes) otherwise, names repeated as asked.

    Raises:
        BadInputError: a name that is not an output (also onnxruntime's ``InvalidArgument``); a single
            string, or a name that is not a string (also a ``TypeError``, as onnxruntime raises there).
    """
    if not output_names:
        return list(outputs)
    if isinstance(output_names, (str, bytes)):
        error = BadInputError(
            f"output_names must be a list of names or None, not the string {output_names!r}",
            value=output_names,
        )
        raise with_onnxruntime_class(error, TypeError)
    if not _names_container(output_names):
        # onnxruntime's binding (pybind11) takes a sequence, a set, a dict view or a generator of names
        error = BadInputError(
            f"output_names must be a list of names or None, not {type(output_names).__name__}",
            value=type(output_names).__name__,
        )
        raise with_onnxruntime_class(error, TypeError)
    # pybind11 reads a bytearray as it reads bytes (the session's binding; an IOBinding hashes names first)
    names = [tensor_name(bytes(n) if isinstance(n, bytearray) else n, "output") for n in output_names]
    if not names:  # a generator that yields nothing: onnxruntime's Python layer passes it on
        raise BadInputError(
            "At least one output should be requested. (dmlshim: output_names yielded no name; pass None "
            "for every output)"
        )
    known = frozenset(outputs)
    for name in names:
        if name not in known:
            # onnxruntime's words first ("Invalid output name:nope"), then dmlshim's explanation
            raise BadInputError(
                f"Invalid output name:{name} (dmlshim: {name!r} is not an output of the model "
                f"(outputs: {', '.join(outputs)}))",
                tensor=name,
            )
    return names


def _names_container(value: Any) -> bool:
    """Whether onnxruntime's binding converts ``value`` to a list of names (pybind11's rule, measured on
    onnxruntime 1.24 and 1.32): a sequence that is no mapping (list, tuple, deque, range, numpy array), a
    set, a dict's keys or values, a generator; not a dict, an iterator or a plain iterable."""
    if isinstance(value, Mapping):
        return False
    if isinstance(value, (AbstractSet, KeysView, ValuesView, ItemsView, types.GeneratorType)):
        return True
    kind = type(value)
    return hasattr(kind, "__getitem__") and hasattr(kind, "__len__")


def check_provider_list(providers: Any, kept: ProviderChoice) -> None:
    """``set_providers`` with a bare string: onnxruntime reads each character as a provider name and
    raises its ``RuntimeError`` ("Unknown Provider Type") after tearing its session down; dmlshim raises
    that class saying what to pass, and the session keeps ``kept``.

    Raises:
        BadInputError: ``providers`` is a string.
    """
    if not isinstance(providers, str):  # bytes: items that are no names (onnxruntime's ValueError)
        return
    error = BadInputError(
        f"providers must be a list of provider names, not the string {providers!r} (write [{providers!r}]); "
        f"the session keeps {list(kept.names)}",
        value=providers,
        rule="set_providers takes a list of provider names or (name, options) tuples",
    )
    raise with_onnxruntime_class(error, RuntimeError)
