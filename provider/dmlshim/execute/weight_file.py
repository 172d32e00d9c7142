"""Where each weight's bytes lie in the model's files, so that onnxruntime reads them there itself.

A model read from a file holds its large initializers either inline (``raw_data`` inside the .onnx file)
or as external data. Either way the bytes already sit in a file at a known offset; an onnxruntime session
given a placeholder initializer that points there (external data, relative to the folder named by the
session's ``session.model_external_initializers_file_folder_path`` entry) reads them itself, with no
array made in Python for it (``SessionOptions.add_external_initializers`` copies every array it is handed,
so handing arrays costs one more copy of every weight while the session is built).

The .onnx file is walked as protobuf wire format: tags and lengths are read and every ``raw_data`` is
skipped with a seek, so finding the slices costs a few reads, not a pass over the weights.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import onnx

logger = logging.getLogger(__name__)

FOLDER_KEY = "session.model_external_initializers_file_folder_path"
"""The onnxruntime session configuration entry naming the folder external data locations are relative to."""

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5


@dataclass(frozen=True)
class FileSlice:
    """The bytes of one tensor in a file.

    Attributes:
        location: the file, relative to the model's folder.
        offset: where the bytes start.
        length: how many bytes.
    """

    location: str
    offset: int
    length: int


class _WireError(ValueError):
    pass


def _varint(f: BinaryIO) -> int:
    result = shift = 0
    while True:
        b = f.read(1)
        if not b:
            raise _WireError("truncated varint")
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise _WireError("varint too long")


def _skip(f: BinaryIO, wire: int) -> None:
    if wire == _VARINT:
        _varint(f)
    elif wire == _I64:
        f.seek(8, os.SEEK_CUR)
    elif wire == _I32:
        f.seek(4, os.SEEK_CUR)
    elif wire == _LEN:
        f.seek(_varint(f), os.SEEK_CUR)
    else:
        raise _WireError(f"wire type {wire} unexpected")


def _tensor(f: BinaryIO, end: int, model_name: str, found: dict[str, FileSlice]) -> None:
    """Read one TensorProto in [tell, end): its fields but raw_data (kept as a slice)."""
    rest = bytearray()
    raw: tuple[int, int] | None = None
    while f.tell() < end:
        start = f.tell()
        tag = _varint(f)
        field, wire = tag >> 3, tag & 7
        if field == _TENSOR_RAW_DATA and wire == _LEN:
            length = _varint(f)
            raw = (f.tell(), length)
            f.seek(length, os.SEEK_CUR)
            continue
        _skip(f, wire)
        stop = f.tell()
        f.seek(start)
        rest += f.read(stop - start)
    if f.tell() != end:
        raise _WireError("tensor overruns its length")
    tensor = onnx.TensorProto.FromString(bytes(rest))
    if raw is not None:
        found[tensor.name] = FileSlice(model_name, raw[0], raw[1])
    elif tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        if "location" in info and "length" in info:
            found[tensor.name] = FileSlice(
                info["location"], int(info.get("offset", "0")), int(info["length"])
            )


def _messages(f: BinaryIO, end: int, field_number: int, read: Callable[[int], None]) -> None:
    """Call ``read(stop)`` for every length-delimited field ``field_number`` in [tell, end), the file at
    the field's first byte and ``stop`` its end; skip every other field."""
    while f.tell() < end:
        tag = _varint(f)
        field, wire = tag >> 3, tag & 7
        if field == field_number and wire == _LEN:
            length = _varint(f)
            read(f.tell() + length)
        else:
            _skip(f, wire)


def _graph(f: BinaryIO, end: int, model_name: str, found: dict[str, FileSlice]) -> None:
    _messages(f, end, _GRAPH_INITIALIZER, lambda stop: _tensor(f, stop, model_name, found))


def weight_slices(path: str | os.PathLike[str]) -> dict[str, FileSlice]:
    """Where the bytes of each top-level initializer of the model at ``path`` lie (inline ``raw_data``
    in the .onnx file itself, or external data with an explicit length); empty when the file cannot be
    walked."""
    found: dict[str, FileSlice] = {}
    name = os.path.basename(os.fspath(path))
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            _messages(f, size, _MODEL_GRAPH, lambda stop: _graph(f, stop, name, found))
    except (OSError, _WireError, ValueError) as exc:  # DecodeError is a ValueError too
        logger.debug("weights of %s not located in its files (%s); arrays are handed instead", path, exc)
        return {}
    return found
