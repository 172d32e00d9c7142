"""External-data initializers: checked in full before a byte of them is read.

An ONNX tensor may keep its bytes in another file (``data_location = EXTERNAL`` with ``location``,
``offset`` and ``length`` entries). dmlshim reads such files only when every entry is sound:

* ``location`` is a relative path that stays inside the model's folder (links included); one holding a NUL
  is read up to it, as onnxruntime reads it (:func:`dmlshim.fileio.nul_paths.location_read`), and the
  rules apply to that name;
* the file is a regular file (a FIFO would block the read forever);
* ``offset`` and ``length`` are non-negative decimal integers, ``length`` matches the tensor's dims and
  type, and ``offset + length`` lies within the file;
* the bytes of all external tensors together fit in the memory limit (:mod:`dmlshim.limits`), and with
  the model in one 2 GiB protobuf message (dmlshim hands models to onnx and onnxruntime as one message).
"""

from __future__ import annotations

import logging
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from ..errors import BadModelError, TooLargeError
from ..graph import all_tensors
from ..limits import _itemsize, check_bytes, format_bytes
from .nul_paths import location_read

__all__ = [
    "EXTERNAL_DATA_RULE",
    "ExternalRef",
    "check_external_data",
    "external_tensors",
    "load_external_data",
]

logger = logging.getLogger(__name__)

EXTERNAL_DATA_RULE = "external data must lie in the model's folder"
PROTOBUF_LIMIT = (1 << 31) - 1
"""The largest protobuf message (bytes): a model with its weights loaded must fit in one."""


@dataclass(frozen=True)
class ExternalRef:
    """One external-data tensor, checked: the file, where its bytes start, how many there are."""

    tensor: str
    file: Path | None
    offset: int
    length: int | None


_EXTERNAL_FIELD = bytes([14 << 3, TensorProto.EXTERNAL])
"""``data_location = EXTERNAL`` (TensorProto field 14, a varint) as protobuf serializes it."""
_SCAN_MAX_BYTES = 16 << 20
"""Largest graph whose serialized bytes are searched for that field before walking it for tensors."""


def external_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every tensor of the graph and its subgraphs that keeps its data in an external file."""
    # A top-level initializer kept outside (every model read without its weights has them) answers
    # the question the serialized bytes would: the walk is due anyway.
    if not any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer) and not _may_be_external(
        graph
    ):
        return []
    return [t for t in all_tensors(graph) if t.data_location == TensorProto.EXTERNAL]


def _may_be_external(graph: onnx.GraphProto) -> bool:
    """False when no tensor of the graph can keep its data outside: the graph's serialized bytes (one C
    call, where a walk of 20,000 nodes' attributes takes tens of milliseconds in Python) do not contain
    the field that says so. A small graph only: a large one's bytes would be its weights copied."""
    # protobuf's upb ByteSize() serializes the graph too: the declared sizes of the tensors that hold the
    # bulk (initializers, Constant values) decide first, so a 361 MB model's weights are not copied here
    if _declared_bytes(graph) > _SCAN_MAX_BYTES:
        return True
    try:
        return _EXTERNAL_FIELD in graph.SerializeToString()
    except Exception:  # a graph protobuf cannot serialize: the walk looks at every tensor
        return True


def _declared_bytes(graph: onnx.GraphProto) -> int:
    """The bytes the graph's initializers and Constant nodes' tensors declare (dims x item size; string
    tensors count 0), read from their shapes: no data is touched."""
    tensors = list(graph.initializer)
    tensors += [a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    return sum((_itemsize(t.data_type) or 0) * math.prod(int(d) for d in t.dims) for t in tensors)


EXTENT_RULE = "external data offset and length are non-negative integers that lie within the file"


_KEYS = frozenset({"location", "offset", "length", "checksum"})
"""The external-data keys onnxruntime (1.24, 1.32) reads; any other is its "model format error!"."""


def _refuse(
    t: onnx.TensorProto, message: str, path: str | None, value: object = None, rule: str = EXTERNAL_DATA_RULE
) -> BadModelError:
    return BadModelError(
        f"initializer {t.name!r}: {message}", path=path, tensor=t.name, value=value, rule=rule
    )


def _malformed(error: BadModelError, *, file_system: bool = False) -> BadModelError:
    """``error`` with the class onnxruntime raises for it: ``Fail`` for a malformed entry (a key, offset or
    length; 1.24 and 1.32 alike), its failed-check class for what it meets opening the file (``Fail`` in
    1.32, ``RuntimeException`` in 1.24)."""
    from ..runtime.exceptions import check_failure_class, ort_class, with_onnxruntime_class  # on demand

    return with_onnxruntime_class(error, check_failure_class() if file_system else ort_class("Fail"))


def _number(t: onnx.TensorProto, key: str, text: str, path: str | None) -> int:
    if not text.isascii() or not text.isdigit():
        raise _malformed(
            _refuse(t, f"external data {key} {text!r} is not a non-negative integer", path, text, EXTENT_RULE)
        )
    return int(text)


def _check_one(t: onnx.TensorProto, base: Path | None, path: str | None) -> ExternalRef:
    entries: dict[str, str] = {}
    for entry in t.external_data:
        if entry.key in entries:
            raise _malformed(_refuse(t, f"external data key {entry.key!r} appears twice", path, entry.key))
        if entry.key not in _KEYS:
            raise _malformed(
                _refuse(
                    t,
                    f"model format error! external data key {entry.key!r} is none of "
                    f"{', '.join(sorted(_KEYS))}, the keys onnxruntime reads",
                    path,
                    entry.key,
                )
            )
        entries[entry.key] = entry.value
    location = entries.get("location", "")
    if not location:
        raise _malformed(_refuse(t, "external data has no location", path))
    if "\x00" in location:
        location = _cut_at_nul(t, location, base is not None)
    offset = _number(t, "offset", entries["offset"], path) if "offset" in entries else 0
    length = _number(t, "length", entries["length"], path) if "length" in entries else None
    itemsize = _itemsize(int(t.data_type))
    need = math.prod(int(d) for d in t.dims) * itemsize if itemsize is not None else None
    if length is not None and need is not None and length != need:
        raise _malformed(
            _refuse(
                t,
                f"external data length {length} does not match dims {list(t.dims)} ({need} bytes)",
                path,
                length,
                EXTENT_RULE,
            )
        )
    if Path(location).is_absolute() or location.startswith(("\\", "/")):
        raise _escapes(t, location, "Absolute path not allowed for external data location", path)
    if base is None:
        return ExternalRef(t.name, None, offset, length if length is not None else need)
    real = _contained(t, base, location, path)
    try:
        st = os.stat(real)
        # as onnxruntime opens it, unresolved: 'w.bin/' or 'w.bin/.' name no file, though they resolve to one
        os.stat(os.path.join(base, location))
    except OSError as exc:  # onnxruntime's failed check, whatever the errno (ENOTDIR for 'w.bin/')
        raise _malformed(
            _refuse(t, f"cannot read external data {location!r}: {exc.strerror or exc}", path, location),
            file_system=True,
        ) from exc
    if not stat.S_ISREG(st.st_mode):
        raise _malformed(
            _refuse(
                t, f"external data {location!r} is not a regular file; refusing to read it", path, location
            ),
            file_system=True,
        )
    size = length if length is not None else need
    if size is None:
        size = st.st_size - offset
    if offset + size > st.st_size:
        raise _malformed(
            _refuse(
                t,
                f"external data {location!r} holds {st.st_size} bytes; offset {offset} + {size} bytes lies "
                "beyond it",
                path,
                location,
                EXTENT_RULE,
            )
        )
    return ExternalRef(t.name, Path(real), offset, size)


def _cut_at_nul(t: onnx.TensorProto, location: str, rewrite: bool) -> str:
    """``location`` up to its first NUL, as onnxruntime reads it (1.24.4 and 1.32); with ``rewrite`` (a
    model dmlshim read from its file) the tensor's entry says that name from now on, so that every later
    reader (onnx's, dmlshim's weight readers) opens the file onnxruntime opens."""
    cut = location_read(location)
    logger.warning(
        "initializer %r: external data location %r holds a NUL character: %r is read (as onnxruntime)",
        t.name,
        location,
        cut,
    )
    if rewrite:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = cut
    return cut


def _escapes(t: onnx.TensorProto, location: str, reason: str, path: str | None) -> BadModelError:
    """onnxruntime's refusal of an external data location (its class, ``Fail``, and its sentence first)."""
    from ..runtime.exceptions import ort_class, with_onnxruntime_class  # the ort layer, on demand

    error = _refuse(
        t,
        f"points at external data {location!r} outside the model's folder; refusing to read it",
        path,
        location,
    )
    error.message = (
        f"External data path validation failed for initializer: {t.name}. Error: {reason} (dmlshim: "
        f"{error.message})"
    )
    error.args = (error.message,)
    return with_onnxruntime_class(error, ort_class("Fail"))


def _contained(t: onnx.TensorProto, base: Path, location: str, path: str | None) -> str:
    """The real file ``location`` names, checked as onnxruntime checks it: resolved (every symbolic link
    followed) from the model's folder as given, it lies in that folder, resolved; or, for a model file that
    is itself a symbolic link (the Hugging Face cache: snapshots/v/model.onnx and its data both links into
    blobs/), in the folder of the model's real file."""
    real_base = os.path.realpath(base)
    real = os.path.realpath(os.path.join(real_base, location))
    if os.path.commonpath([real_base, real]) == real_base:
        return real
    if path is not None and os.path.islink(path):
        real_dir = os.path.dirname(os.path.realpath(path))
        apparent = os.path.realpath(os.path.join(base, location))
        if os.path.commonpath([real_dir, apparent]) == real_dir:
            return apparent
        real, real_base = apparent, real_dir
    raise _escapes(
        t,
        location,
        f'External data path escapes model directory. External data path: "{location}" resolved path: '
        f'"{real}" allowed directory: "{real_base}"',
        path,
    )


def _in_memory_class(error: BadModelError) -> BadModelError:
    """``error`` marked with the class onnxruntime raises for external data of a model given as bytes,
    found from the working directory or not: its failed-check class (``Fail`` in 1.32, where a file not
    found is "External data path validation failed"; ``RuntimeException`` in 1.24, "cannot get file
    size")."""
    from ..runtime.exceptions import check_failure_class, with_onnxruntime_class  # the ort layer, on demand

    return with_onnxruntime_class(error, check_failure_class())


def check_external_data(
    model: onnx.ModelProto, path: str | os.PathLike[str] | None, *, read_below: int | None = None
) -> list[ExternalRef]:
    """Check every external-data entry of ``model`` (read from ``path``) without reading any data.

    With ``path`` None (a model given in memory) external data cannot be found and is refused. The size
    limits apply to the tensors that will be read into the model: all of them, or with ``read_below``
    (a model read without its weights, whose large tensors onnxruntime reads from their files) only those
    smaller than that many bytes.

    Raises:
        BadModelError: a location (up to a NUL) leaves the folder, or names a missing or non-regular file; an
            offset or length is not a non-negative integer, disagrees with the dims, or passes the file's end.
        TooLargeError: the external tensors together exceed the memory limit.
    """
    tensors = external_tensors(model.graph)
    if not tensors:
        return []
    where = os.fspath(path) if path is not None else None
    base = Path(where).parent if where is not None else None
    refs = [_check_one(t, base, where) for t in tensors]
    if where is None:
        t = tensors[0]
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        error = BadModelError(
            f"initializer {t.name!r} keeps its data in the external file {location!r}, but the model was "
            "given in memory, without the folder that file is in; pass the model's path, or load it with "
            "onnx.load(path) (which reads external data)",
            tensor=t.name,
            value=location,
            rule=EXTERNAL_DATA_RULE,
        )
        raise _in_memory_class(error)
    left = (
        {t.name for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
        if read_below is not None
        else set()
    )  # top-level initializers (the only tensors a read without weights leaves in their files)
    read = [r for r in refs if r.tensor not in left or read_below is None or (r.length or 0) < read_below]
    total = sum(r.length or 0 for r in read)
    check_bytes(total, what=f"the external data of {len(refs)} initializer(s)", path=where)
    whole = total + model.ByteSize()
    if whole > PROTOBUF_LIMIT:
        # Loaded, the weights become part of one ModelProto: onnx cannot serialise it for shape inference
        # and onnxruntime cannot take it as bytes (an EncodeError, or a crash, otherwise).
        raise TooLargeError(
            f"with its external data the model would be {format_bytes(whole)}, above the 2 GiB a protobuf "
            "message can hold; dmlshim hands models to onnx and onnxruntime as one message, so it cannot "
            "load this one this way (refused before reading the data); the default, cpu and customop "
            "engines (InferenceSession(path), `dmlshim run`, `validate` and `inspect`) read a model file "
            "without its weights and load it",
            path=where,
            value=whole,
            rule="a protobuf message is at most 2 GiB",
        )
    return refs


def load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Load the external data of ``proto`` (read from ``path``) in place, after :func:`check_external_data`.

    Each tensor's bytes are read from the file :func:`check_external_data` resolved (a symbolic link that
    stays inside the model's folder is followed, as onnxruntime follows it), at its offset and length.

    Raises:
        BadModelError: as :func:`check_external_data`, or the files cannot be read.
        TooLargeError: as :func:`check_external_data`.
    """
    from .reading import open_regular

    refs = check_external_data(proto, path)
    if not refs:
        return
    tensors = external_tensors(proto.graph)
    for t, ref in zip(tensors, refs, strict=True):
        assert ref.file is not None  # a path was given
        try:
            with open_regular(ref.file, what="external data", error=BadModelError) as handle:
                handle.seek(ref.offset)
                data = handle.read(ref.length) if ref.length is not None else handle.read()
        except OSError as exc:
            raise _refuse(t, f"cannot read external data: {exc.strerror or exc}", str(path)) from exc
        if ref.length is not None and len(data) != ref.length:
            raise _refuse(
                t,
                f"external data ends after {len(data)} of {ref.length} bytes",
                str(path),
                len(data),
                EXTENT_RULE,
            )
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = data
