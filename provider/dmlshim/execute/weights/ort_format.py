"""ORT-format models (onnxruntime's flatbuffer form, ``.ort`` files, as
``onnxruntime.tools.convert_onnx_models_to_ort`` writes them): read as ONNX through onnxruntime itself.

onnxruntime loads an ORT-format model wherever it loads an ONNX one (a path ending in ``.ort``, bytes
carrying the flatbuffer identifier ``ORTM``, or either when the session config entry
``session.load_model_format`` says ``ORT``). dmlshim works on an ``onnx.ModelProto``, so it has
onnxruntime load the model without optimizing it and save the graph it holds as ONNX
(``optimized_model_filepath``, into a private temporary folder removed at once); that graph is the one
onnxruntime runs, so the session answers as onnxruntime's session of the ``.ort`` file does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ...errors import BadModelError

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_KEY",
    "is_ort_format",
    "onnx_bytes_from_ort_format",
    "ort_format_bytes",
    "saved_graph_checked",
    "unoptimized_options",
]

FORMAT_KEY = "session.load_model_format"
"""The session config entry that names a model's format (``ORT`` or ``ONNX``) over onnxruntime's guess."""

_IDENTIFIER = b"ORTM"  # the flatbuffer file identifier of an ORT-format model (bytes 4 to 8)


def _format_entry(sess_options: object) -> str:
    from ...runtime.options_copy import config_entry

    return (config_entry(sess_options, FORMAT_KEY) or "") if sess_options is not None else ""


def is_ort_format(model: object, sess_options: object = None) -> bool:
    """Whether onnxruntime reads ``model`` (a path or serialized bytes) as an ORT-format model: as
    onnxruntime decides, the config entry when set, else the path's ``.ort`` ending, else the bytes'
    flatbuffer identifier."""
    entry = _format_entry(sess_options)
    if entry:
        return entry == "ORT"
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).endswith(".ort")
    if isinstance(model, (bytes, bytearray, memoryview)):
        head = bytes(memoryview(model)[:8])
        return len(model) > 8 and head[4:8] == _IDENTIFIER
    return False


def onnx_bytes_from_ort_format(model: str | os.PathLike[str] | bytes) -> bytes:
    """The serialized ONNX form of an ORT-format model, as onnxruntime holds it after loading.

    Raises:
        BadModelError: onnxruntime cannot load the model (with onnxruntime's error class and message).
    """
    from ...model.ort_errors import ORT_ERRORS
    from ...runtime.real import OrtInferenceSession, ort

    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else bytes(model)
    where = source if isinstance(source, str) else None
    with tempfile.TemporaryDirectory(prefix="dmlshim-ortformat-") as tmp:
        target = Path(tmp) / "model.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.optimized_model_filepath = str(target)
        options.add_session_config_entry(FORMAT_KEY, "ORT")
        options.add_session_config_entry("session.save_model_format", "ONNX")
        try:
            OrtInferenceSession(source, options, providers=["CPUExecutionProvider"])
        except ORT_ERRORS as exc:
            raise BadModelError(
                f"onnxruntime cannot load this ORT-format model: {exc}",
                path=where,
                rule="a model loads exactly when onnxruntime's own session creation accepts it",
            ) from exc
        data = target.read_bytes()
    logger.info("ORT-format model %s read as ONNX through onnxruntime", where or "<bytes>")
    return data


def ort_format_bytes(model: object) -> bytes:
    """An ONNX model (a ModelProto, its bytes or its path) in onnxruntime's ORT format, as onnxruntime
    saves it unoptimized: what a session whose options say ``session.load_model_format = ORT`` can load
    (dmlshim's probe models are ONNX)."""
    import onnx

    from ...runtime.real import OrtInferenceSession, ort

    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    with tempfile.TemporaryDirectory(prefix="dmlshim-ortformat-") as tmp:
        target = Path(tmp) / "model.ort"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.optimized_model_filepath = str(target)
        options.add_session_config_entry("session.save_model_format", "ORT")
        options.log_severity_level = 3
        OrtInferenceSession(source, options, providers=["CPUExecutionProvider"])
        return target.read_bytes()


def unoptimized_options(sess_options: object) -> object:
    """The options a session of an ORT-format model runs its ONNX form with: onnxruntime runs such a model's
    graph as saved, whatever ``graph_optimization_level`` says (its results are the same at every level),
    while the ONNX form at the default level would be optimized again (NCHWc convolutions, for one, round
    differently). A copy of the caller's options (:func:`dmlshim.runtime.options_copy.copy_options`) with
    optimization off, its profiling and ``optimized_model_filepath`` as the caller set them (the values
    ``add_initializer`` holds are read from the caller's object); the caller's object is never changed."""
    from ...runtime.options_copy import copy_options
    from ...runtime.real import ort

    if sess_options is None:
        options = ort.SessionOptions()
    else:  # the files the caller asked for are still written (copy_options leaves them out)
        profiling = bool(getattr(sess_options, "enable_profiling", False))
        options = copy_options(
            sess_options, profile_prefix=sess_options.profile_file_prefix if profiling else None
        )
        options.optimized_model_filepath = sess_options.optimized_model_filepath
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


class _NoGraphNameFinding(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "'name' of 'graph' is required" not in record.getMessage()


@contextlib.contextmanager
def saved_graph_checked() -> Iterator[None]:
    """While the ONNX form of an ORT-format model is checked: onnxruntime saves it with an empty graph name
    (its ``get_modelmeta().graph_name`` is empty too), which onnx.checker reports; the program never wrote
    that ONNX model, so the finding is not shown."""
    quiet = _NoGraphNameFinding()
    checker_log = logging.getLogger("dmlshim.model.modelcheck")
    checker_log.addFilter(quiet)
    try:
        yield
    finally:
        checker_log.removeFilter(quiet)
