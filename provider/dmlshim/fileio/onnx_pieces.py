"""An ONNX model in protobuf's wire format, written piece by piece: large models are never serialized in
one piece (with upb that is a buffer plus the Python bytes: twice the model). Also the varint encoding
other writers of wire format share."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import BadInputError

STREAM_MIN_BYTES = 64 << 20
"""Models whose initializers declare at least this many bytes are written one initializer at a time."""

_PROTOBUF_LIMIT = (1 << 31) - 1
COPY_CHUNK_BYTES = 16 << 20
"""Bytes copied from a file at a time by the writers that stream weights from one file to another."""


@dataclass(frozen=True)
class SourceBytes:
    """Bytes of a tensor that lie in a file: ``length`` bytes from ``offset`` in ``file``."""

    file: str
    offset: int
    length: int


def copy_bytes(handle: BinaryIO, source: SourceBytes) -> None:
    """Copy ``source``'s bytes to ``handle``, a chunk at a time (never the whole in memory); where the
    source file has holes (a sparse file) and ``handle`` is a file, the holes are skipped, not written as
    zeros (the file's size is set by :func:`end_sparse`).

    Raises:
        BadInputError: the file cannot be read or ends before them (it changed since it was checked).
    """
    from .reading import open_regular

    left, at = source.length, source.offset
    writing = False  # an OSError while writing is the output's (disk full, file too large), not the input's
    try:
        with open_regular(source.file, what="weights file") as src:
            if os.fstat(src.fileno()).st_size < at + left:
                raise BadInputError(
                    f"the weights file is shorter than the {source.length} bytes at offset {source.offset} "
                    "it held when the model was read (it changed since)",
                    path=source.file,
                    value=source.length,
                )
            while left:
                data_at = _next_data(src.fileno(), at, at + left)
                if data_at > at:  # a hole: skipped in the output too
                    writing = True
                    handle.seek(data_at - at, os.SEEK_CUR)
                    writing = False
                    left -= data_at - at
                    at = data_at
                    continue
                copied = _kernel_copy(src.fileno(), handle, at, min(left, COPY_CHUNK_BYTES))
                if copied:
                    left -= copied
                    at += copied
                    continue
                src.seek(at)
                chunk = src.read(min(left, COPY_CHUNK_BYTES))
                if not chunk:
                    raise BadInputError(
                        f"the weights file ends {left} bytes before the {source.length} bytes at offset "
                        f"{source.offset} it held when the model was read (it changed since)",
                        path=source.file,
                        value=source.length,
                    )
                writing = True
                handle.write(chunk)
                writing = False
                left -= len(chunk)
                at += len(chunk)
    except OSError as exc:
        if writing:
            raise  # the writer names the output file (before: "cannot read the weights file" named the input)
        raise BadInputError(f"cannot read the weights file: {exc.strerror or exc}", path=source.file) from exc


def _kernel_copy(src_fd: int, handle: BinaryIO, at: int, count: int) -> int:
    """Copy up to ``count`` bytes from ``at`` in ``src_fd`` to ``handle``'s position inside the kernel
    (``os.copy_file_range``: no pass through Python's buffers, a reflink where the file system shares
    blocks); the bytes copied, 0 where it cannot (no such call, not a file, another file system on an
    old kernel), and the caller then reads and writes them. Lowering a 548 MB external-data model spent
    1.3 s of its 3 s reading and writing them."""
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return 0
    try:
        out_fd = handle.fileno()
        handle.flush()
        out_at = handle.tell()
        done = int(copy(src_fd, out_fd, count, at, out_at))
    except (OSError, AttributeError, ValueError):  # io.UnsupportedOperation is an OSError
        return 0
    if done > 0:
        handle.seek(out_at + done)
    return max(done, 0)


def end_sparse(handle: BinaryIO) -> None:
    """Give the file the size its last write or skipped hole reached (a hole at its end is no write)."""
    handle.truncate(handle.tell())


def _next_data(fd: int, at: int, end: int) -> int:
    """Where the next bytes of data are from ``at`` (``end`` when only a hole is left before it; ``at``
    where the platform cannot say)."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return at
    try:
        return min(os.lseek(fd, at, seek_data), end)
    except OSError:  # ENXIO: a hole up to the end of the file; others: no answer
        return end if at < os.fstat(fd).st_size else at


def initializer_bytes(model: Any) -> int:
    """The bytes the top-level initializers hold in ``raw_data``."""
    return sum(len(t.raw_data) for t in model.graph.initializer if t.HasField("raw_data"))


def encode_varint(value: int) -> bytes:
    """``value`` (non-negative) as a protobuf varint."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def piece_writer(
    model: Any, path: str | os.PathLike[str], streamed: Mapping[str, SourceBytes] | None = None
) -> Callable[[BinaryIO], None]:
    """What writes ``model`` to an open file: every field but the graph, then the graph as its fields but
    the initializers followed by each initializer. Parsers read fields in any order and keep the
    initializers' order. The top-level initializers named in ``streamed`` (their data a reference, e.g.
    into the file the model was read from without its weights) are written inline, their ``raw_data``
    copied from there a chunk at a time.

    Raises:
        BadInputError: the model would exceed protobuf's 2 GiB (``path`` names the target).
    """
    import onnx

    from ..model.weightless import graph_shell, model_shell

    head = model_shell(model)  # every field but the graph
    shell = onnx.GraphProto()
    graph_shell(model.graph, shell)  # every field but the initializers
    shell_bytes = shell.SerializeToString()
    init_tag = encode_varint(5 << 3 | 2)  # GraphProto.initializer
    shells = {
        t.name: _inline_shell(t, streamed[t.name])
        for t in model.graph.initializer
        if t.name in (streamed or {})
    }
    sizes = [
        len(shells[t.name]) + streamed[t.name].length if streamed and t.name in shells else t.ByteSize()
        for t in model.graph.initializer
    ]
    graph_size = len(shell_bytes) + sum(len(init_tag) + len(encode_varint(n)) + n for n in sizes)
    head_bytes = head.SerializeToString()
    graph_head = encode_varint(7 << 3 | 2) + encode_varint(graph_size)  # ModelProto.graph
    if len(head_bytes) + len(graph_head) + graph_size > _PROTOBUF_LIMIT:
        raise BadInputError(
            "cannot serialise the model (larger than 2 GiB); a model above 2 GiB needs external data",
            path=os.fspath(path),
        )

    def writer(handle: BinaryIO) -> None:
        handle.write(head_bytes)
        handle.write(graph_head)
        handle.write(shell_bytes)
        for tensor, size in zip(model.graph.initializer, sizes, strict=True):
            handle.write(init_tag + encode_varint(size))
            if streamed and tensor.name in shells:
                handle.write(shells[tensor.name])
                copy_bytes(handle, streamed[tensor.name])
            else:
                handle.write(tensor.SerializeToString())
        end_sparse(handle)

    return writer


def _inline_shell(tensor: Any, source: SourceBytes) -> bytes:
    """``tensor`` serialized as an inline tensor up to its ``raw_data`` (field 9), which is the last field
    written: its tag and length, the bytes to follow from ``source``."""
    import onnx

    shell = onnx.TensorProto()
    shell.CopyFrom(tensor)
    del shell.external_data[:]
    shell.ClearField("data_location")
    shell.ClearField("raw_data")
    return shell.SerializeToString() + encode_varint(9 << 3 | 2) + encode_varint(source.length)
