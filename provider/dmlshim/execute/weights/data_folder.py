"""Where onnxruntime finds a model's external data, with or without the session config entry
``session.model_external_initializers_file_folder_path`` (``FOLDER_KEY``), and what it refuses.

Measured on onnxruntime 1.32 and 1.24.4 (``tests/test_data_folder50.py`` asks the installed one):

* A model given as **bytes**, ``FOLDER_KEY`` naming a folder (relative: from the working directory): its
  data is read from that folder at every optimization level, never from the working directory; a file
  missing there is refused with onnxruntime's failed-check class (``Fail`` in 1.32, ``RuntimeException``
  in 1.24.4). Both versions alike.
* Bytes, ``FOLDER_KEY`` unset or empty: the data is read from the working directory with graph
  optimizations off. With them on, onnxruntime fails (``Fail``, "model_path must not be empty") as soon as
  an optimizer reads an external initializer's value (constant sharing reads every initializer of at most
  8 elements; which others are read depends on the graph), in both versions: onnxruntime itself is asked,
  with a session of the bytes. A file missing from the working directory: 1.32 refuses it with ``Fail`` at
  every level; 1.24.4 with ``RuntimeException`` with optimizations off, and with optimizations on with
  ``Fail`` or ``RuntimeException`` depending on the graph: then onnxruntime is asked too (the build fails
  before any weight is read).
* A model **file**, ``FOLDER_KEY`` naming a folder that holds the data: read from there (both versions).
  Naming one that lacks it: 1.32 refuses (``Fail``); 1.24.4 reads the model's own folder. The installed
  onnxruntime is asked (:func:`named_folder_refusal`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import onnx

from ...errors import BadModelError
from ...fileio.external_data import external_tensors
from ...fileio.nul_paths import location_read
from ...model.modelcheck import load_external_data
from ...runtime.exceptions import check_failure_class, with_onnxruntime_class
from ...runtime.options_copy import FOLDER_KEY, config_entry
from ...runtime.real import pybind_state

logger = logging.getLogger(__name__)

__all__ = ["load_in_memory_external_data", "named_folder", "named_folder_refusal"]


def named_folder(sess_options: Any) -> str | None:
    """The folder ``FOLDER_KEY`` names in ``sess_options`` (None when unset or empty: onnxruntime then
    looks beside the model, or for bytes in the working directory)."""
    folder = config_entry(sess_options, FOLDER_KEY) if sess_options is not None else None
    return folder or None


def _locations(proto: onnx.ModelProto) -> list[tuple[str, str]]:
    """(tensor name, location) of every external-data tensor of ``proto``."""
    tensors = external_tensors(proto.graph) if proto.HasField("graph") else []
    return [
        (t.name, location_read(next((e.value for e in t.external_data if e.key == "location"), "")))
        for t in tensors
    ]


def load_in_memory_external_data(proto: onnx.ModelProto, model: bytes, sess_options: Any) -> None:
    """Read, as onnxruntime reads it, the external data of a model given as bytes (``proto``, parsed from
    ``model``): from the folder ``FOLDER_KEY`` names, else from the working directory (see the module's
    notes for what each onnxruntime does). A file missing from the named folder is refused here; one
    missing from the working directory is left for the model check to refuse (it names the tensor), unless
    onnxruntime, asked, refuses the model otherwise.

    Raises:
        BadModelError: with onnxruntime's class: a file is missing from the named folder, a location leaves
            the folder, or onnxruntime refuses the bytes (asked when optimizations are on and no folder is
            named).
    """
    located = _locations(proto)
    if not located:
        return
    folder = named_folder(sess_options)
    base = folder if folder is not None else os.getcwd()
    missing = [(name, loc) for name, loc in located if not loc or not os.path.isfile(os.path.join(base, loc))]
    if folder is not None and missing:
        name, loc = missing[0]
        where = os.path.join(folder, loc)
        error = BadModelError(
            f"External data path validation failed for initializer: {name}. External data path does not "
            f'exist: "{where}" (the folder {FOLDER_KEY} names, {folder!r}, is where onnxruntime looks for '
            "the external data of a model given as bytes, not the working directory)",
            tensor=name,
            value=where,
            rule=f"external data is read from the folder {FOLDER_KEY} names",
        )
        raise with_onnxruntime_class(error, check_failure_class())
    if folder is None and _optimized(sess_options):
        _ask_onnxruntime(proto, model, sess_options)
    if missing:
        return  # the model check refuses it, naming the tensor (onnxruntime refuses it too)
    logger.debug("external data of a model given in memory read from %s", os.path.abspath(base))
    try:
        load_external_data(proto, Path(os.path.abspath(base)) / "<model given in memory>")
    except BadModelError as exc:  # e.g. a location leaving the folder: onnxruntime's Fail
        exc.path = None
        raise with_onnxruntime_class(exc, pybind_state.Fail) from exc.__cause__


def _optimized(sess_options: Any) -> bool:
    """Whether ``sess_options`` (None: onnxruntime's defaults) leave graph optimizations on."""
    from ...runtime.real import ort as real_ort

    level = getattr(sess_options, "graph_optimization_level", real_ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return bool(level != real_ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def _ask_onnxruntime(proto: onnx.ModelProto, model: bytes, sess_options: Any) -> None:
    """Raise what onnxruntime raises building a CPU session of ``model`` (bytes whose external data it
    looks for in the working directory) with a copy of ``sess_options`` (no profile or optimized model is
    written): whether an optimizer reads an external initializer is onnxruntime's own affair."""
    from ...model.ort_errors import ORT_ERRORS, ort_load_error, unknown_operators
    from ...runtime.options_copy import copy_options
    from ...runtime.real import OrtInferenceSession

    if unknown_operators(proto):  # a custom-op library the options register cannot be copied
        logger.info("not asking onnxruntime about the bytes' external data: the model has custom operators")
        return
    options = copy_options(sess_options)
    options.log_severity_level = 4  # the refusal is raised, not logged as well
    logger.debug("asking onnxruntime whether it reads the bytes' external data from the working directory")
    try:
        OrtInferenceSession(model, options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise ort_load_error(proto, "the model", exc) from exc


def named_folder_refusal(proto: onnx.ModelProto, sess_options: Any, path: str) -> None:
    """Raise what the installed onnxruntime raises for a model file whose external data is missing from
    the folder ``FOLDER_KEY`` names. onnxruntime 1.32 refuses it (``Fail``: it looks in that folder only);
    1.24.4 reads the model's own folder, as dmlshim then does. onnxruntime itself is asked, and only then:
    no session is built for a model whose data is there."""
    folder = named_folder(sess_options)
    if folder is None:
        return
    if all(not loc or os.path.exists(os.path.join(folder, loc)) for _, loc in _locations(proto)):
        return
    from ...model.ort_errors import ORT_ERRORS, ort_load_error
    from ...runtime.options_copy import copy_options
    from ...runtime.real import OrtInferenceSession

    options = copy_options(sess_options)
    options.log_severity_level = 4  # the refusal is raised, not logged as well
    options.add_session_config_entry(FOLDER_KEY, folder)  # not among the entries copy_options carries
    try:
        OrtInferenceSession(path, options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise ort_load_error(proto, "the model", exc, path=path) from exc
    logger.info(
        "external data missing from the folder %s names: onnxruntime reads the model's folder", FOLDER_KEY
    )
