"""What onnxruntime's session keeps of its arguments: its own copy of the ``SessionOptions`` and the
options each of its providers reports.

onnxruntime's ``get_session_options()`` is not the caller's object but the session's own copy, made when the
session was built (the same object on every call): changing it later changes neither the session nor the
caller's object, and changing the caller's object later does not show in it. Its
``get_provider_options()`` is what each provider reports, not what was given (the CPU provider reports
``{}`` whatever it was given). onnxruntime cannot copy a ``SessionOptions`` in Python, so dmlshim asks it:
one onnxruntime session over a model with no nodes, built with the caller's options and the providers
onnxruntime has here (the emulated DirectML provider left out), gives both answers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper

from ..model.ort_errors import ORT_ERRORS
from ..runtime.real import OrtInferenceSession, ort
from .providers import DML_EP, ProviderChoice
from .session_options import copy_options

logger = logging.getLogger(__name__)

__all__ = ["SessionCopy", "session_copy"]

_PROBE_LOCK = threading.Lock()
"""The caller's options are briefly changed while onnxruntime copies them (so that the copy writes no
file): one copy at a time."""


@dataclass(frozen=True)
class SessionCopy:
    """onnxruntime's answers for a session built with some options and providers.

    Attributes:
        options: the session's own ``SessionOptions`` (what ``get_session_options()`` returns).
        provider_options: each provider's options as onnxruntime reports them (providers onnxruntime does
            not have here, such as the emulated DirectML provider, are missing).
    """

    options: Any
    provider_options: dict[str, dict[str, str]] = field(default_factory=dict)

    def provider_options_for(self, choice: ProviderChoice) -> dict[str, dict[str, str]]:
        """``get_provider_options()`` for ``choice``: onnxruntime's report for each provider it has; ``{}``
        for the emulated DirectML provider, as onnxruntime-directml's reports (its provider keeps no
        options to report, whatever it was given)."""
        return {
            name: dict(self.provider_options.get(name, given)) if name != DML_EP else {}
            for name, given in zip(choice.names, choice.options, strict=True)
        }


def _probe_model(config: Sequence[Any] = ()) -> bytes:
    """A model with no nodes, carrying ``config`` (the model's ``ort_config`` metadata) as onnxruntime
    reads it with ``ORT_LOAD_CONFIG_FROM_MODEL``."""
    anchor = helper.make_tensor("dmlshim.options.anchor", onnx.TensorProto.FLOAT, [0], [])
    output = helper.make_tensor_value_info(anchor.name, anchor.data_type, [0])
    graph = helper.make_graph([], "dmlshim_options_probe", [], [output], [anchor])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    model.metadata_props.extend(config)
    return bytes(model.SerializeToString())


_PROBE = _probe_model()

_SILENCED = (
    "enable_profiling",
    "optimized_model_filepath",
    "log_severity_level",
    "intra_op_num_threads",
    "inter_op_num_threads",
)
"""What the probe kept must not act on (it would write files, warn, or keep a thread pool of its own alive
as long as the copy); given back to the copy afterwards."""


@contextmanager
def _silenced(so: Any, names: Sequence[str] = _SILENCED) -> Iterator[tuple[Any, ...]]:
    """``so`` without ``names`` (profiling, optimized-model file, warnings, threads) for a probe, restored
    after; yields the values the probe saw."""
    saved = {name: getattr(so, name) for name in names}
    quiet = {
        "enable_profiling": False,
        "optimized_model_filepath": "",
        "log_severity_level": max(int(so.log_severity_level), 3),
        "intra_op_num_threads": 1,
        "inter_op_num_threads": 1,
    }
    for name in names:
        setattr(so, name, quiet[name])
    try:
        yield tuple(quiet[name] for name in names)
    finally:
        for name, value in saved.items():
            setattr(so, name, value)


def _without_files(so: Any) -> contextlib.AbstractContextManager[Any]:
    """The caller's object is changed (briefly, under the lock) only when it asks for files: profiling or
    an optimized model, which the first probe must not write."""
    if so.enable_profiling or so.optimized_model_filepath:
        return _silenced(so, ("enable_profiling", "optimized_model_filepath"))
    return contextlib.nullcontext()


def _drop_profile(probe: Any) -> None:
    """A probe whose options the model's configuration turned profiling on for: its profile is no one's."""
    if probe._sess.session_options.enable_profiling:
        with contextlib.suppress(OSError):
            os.remove(probe.end_profiling())


def _readable_copy(so: Any) -> Any:
    out = copy_options(so)
    if so is not None:
        out.enable_profiling, out.profile_file_prefix = so.enable_profiling, so.profile_file_prefix
        out.optimized_model_filepath = so.optimized_model_filepath
    return out


def session_copy(
    so: Any, choice: ProviderChoice, *, config: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> SessionCopy:
    """onnxruntime's own copy of ``so`` (its defaults when None) and its provider options for ``choice``.

    ``config`` (the model's ``ort_config`` metadata) and ``kwargs`` (the constructor's
    ``read_config_from_model``) make onnxruntime finalise the options from the model as it would for the
    session. Two probes: the first copies the caller's object (changed only while it asks for files), the
    second copies that private copy with one thread each way and no files or warnings, so that the copy
    kept holds no thread pool of its own; the values silenced are given back to it. When onnxruntime
    cannot build the probe with these options (options that name initializers the probe lacks, an
    ORT-format load switch, ...), the copy is :func:`~dmlshim.ort.session_options.copy_options` (every
    property and the well-known config entries) and the provider options are as given.
    """
    providers = [(n, o) for n, o in zip(choice.names, choice.options, strict=True) if n != DML_EP]
    extra = {k: v for k, v in (kwargs or {}).items() if k == "read_config_from_model"}
    model = _probe_model(config) if config else _PROBE
    given = so if so is not None else ort.SessionOptions()  # onnxruntime's defaults
    try:
        with _PROBE_LOCK:
            with _without_files(given) as files_silenced:
                first = OrtInferenceSession(model, given, providers=providers, **extra)
            _drop_profile(first)
            private = first._sess.session_options
            if files_silenced:  # the caller's files, as the first probe would have reported them
                private.enable_profiling, private.optimized_model_filepath = (
                    given.enable_profiling,
                    given.optimized_model_filepath,
                )
            with _silenced(private) as quiet:
                probe = OrtInferenceSession(model, private, providers=providers, **extra)
    except ORT_ERRORS as exc:
        logger.debug("onnxruntime cannot copy these session options (%s); copying what can be read", exc)
        return SessionCopy(_readable_copy(so), {})
    _drop_profile(probe)
    options = probe._sess.session_options  # keeps the probe alive, as onnxruntime's keeps its session
    for name, set_here in zip(_SILENCED, quiet, strict=True):
        if getattr(options, name) == set_here:  # left as the probe had it: the first copy's value
            setattr(options, name, getattr(private, name))
    # onnxruntime makes ORT_PARALLEL sequential with one inter-op thread, as the probe had: the first copy's
    options.execution_mode = private.execution_mode
    reported = probe.get_provider_options().items()
    as_strings = {str(name): {str(k): str(v) for k, v in opts.items()} for name, opts in reported}
    return SessionCopy(options, as_strings)
