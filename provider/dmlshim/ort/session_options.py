"""What ``sess_options`` means for a dmlshim session: the same as in onnxruntime, for the whole model.

A dmlshim session runs the model as several onnxruntime sessions (CPU partitions, one-node fallbacks)
around the emulated gather/scatter nodes. The caller's ``SessionOptions`` therefore cannot be handed to each
of them unchanged: ``optimized_model_filepath`` would be written once per partition (each time with a
fragment) and profiling would give one file per partition. Instead:

* the engine's onnxruntime sessions get a copy of the options without ``optimized_model_filepath``, and
  with profiling redirected to a private folder that :mod:`dmlshim.ort.profiling` merges from;
* ``optimized_model_filepath`` is honoured by one onnxruntime CPU session over the *whole* model, built
  with the caller's own options, whose output is then written to the path through the careful writer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from ..errors import BadInputError
from ..execute.feeds import NodeArg
from ..fileio import files
from ..fileio.confined import confined_path
from ..model.modelcheck import ort_load_error
from ..model.ort_errors import unknown_operators
from ..runtime.exceptions import with_onnxruntime_class
from ..runtime.options_copy import (
    COPIED_ATTRIBUTES,
    COPIED_CONFIG_KEYS,
    FOLDER_KEY,
    config_entry,
    copy_options,
    onnxruntime_errors,
)
from ..runtime.real import OrtInferenceSession
from .free_dims import overrides_by_name

logger = logging.getLogger(__name__)

__all__ = [  # the copy's names are read from here too
    "COPIED_ATTRIBUTES",
    "COPIED_CONFIG_KEYS",
    "check_session_options",
    "config_entry",
    "copy_options",
    "engine_options",
    "engine_options_and_copier",
    "sharable_options",
    "write_optimized_model",
    "write_session_file",
]

GRAPH_ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"
EXTERNAL_FILE_KEY = "session.optimized_model_external_initializers_file_name"
EXTERNAL_MIN_SIZE_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"


def engine_options(
    so: Any,
    *,
    profile_prefix: str | None,
    without_added: bool = False,
    weights_folder: str | None = None,
    free_dimensions: Mapping[str, int] | None = None,
    private: bool = False,
) -> ort.SessionOptions | None:
    """The options the engine builds its onnxruntime sessions with (None: the engine's own defaults).

    The caller's own object when it asks for neither profiling nor an optimized model file, so that
    everything it holds (custom-op libraries, free dimension overrides, added initializers) reaches the
    partitions; otherwise a copy (see :func:`copy_options`) that writes no file of its own, overriding
    ``free_dimensions`` by name as the caller's object does. A copy too
    with ``without_added``: the model already holds the values added through
    ``add_external_initializers``, which onnxruntime would refuse to apply to a partition.

    With ``weights_folder`` (the model was read without its weights, and :func:`sharable_options` found
    that a copy carries everything the caller's options hold): always a copy, with ``free_dimensions``
    overridden by name and the folder its weights' external-data references are relative to, so that
    onnxruntime reads the weights from the model's files. The caller's object is never changed.

    With ``private`` (:func:`sharable_options` found that a copy means all the caller's options mean): a
    copy in every case, taken now, so that sessions the engine builds later see the options as they were
    when the dmlshim session was built, as onnxruntime's would.
    """
    if so is None:
        return None
    if weights_folder is not None:
        out = copy_options(so, profile_prefix=profile_prefix)
        for name, value in (free_dimensions or {}).items():
            out.add_free_dimension_override_by_name(name, value)
        out.add_session_config_entry(FOLDER_KEY, weights_folder)
        return out
    if (
        not so.enable_profiling
        and not so.optimized_model_filepath
        and profile_prefix is None
        and not without_added
        and not private
    ):
        return so
    out = copy_options(so, profile_prefix=profile_prefix)
    for name, value in (free_dimensions or {}).items():  # the caller's overrides cannot be copied
        out.add_free_dimension_override_by_name(name, value)
    return out


def engine_options_and_copier(
    so: Any, **kwargs: Any
) -> tuple[ort.SessionOptions | None, Callable[[], ort.SessionOptions] | None]:
    """:func:`engine_options` (same arguments), and what makes a new options object equal to them for one
    session that adds to them (``EngineConfig.fresh_options``), or None when they are the caller's own
    object (never copied or changed here: a copy may not mean all it means) or None. A new object is
    copied from the engine's, taken when the session was built, never from the caller's object as the
    program may have changed it since."""
    engine_so = engine_options(so, **kwargs)
    if engine_so is None or engine_so is so:
        return engine_so, None
    dims = dict(kwargs.get("free_dimensions") or {})
    weights_folder = kwargs.get("weights_folder")

    def make() -> ort.SessionOptions:
        # profiling too (into the engine's private folder): the profile merges this session's events
        out = copy_options(
            engine_so, profile_prefix=engine_so.profile_file_prefix if engine_so.enable_profiling else None
        )
        for name, value in dims.items():  # overrides cannot be read back from engine_so
            out.add_free_dimension_override_by_name(name, value)
        if weights_folder is not None and config_entry(out, FOLDER_KEY) is None:
            out.add_session_config_entry(FOLDER_KEY, weights_folder)
        return out

    return engine_so, make


def sharable_options(so: Any, model: onnx.ModelProto, inputs: Sequence[NodeArg]) -> dict[str, int] | None:
    """Whether a copy of ``so`` (:func:`copy_options`) means for ``model`` all that ``so`` means, so that the
    engine may build its onnxruntime sessions from a copy that reads the weights from the model's files:
    the free dimensions the copy must override (by name), or None when it cannot.

    A copy carries every property and the well-known config entries; what ``so`` holds but cannot give
    back decides. Values added through ``add_initializer`` / ``add_external_initializers`` are in the
    model the engine runs already. None when the model has an operator onnxruntime does not define (a
    custom-op library the options registered defines it), when the options name providers of their own,
    or when the free dimensions onnxruntime fixes in ``inputs`` (``inputs``: the graph inputs as the session
    reports them, overrides applied) are not all fixed by name (an override by denotation).
    """
    if so is None:
        return {}
    has_providers = getattr(so, "has_providers", None)  # onnxruntime 1.23 on
    if has_providers is not None and has_providers():
        logger.debug("the session options name providers: the engine uses them as they are")
        return None
    unknown = unknown_operators(model)
    if unknown:
        logger.debug(
            "operators onnxruntime does not define (%s): the engine uses the options as they are",
            unknown[0].op_type,
        )
        return None
    return overrides_by_name(model, inputs)


def check_session_options(so: Any) -> None:
    """Refuse what is not an ``onnxruntime.SessionOptions`` (or None) in the ``sess_options`` position.

    Raises:
        BadInputError: a feature level or other value given where onnxruntime's order puts the options,
            or options onnxruntime refuses before it reads the model (a log severity level outside -1..4).
    """
    if so is None:
        return
    if isinstance(so, ort.SessionOptions):
        _check_log_severity(so)
        return
    hint = ""
    if isinstance(so, (str, int)) or type(so).__name__ == "FeatureLevel":
        hint = (
            f"; to choose the DirectML feature level write feature_level={so!r} (dmlshim's own options are "
            "keyword-only since the second argument is onnxruntime's sess_options)"
        )
    raise BadInputError(
        f"sess_options must be an onnxruntime.SessionOptions or None, not {type(so).__name__}{hint}",
        value=so,
        rule="InferenceSession(path_or_bytes, sess_options=None, providers=None, provider_options=None)",
    )


def _check_log_severity(so: Any) -> None:
    """Refuse a ``log_severity_level`` onnxruntime refuses at session creation (-1, the environment's
    default, or 0 verbose .. 4 fatal), as it refuses it: a session with no onnxruntime part of its own
    (every node emulated) would otherwise take it."""
    level = int(so.log_severity_level)
    if -1 <= level <= 4:
        return
    refused = BadInputError(
        f"Invalid session log severity level. Not a valid onnxruntime::logging::Severity value: {level}",
        value=level,
        rule="SessionOptions.log_severity_level is -1 (the default) or 0 (verbose) to 4 (fatal)",
    )
    raise with_onnxruntime_class(refused, RuntimeError)


def write_optimized_model(
    model: onnx.ModelProto,
    model_path: str | None,
    so: Any,
    *,
    from_proto: bool = False,
    source_path: str | None = None,
) -> Path | None:
    """Honour ``so.optimized_model_filepath`` for the whole model, as onnxruntime does.

    One onnxruntime CPU session is built over the whole, unpartitioned model with the caller's options
    (graph optimization level included); onnxruntime writes the optimized graph to a private folder and
    the result is then written to the requested path (``from_proto``: onnxruntime reads ``model``, which
    holds values the options added, instead of the file). The file therefore holds what onnxruntime's CPU
    provider would run for this model, not dmlshim's partitions: gather/scatter nodes appear as ordinary
    ONNX nodes (possibly folded or fused by onnxruntime's optimizers).

    ``source_path``: the file the program gave when ``model`` was read from another (an ORT-format
    model's), never written over either.

    Returns:
        The path written, or None when no optimized model was asked for.

    Raises:
        BadModelError: onnxruntime cannot load the model.
        BadInputError: the path cannot be written (it is the model itself, a directory, ...).
    """
    target = getattr(so, "optimized_model_filepath", "") if so is not None else ""
    if not target:
        return None
    what = "optimized model (optimized_model_filepath)"
    # checked as given: Path() would drop a trailing "/" that names a folder
    try:
        target_path = files.check_output_file(
            target, overwrite=True, inputs=(model_path, source_path), what=what
        )
    except BadInputError as refused:
        # onnxruntime raises a plain RuntimeError where it cannot write this file (a folder: "SystemError")
        raise with_onnxruntime_class(refused, RuntimeError) from None
    weights_file = config_entry(so, EXTERNAL_FILE_KEY) or ""
    if weights_file:
        # Refused before onnxruntime writes anything: it writes the file beside the staged model, so a
        # name leaving the folder ('../w.bin') would replace a file beside the staging folder, in the
        # temporary directory. What is there now at the target may be replaced; a file appearing there
        # meanwhile is someone else's.
        weights_target = _weights_path(target_path.parent, weights_file)
        _refuse_linked_folders(target_path.parent, weights_target)
        files.remember_output(weights_target)
    with tempfile.TemporaryDirectory(prefix="dmlshim-optimized-") as tmp:
        staged = Path(tmp) / ("optimized" + "".join(target_path.suffixes[-1:]))
        if weights_file:
            _mirror_folders(target_path.parent, _weights_path(Path(tmp), weights_file).parent, Path(tmp))
        copy = copy_options(so)
        for key in ("session.save_model_format", EXTERNAL_FILE_KEY, EXTERNAL_MIN_SIZE_KEY):
            value = config_entry(so, key)
            if value is not None:
                copy.add_session_config_entry(key, value)
        weights_name = config_entry(so, EXTERNAL_FILE_KEY) or ""
        copy.optimized_model_filepath = str(staged)
        copy.log_severity_level = max(int(so.log_severity_level), 3)
        source: Any = model_path if model_path is not None and not from_proto else model.SerializeToString()
        try:
            OrtInferenceSession(source, copy, providers=["CPUExecutionProvider"])
        except onnxruntime_errors() as exc:
            raise ort_load_error(model, "the whole model (for optimized_model_filepath)", exc) from exc
        if not staged.is_file():
            raise BadInputError(
                "onnxruntime wrote no optimized model", path=str(target_path), value=str(target_path)
            )
        data = staged.read_bytes()
        if weights_name:
            _move_weights(Path(tmp), weights_name, target_path, model_path)
    try:
        written = write_session_file(target_path, data, what=what, inputs=(model_path, source_path))
    except BadInputError as refused:
        raise with_onnxruntime_class(refused, RuntimeError) from None
    logger.info("optimized whole model written to %s", written)
    return written


def _weights_path(folder: Path, name: str) -> Path:
    """The external-initializers file ``name`` beside an optimized model in ``folder``; refused when the
    name leaves the folder (absolute, ``..``)."""
    try:
        return confined_path(folder, name, what=f"session config {EXTERNAL_FILE_KEY!r}")
    except BadInputError as exc:
        raise BadInputError(
            exc.message, value=name, rule="the file is named relative to the optimized model"
        ) from None


def _refuse_one_file_for_both(model: Path, weights: Path) -> None:
    """Refuse an external-initializers file onnxruntime wrote (an initializer reached the minimum size)
    that is the optimized model's own file (``o.onnx`` for both, or a link to it): onnxruntime writes
    both to the one name, so the weights replace the model (a file no session can load); dmlshim wrote
    the model over the weights (a model whose weights are gone). Checked before either is written."""
    same = os.path.abspath(model) == os.path.abspath(weights)
    with contextlib.suppress(OSError, ValueError):
        same = same or os.path.samefile(model, weights)
    if same:
        refused = BadInputError(
            f"the optimized model's external initializers ({EXTERNAL_FILE_KEY}) name the optimized model "
            "itself; one file cannot hold both: give the weights another name",
            path=str(weights),
            rule="the file is named relative to the optimized model",
        )
        raise with_onnxruntime_class(refused, RuntimeError)


def _refuse_linked_folders(root: Path, weights: Path) -> None:
    """Refuse a folder between the optimized model's folder and its external-initializers file that is a
    symbolic link (onnxruntime writes through it, replacing a file of the link's target)."""
    current = root
    for part in weights.parent.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            refused = BadInputError(
                f"the optimized model's external initializers ({EXTERNAL_FILE_KEY}) would be written "
                f"through the symbolic link {str(current)!r}; dmlshim does not write through links",
                path=str(weights),
                rule="the file is named relative to the optimized model",
            )
            raise with_onnxruntime_class(refused, RuntimeError)


def _mirror_folders(root: Path, staged_folder: Path, staged_root: Path) -> None:
    """Make in the staging folder the subfolders that exist on the way to the external-initializers file
    beside the target (``sub/w.bin``): onnxruntime writes into an existing folder and fails on a missing
    one, so only the folders it would find beside the target are made."""
    relative = staged_folder.relative_to(staged_root)
    if relative.parts and (root / relative).is_dir():
        staged_folder.mkdir(parents=True, exist_ok=True)


def _move_weights(staged_dir: Path, name: str, target: Path, model_path: str | None) -> None:
    """Write the external-initializers file onnxruntime put beside the staged optimized model to the
    same place beside the target (``name`` must stay in that folder, as onnxruntime requires)."""
    relative = _weights_path(staged_dir, name)
    if not relative.is_file():
        logger.debug("onnxruntime wrote no external initializers file %s (no initializer large enough)", name)
        return
    destination = target.parent / relative.relative_to(staged_dir)
    _refuse_one_file_for_both(target, destination)
    write_session_file(
        destination,
        relative.read_bytes(),
        what=f"optimized model's external initializers ({EXTERNAL_FILE_KEY})",
        inputs=(model_path,),
    )


def write_session_file(path: Path, data: bytes, *, what: str, inputs: tuple[str | None, ...] = ()) -> Path:
    """Write a file the session produces (optimized model, profile) through the careful writer: atomic,
    replacing an older one as onnxruntime does, but never an input, a directory or a device."""
    written: Path = files.write_bytes(path, data, overwrite=True, inputs=inputs, what=what)
    return written
