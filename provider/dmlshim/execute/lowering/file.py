"""Writing a lowered model (``dmlshim lower``) with its weights where the source kept them.

Initializers the source held inside the .onnx file stay inside the lowered file. Those it kept as external
data go to one data file beside the lowered file, named after it (``OUT.onnx.data``), each at its own
64-byte aligned offset; the lowered file then runs standalone from its folder, as the source did. Both files
go through :mod:`dmlshim.fileio.files` (atomic, never over an input, ``--overwrite`` to replace).

Before it is written, the lowered model is checked with the rule dmlshim's loader applies to every model
(:func:`dmlshim.model.modelcheck.check_model`): onnxruntime decides. What onnx.checker finds on a lowered
model onnxruntime loads (with dmlshim's custom ops registered) is a warning, e.g. a graph input the source
declares with an element type and no shape; a model onnxruntime refuses is an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import BinaryIO

import onnx
import onnxruntime as ort
from google.protobuf.message import EncodeError
from onnx import numpy_helper

from ...errors import BadModelError, EngineUnavailableError
from ...fileio.external_data import ExternalRef, check_external_data
from ...fileio.files import check_output_file, write_onnx, write_stream
from ...fileio.nul_paths import location_read
from ...fileio.onnx_pieces import SourceBytes, copy_bytes, end_sparse, piece_writer
from ...graph import all_tensors
from ...model.ort_errors import ORT_ERRORS
from ...model.weightless import WEIGHTLESS_MIN_BYTES, without_weights
from ...model.zero_depth_scatternd import ort_crashes, without_empty_tuples
from ...runtime.real import OrtInferenceSession
from ..custom_ops.bridge import session_options_with_custom_ops

logger = logging.getLogger(__name__)

__all__ = ["ALIGNMENT", "check_lowered", "data_file_name", "external_refs", "write_lowered"]

ALIGNMENT = 64
"""Byte alignment of each tensor in the data file (lets onnxruntime map it)."""

_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def external_refs(path: str | os.PathLike[str]) -> list[ExternalRef]:
    """The tensors a model file keeps as external data, and their files (no weight is read). Only those
    of subgraphs count against the memory limit: ``write_lowered`` copies the top-level ones from their
    files a chunk at a time."""
    from ..weights.file_slices import read_weightless

    walked = read_weightless(path, WEIGHTLESS_MIN_BYTES)  # the inline weights stay unread in the file
    if walked is not None:
        proto, inline = walked
        for tensor in proto.graph.initializer:
            if tensor.name in inline:  # a reference into the model file itself: inline, not external data
                tensor.data_location = onnx.TensorProto.DEFAULT
                del tensor.external_data[:]
        return check_external_data(proto, path, read_below=0)
    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except (OSError, ValueError, RuntimeError) as exc:
        raise BadModelError(f"not a readable ONNX model: {exc}", path=os.fspath(path)) from exc
    return check_external_data(proto, path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_lowered(model: onnx.ModelProto, out: str | os.PathLike[str]) -> None:
    """Check a lowered model as dmlshim checks every model: onnxruntime decides whether it loads.

    onnx.checker runs first; only when it finds something is onnxruntime asked (a CPU session over a
    weightless copy, dmlshim's custom ops registered): a finding on a model onnxruntime loads is logged as
    a warning.

    Raises:
        BadModelError: onnxruntime refuses the lowered model (or cannot be asked: onnxruntime-extensions
            is not installed) and onnx.checker finds a defect.
    """
    where = os.fspath(out)
    try:
        # on the weightless copy, as the model check does: check_model serializes what it is given
        onnx.checker.check_model(without_weights(model))
        return
    except onnx.checker.ValidationError as exc:
        finding = _first_line(exc)
    try:
        options = session_options_with_custom_ops()
    except EngineUnavailableError as exc:
        raise BadModelError(
            f"the lowered model fails onnx.checker: {finding} (and whether onnxruntime loads it cannot be "
            f"checked: {exc})",
            path=where,
        ) from exc
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        OrtInferenceSession(
            without_weights(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except (EncodeError, *ORT_ERRORS) as exc:
        raise BadModelError(
            f"onnxruntime cannot load the lowered model: {_first_line(exc)}; onnx.checker: {finding}",
            path=where,
        ) from exc
    logger.warning("%s: onnx.checker finds %s; onnxruntime loads the lowered model", where, finding)


def data_file_name(out: str | os.PathLike[str]) -> str:
    """The data file beside a lowered model: its file name plus ``.data``."""
    return Path(out).name + ".data"


def _tensor_bytes(tensor: onnx.TensorProto) -> bytes:
    if tensor.HasField("raw_data"):
        return bytes(tensor.raw_data)
    if tensor.data_type == onnx.TensorProto.STRING:
        raise BadModelError(
            f"initializer {tensor.name!r} is a string tensor; ONNX keeps strings inside the model, not as "
            "external data",
            tensor=tensor.name,
        )
    return numpy_helper.to_array(tensor).tobytes()


def _reference(tensor: onnx.TensorProto, folder: str) -> SourceBytes:
    """Where the bytes of ``tensor`` (external data, already checked by the model check) lie."""
    entries = {e.key: e.value for e in tensor.external_data}
    file = os.path.join(folder, location_read(entries.get("location", "")))
    offset = int(entries.get("offset") or 0)
    length = entries.get("length")
    return SourceBytes(file, offset, int(length) if length else os.path.getsize(file) - offset)


def _externalise(
    model: onnx.ModelProto,
    names: Collection[str],
    location: str,
    folder: str | None,
    kept: Collection[str] = (),
) -> list[bytes | SourceBytes]:
    """Move the data of the tensors named in ``names`` out of ``model``, and of every tensor still kept as
    a reference into the source's files (``folder``: the source model's folder) but the top-level
    initializers named in ``kept``; return the pieces to write (padding included), in file order: bytes
    the model held, or where the bytes of a reference lie (copied when written; once for references to
    the same bytes, e.g. an initializer and the lowering's reshaped alias of it)."""
    pieces: list[bytes | SourceBytes] = []
    placed: dict[SourceBytes, int] = {}
    offset = 0
    for tensor in all_tensors(model.graph):
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if external and (folder is None or tensor.name in kept):
            continue  # (no source: a reference is left as it is)
        if tensor.name not in names and not external:
            continue
        if external and folder is not None:
            piece: bytes | SourceBytes = _reference(tensor, folder)
            size = piece.length
        else:
            piece = _tensor_bytes(tensor)
            size = len(piece)
        at = placed.get(piece) if isinstance(piece, SourceBytes) else None
        if at is not None:
            _point(tensor, location, at, size)
            continue
        pad = (-offset) % ALIGNMENT
        if pad:
            pieces.append(b"\0" * pad)
            offset += pad
        pieces.append(piece)
        if isinstance(piece, SourceBytes):
            placed[piece] = offset
        _point(tensor, location, offset, size)
        offset += size
    return pieces


def _point(tensor: onnx.TensorProto, location: str, offset: int, size: int) -> None:
    """Make ``tensor`` external data at ``offset`` in ``location`` (its values dropped from the model)."""
    for field in _DATA_FIELDS:
        tensor.ClearField(field)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(size))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _kept_in_source(model: onnx.ModelProto, source: str | None) -> dict[str, SourceBytes]:
    """The top-level initializers a model read without its weights keeps as references into its own
    .onnx file (``source``: the source held them inline): where their bytes lie."""
    if source is None:
        return {}
    name, folder = os.path.basename(source), os.path.dirname(os.path.abspath(source))
    return {
        t.name: _reference(t, folder)
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
        and next((e.value for e in t.external_data if e.key == "location"), None) == name
    }


def write_lowered(
    out: str | os.PathLike[str],
    model: onnx.ModelProto,
    external: Collection[str],
    *,
    source: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> Path | None:
    """Write ``model`` to ``out``; the tensors named in ``external`` go to the data file beside it.

    ``model`` is modified (those tensors become external references). With ``source`` (the file ``model``
    was read from without its weights: :func:`dmlshim.execute.weights.model_source.load_model`), weights
    still kept as references into the source's files are copied from there a chunk at a time, never held
    whole: those the source held inline (references into ``source`` itself) are written inline, the rest
    to the data file. Returns the data file written, or None when every tensor stays inside the model.

    Raises:
        BadInputError: a file is refused (exists without ``overwrite``, is an input, ...) or cannot be
            written, or a source file changed since it was read.
    """
    sources = tuple(inputs)
    if ort_crashes():  # the file is for onnxruntime: never a node that kills this one
        rewritten = without_empty_tuples(model)
        if rewritten is not None:
            model.CopyFrom(rewritten)
    target = Path(os.fspath(out))
    location = data_file_name(target)
    data_path = target.parent / location
    where = os.fspath(source) if source is not None else None
    inline = _kept_in_source(model, where)
    folder = os.path.dirname(os.path.abspath(where)) if where is not None else None
    pieces = _externalise(model, frozenset(external), location, folder, inline.keys())
    check_output_file(target, overwrite=overwrite, inputs=sources)
    if pieces:
        check_output_file(data_path, overwrite=overwrite, inputs=sources, what="external data file")

        def writer(handle: BinaryIO) -> None:
            for piece in pieces:
                if isinstance(piece, SourceBytes):
                    copy_bytes(handle, piece)
                else:
                    handle.write(piece)
            end_sparse(handle)

        write_stream(data_path, writer, overwrite=overwrite, inputs=sources, what="external data file")
    if inline:
        write_stream(target, piece_writer(model, target, inline), overwrite=overwrite, inputs=sources)
    else:
        write_onnx(target, model, overwrite=overwrite, inputs=sources)
    if not pieces:
        return None
    written = sum(p.length if isinstance(p, SourceBytes) else len(p) for p in pieces)
    logger.info("wrote %d bytes of external data to %s", written, data_path)
    return data_path
