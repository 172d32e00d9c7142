"""Whether every string field of a model is valid UTF-8, decided in protobuf's C parser.

onnx's schema is proto2, whose parser accepts any bytes in a string field (protobuf then hands the field
back as ``bytes``). The same schema declared proto3 makes the parser verify every string field as it
reads it. :func:`strings_valid` parses the model's weightless form (:func:`without_weights`: the weight
bytes are not copied) with that proto3 twin; the large initializers left out of it are for the caller to
walk. A parse takes milliseconds where a walk of the fields in Python takes a second on 20,000 nodes.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from .weightless import without_weights

logger = logging.getLogger(__name__)

__all__ = ["strings_valid"]


@functools.cache
def _proto3_model() -> Any:
    """onnx's ModelProto declared proto3 (its own pool), or None when this protobuf does not verify
    UTF-8 on parsing (checked on a damaged sample)."""
    try:
        file = descriptor_pb2.FileDescriptorProto()
        onnx.ModelProto.DESCRIPTOR.file.CopyToProto(file)
        if file.dependency or file.extension:
            return None
        file.syntax = "proto3"
        stack = list(file.message_type)
        while stack:
            message = stack.pop()
            if message.extension_range or message.extension:
                return None
            for field in message.field:
                if field.label == field.LABEL_REQUIRED:
                    return None
                field.ClearField("default_value")  # proto3 has no declared defaults
            stack.extend(message.nested_type)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)
        twin = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{file.package}.ModelProto"))
        sample = onnx.ModelProto()
        sample.graph.name = "\x01"
        damaged = sample.SerializeToString().replace(b"\x01", b"\xff")
        twin.FromString(sample.SerializeToString())
    except Exception as exc:  # another protobuf runtime: the caller walks the fields instead
        logger.debug("no proto3 twin of ModelProto: %s", exc)
        return None
    try:
        twin.FromString(damaged)
    except DecodeError:
        return twin
    return None


def strings_valid(
    model: onnx.ModelProto, serialized: list[bytes] | None = None
) -> tuple[onnx.TensorProto, ...] | None:
    """None when it cannot tell (a string is bad, or no proto3 parser is at hand: the caller walks the
    whole model); else the top-level initializers the parse left out (weights: the caller walks them),
    every other string field of the model being valid UTF-8. ``serialized``: receives
    ``model.SerializeToString()`` when that is what was parsed (no weight left out), for a caller that
    serializes the unchanged model next (onnxruntime's acceptance session)."""
    twin = _proto3_model()
    if twin is None:
        return None
    try:
        light = without_weights(model)
        payload = light.SerializeToString()
    except Exception:  # a bad string can fail the copy itself: the walk names it
        return None
    if serialized is not None and light is model:
        serialized.append(payload)
    try:
        twin.FromString(payload)
    except DecodeError:
        return None
    if light is model:
        return ()
    kept = {t.name for t in light.graph.initializer}
    return tuple(t for t in model.graph.initializer if t.name not in kept)
