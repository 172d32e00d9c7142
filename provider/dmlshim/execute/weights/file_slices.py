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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import onnx
from google.protobuf.message import DecodeError

from ...fileio.nul_paths import location_read
from ...fileio.onnx_pieces import encode_varint
from ...fileio.protobuf_wire import LEN as _LEN
from ...fileio.protobuf_wire import WireError as _WireError
from ...fileio.protobuf_wire import read_tag as _tag
from ...fileio.protobuf_wire import read_varint as _varint
from ...fileio.protobuf_wire import skip_field as _skip
from ...model.duplicate_initializers import has_duplicates

logger = logging.getLogger(__name__)


_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9


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


def _split_raw(f: BinaryIO, end: int) -> tuple[bytes, tuple[int, int] | None]:
    """One TensorProto in [tell, end): the bytes of its fields but raw_data, and where raw_data lies
    (offset, length; the last one wins, as in protobuf)."""
    rest = bytearray()
    raw: tuple[int, int] | None = None
    while f.tell() < end:
        start = f.tell()
        field, wire = _tag(f)
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
    return bytes(rest), raw


def _tensor(f: BinaryIO, end: int, model_name: str, found: dict[str, FileSlice]) -> None:
    """Read one TensorProto in [tell, end): its fields but raw_data (kept as a slice)."""
    rest, raw = _split_raw(f, end)
    tensor = onnx.TensorProto.FromString(rest)
    if raw is not None:
        found[tensor.name] = FileSlice(model_name, raw[0], raw[1])
    elif tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        if "location" in info and "length" in info:
            found[tensor.name] = FileSlice(
                location_read(info["location"]), int(info.get("offset", "0")), int(info["length"])
            )


def _messages(f: BinaryIO, end: int, field_number: int, read: Callable[[int], None]) -> None:
    """Call ``read(stop)`` for every length-delimited field ``field_number`` in [tell, end), the file at
    the field's first byte and ``stop`` its end; skip every other field."""
    while f.tell() < end:
        field, wire = _tag(f)
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
    except (OSError, _WireError, ValueError, DecodeError) as exc:
        logger.debug("weights of %s not located in its files (%s); arrays are handed instead", path, exc)
        return {}
    return found


# --- reading a model without its large weights -----------------------------------------------------

_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14

WALK_MIN_GRAPH_BYTES = 4 * 1024 * 1024
"""A graph message at least this large is walked tensor by tensor; a smaller one is read whole (its
weights are too small to matter, and one read is faster than the walk)."""


def _length_delimited(field: int, payload: bytes) -> bytes:
    return encode_varint(field << 3 | _LEN) + encode_varint(len(payload)) + payload


def _reference(f: BinaryIO, end: int, model_name: str, min_bytes: int) -> onnx.TensorProto | None:
    """The initializer in [tell, end) with its ``raw_data`` replaced by an external-data reference to
    where those bytes lie in the file; None when it is to be kept as it is (small, no raw_data, already
    external, or a length its dims and type disagree with: the model check reports that)."""
    from ...model.weightless import tensor_nbytes

    rest, raw = _split_raw(f, end)
    if raw is None or raw[1] < min_bytes:
        return None
    tensor = onnx.TensorProto.FromString(rest)
    if (
        tensor.data_location == onnx.TensorProto.EXTERNAL
        or len(tensor.external_data)
        or tensor_nbytes(tensor) != raw[1]
    ):
        return None
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", model_name), ("offset", raw[0]), ("length", raw[1])):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return tensor


def _copy_field(f: BinaryIO, start: int, wire: int, end: int) -> bytes:
    """The bytes of the field whose tag was read from ``start`` (the file is after the tag)."""
    _skip(f, wire)
    stop = f.tell()
    if stop > end:
        raise _WireError("a field overruns its message")
    f.seek(start)
    return f.read(stop - start)


def _rewritten(f: BinaryIO, end: int, rewrites: Mapping[int, Callable[[int], bytes | None]]) -> bytes:
    """The bytes of [tell, end) with every length-delimited field of a number in ``rewrites`` replaced by
    what its ``rewrite(stop)`` returns (called with the file at the field's payload, ``stop`` its end;
    None keeps the field as it is, :data:`_REMOVED` leaves it out) and every other field copied: the
    copying twin of :func:`_messages`."""
    out = bytearray()
    while f.tell() < end:
        start = f.tell()
        field, wire = _tag(f)
        rewrite = rewrites.get(field) if wire == _LEN else None
        if rewrite is not None:
            length = _varint(f)
            stop = f.tell() + length
            if stop > end:
                raise _WireError(f"field {field} overruns its message")
            payload = rewrite(stop)
            if payload is not None:
                if payload is not _REMOVED:
                    out += _length_delimited(field, payload)
                f.seek(stop)
                continue
            f.seek(start)
            _varint(f)
        out += _copy_field(f, start, wire, end)
    if f.tell() != end:
        raise _WireError("a field overruns its message")
    return bytes(out)


_GRAPH_NODE = 1
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 4, 5, 7
_ATTRIBUTE_NAME, _ATTRIBUTE_TENSOR = 1, 5
_REMOVED = b""
"""What a rewrite returns for a field left out of the message (:func:`_rewritten`)."""


def _constant_value(
    f: BinaryIO, stop: int, model_name: str, min_bytes: int
) -> tuple[str, onnx.TensorProto] | None:
    """A top-level ``Constant`` node in [tell, end) whose one attribute, ``value``, is a tensor of at least
    ``min_bytes`` inline: its output's name and that tensor as :func:`_reference` makes it (an external
    reference to its bytes in the file). None for any other node (the file is then anywhere in it)."""
    if stop - f.tell() < min_bytes:
        return None
    fields: dict[int, list[bytes]] = {}
    tensor: onnx.TensorProto | None = None
    attributes = 0
    while f.tell() < stop:
        field, wire = _tag(f)
        if wire != _LEN:
            return None
        length = _varint(f)
        end = f.tell() + length
        if field != _NODE_ATTRIBUTE:
            if length > 4096:
                return None
            fields.setdefault(field, []).append(f.read(length))
            continue
        attributes += 1
        name = b""
        while f.tell() < end:
            inner, inner_wire = _tag(f)
            if inner == _ATTRIBUTE_TENSOR and inner_wire == _LEN and name in (b"", b"value"):
                length = _varint(f)
                tensor_stop = f.tell() + length
                tensor = _reference(f, tensor_stop, model_name, min_bytes)
                f.seek(tensor_stop)
            elif inner == _ATTRIBUTE_NAME and inner_wire == _LEN:
                name = f.read(_varint(f))
            else:
                _skip(f, inner_wire)
        if name != b"value":
            return None
    outputs = fields.get(_NODE_OUTPUT, [])
    if (
        tensor is None
        or attributes != 1
        or fields.get(_NODE_OP_TYPE) != [b"Constant"]
        or fields.get(_NODE_DOMAIN, [b""])[-1] not in (b"", b"ai.onnx")
        or any(i for i in fields.get(_NODE_INPUT, []))
        or len(outputs) != 1
        or not outputs[0]
    ):
        return None
    return outputs[0].decode("utf-8"), tensor


_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 6, 11


def _weightless_graph(
    f: BinaryIO,
    end: int,
    model_name: str,
    min_bytes: int,
    moved: list[str],
    made: list[str],
    hoisted: list[bytes] | None = None,
) -> bytes:
    """The graph in [tell, end) with its large initializers made references to their bytes in the file,
    and its large ``Constant`` nodes made such initializers of the main graph, as onnxruntime makes every
    Constant an initializer when it loads a model (their bytes were otherwise read, and copied again by
    each step: a 307 MB Constant took ``inspect`` 2.5 GB and 15 s, its initializer twin 83 MB). A
    Constant inside an If/Loop/Scan body is hoisted to the main graph, whose values a body reads by name
    (``hoisted``: where a body's go; None for the main graph, which appends them; ``made``: their names);
    :func:`_hoisting_is_sound` checks that no scope names them otherwise."""
    constants: list[bytes] = [] if hoisted is None else hoisted

    def initializer(stop: int) -> bytes | None:
        if hoisted is not None:
            return None  # a body's own initializers stay where they are
        ref = _reference(f, stop, model_name, min_bytes)
        if ref is None:
            return None
        moved.append(ref.name)
        return ref.SerializeToString()

    def graph(stop: int) -> bytes:
        return _weightless_graph(f, stop, model_name, min_bytes, moved, made, constants)

    def attribute(stop: int) -> bytes:
        return _rewritten(f, stop, {_ATTRIBUTE_GRAPH: graph, _ATTRIBUTE_GRAPHS: graph})

    def node(stop: int) -> bytes | None:
        start = f.tell()
        found = _constant_value(f, stop, model_name, min_bytes)
        f.seek(start)
        if found is None:
            if stop - start < min_bytes:
                return None  # too small to hold a large Constant in a body
            return _rewritten(f, stop, {_NODE_ATTRIBUTE: attribute})
        name, tensor = found
        tensor.name = name
        moved.append(name)
        made.append(name)
        constants.append(tensor.SerializeToString())
        return _REMOVED

    out = _rewritten(f, end, {_GRAPH_INITIALIZER: initializer, _GRAPH_NODE: node})
    if hoisted is not None:
        return out
    return out + b"".join(_length_delimited(_GRAPH_INITIALIZER, c) for c in constants)


def _hoisting_is_sound(model: onnx.ModelProto, made: Sequence[str]) -> bool:
    """Every name made a main-graph initializer is one initializer, and no graph input, output, body
    initializer or node output of any scope has that name (a body would otherwise shadow it)."""
    from ...graph import subgraphs

    wanted = set(made)
    if not wanted:
        return True
    names = [t.name for t in model.graph.initializer if t.name in wanted]
    if len(names) != len(set(names)) or len(wanted) != len(made):
        return False

    def clean(graph: onnx.GraphProto, top: bool) -> bool:
        declared = [v.name for v in (*graph.input, *graph.output)]
        if not top:
            declared += [t.name for t in graph.initializer]
        if wanted.intersection(declared):
            return False
        for node in graph.node:
            if wanted.intersection(node.output):
                return False
            if not all(clean(sub, False) for _, sub in subgraphs(node)):
                return False
        return True

    return clean(model.graph, True)


def read_weightless(
    path: str | os.PathLike[str], min_bytes: int
) -> tuple[onnx.ModelProto, frozenset[str]] | None:
    """The model at ``path`` with every top-level initializer whose inline ``raw_data`` holds at least
    ``min_bytes`` turned into external data pointing at those bytes in the file itself (location: the
    file's name), and the names of those initializers. Everything else is read as ``onnx.load`` reads it
    (external data stays external); the weights' bytes are never read.

    None when the file cannot be walked this way (not one graph, a malformed field): the caller reads it
    with onnx, whose error then says what is wrong.
    """
    name = os.path.basename(os.fspath(path))
    moved: list[str] = []
    made: list[str] = []  # the Constants among them
    graphs: list[int] = []

    def graph(f: BinaryIO, stop: int) -> bytes:
        graphs.append(stop)
        if stop - f.tell() >= WALK_MIN_GRAPH_BYTES:
            return _weightless_graph(f, stop, name, min_bytes, moved, made)
        return f.read(stop - f.tell())

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            out = _rewritten(f, size, {_MODEL_GRAPH: lambda stop: graph(f, stop)})
        if len(graphs) != 1:
            return None  # none (onnx says so), or several (protobuf merges them): onnx reads it
        model = onnx.ModelProto.FromString(out)
        if not _hoisting_is_sound(model, made):
            return None  # a Constant named as another value: onnx reads it as it is
        if moved and has_duplicates(model.graph):
            # which definition onnxruntime reads depends on which are inline (model.duplicate_initializers)
            return None
        return model, frozenset(moved)
    except (OSError, _WireError, ValueError, DecodeError) as exc:
        logger.debug("%s not read weightless (%s); onnx reads it", path, exc)
        return None
