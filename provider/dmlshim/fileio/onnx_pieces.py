"""An ONNX model in protobuf's wire format, written piece by piece: large models are never serialized in
one piece (with upb that is a buffer plus the Python bytes: twice the model). Also the varint encoding
other writers of wire format share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

from ..errors import BadInputError

STREAM_MIN_BYTES = 64 << 20
"""Models whose initializers declare at least this many bytes are written one initializer at a time."""

_PROTOBUF_LIMIT = (1 << 31) - 1


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


def piece_writer(model: Any, path: str | os.PathLike[str]) -> Callable[[BinaryIO], None]:
    """What writes ``model`` to an open file: every field but the graph, then the graph as its fields but
    the initializers followed by each initializer. Parsers read fields in any order and keep the
    initializers' order.

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
    sizes = [t.ByteSize() for t in model.graph.initializer]
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
            handle.write(tensor.SerializeToString())

    return writer
