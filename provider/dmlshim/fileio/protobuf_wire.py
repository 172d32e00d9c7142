"""Protobuf wire format, read a tag at a time from a file: enough to find fields without parsing a message.

A model file's top-level fields and a tensor's ``raw_data`` can be located by their tags and lengths,
skipping every other field's bytes with a seek, so that nothing proportional to the weights is read.
"""

from __future__ import annotations

import os
from typing import BinaryIO

LEN, VARINT, I64, I32 = 2, 0, 1, 5
"""The wire types an ONNX file uses (protobuf refuses the group types in proto3 messages)."""


class WireError(ValueError):
    """Bytes that are not protobuf wire format this reader can walk."""


def read_varint(f: BinaryIO) -> int:
    """One varint (at most 64 bits) at the file's position."""
    result = shift = 0
    while True:
        b = f.read(1)
        if not b:
            raise WireError("truncated varint")
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def read_tag(f: BinaryIO) -> tuple[int, int]:
    """The next field's number and wire type. Field 0 and the group or unknown wire types are never in
    an ONNX file (protobuf refuses them): a run of zero bytes, say, is not walked two bytes a field."""
    tag = read_varint(f)
    field, wire = tag >> 3, tag & 7
    if field == 0 or wire not in (VARINT, I64, LEN, I32):
        raise WireError(f"invalid field tag {tag} at byte {f.tell()}")
    return field, wire


def skip_field(f: BinaryIO, wire: int) -> None:
    """Moves past the value of a field of wire type ``wire`` without reading its bytes."""
    if wire == VARINT:
        read_varint(f)
    elif wire == I64:
        f.seek(8, os.SEEK_CUR)
    elif wire == I32:
        f.seek(4, os.SEEK_CUR)
    elif wire == LEN:
        f.seek(read_varint(f), os.SEEK_CUR)
    else:
        raise WireError(f"wire type {wire} unexpected")


MODEL_FUNCTIONS = 25
"""``ModelProto.functions``: the model-local functions' field number."""


def has_model_field(f: BinaryIO, number: int) -> bool:
    """Whether the serialized ``ModelProto`` in ``f`` holds a top-level field ``number``: only the top-level
    tags are read, each field's bytes skipped unread (a few reads, whatever the weights). True as well when
    the bytes are no model this walk can read (the caller then looks further)."""
    end = f.seek(0, os.SEEK_END)
    f.seek(0)
    try:
        while f.tell() < end:
            field, wire = read_tag(f)
            if field == number:
                return True
            skip_field(f, wire)
    except (ValueError, OSError, OverflowError):  # a broken tag, or a length past any file (seek refuses it)
        return True
    return False
