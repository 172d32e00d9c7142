"""The small values :mod:`.computed_values` follows, and reading them: the element types (integers, bool,
float32, float64), the size bound (:data:`MAX_ELEMENTS`), and their values in initializers, ``Constant``
nodes and feeds (numpy arrays or OrtValues)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["KINDS", "MAX_ELEMENTS", "constant", "constants", "count", "held", "small_value", "tensor_array"]

logger = logging.getLogger(__name__)

INTEGERS = frozenset(
    getattr(onnx.TensorProto, t)
    for t in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
)
KINDS = INTEGERS | {onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}
MAX_ELEMENTS = 4096
"""The values followed: shapes and the few numbers they are made from (a reduction may read more)."""


def constants(tensors: Any, scope: str) -> list[tuple[str, onnx.TensorProto]]:
    """The initializers among ``tensors`` of a followed type and at most :data:`MAX_ELEMENTS` elements,
    by their names in ``scope``."""
    return [(scope + t.name, t) for t in tensors if t.data_type in KINDS and count(t.dims) <= MAX_ELEMENTS]


def held(dtype: np.dtype[Any]) -> bool:
    """The element types followed: integers, bool, float32 and float64 (float16 arithmetic is not
    numpy's)."""
    return dtype.kind in "iub" or dtype in (np.float32, np.float64)


def small_value(value: Any) -> np.ndarray | None:
    """A fed integer or bool tensor of at most :data:`MAX_ELEMENTS` elements (numpy or an OrtValue)."""
    if value is not None and not isinstance(value, np.ndarray) and hasattr(value, "numpy"):
        shape = value.shape() if callable(getattr(value, "shape", None)) else None
        if shape is None or count(shape) > MAX_ELEMENTS:
            return None
        value = value.numpy()
    if not isinstance(value, np.ndarray) or not held(value.dtype) or value.size > MAX_ELEMENTS:
        return None
    return value


def count(dims: Any) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


def tensor_array(tensor: onnx.TensorProto) -> np.ndarray | None:
    """The tensor's values when it holds them (not external data, nor a weightless model's stand-in)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        value = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, OSError) as exc:
        logger.debug("%r not read: %s", tensor.name, exc)
        return None
    return value if value.size == count(tensor.dims) else None


def constant(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.t.data_type in KINDS and count(a.t.dims) <= MAX_ELEMENTS:
            return tensor_array(a.t)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints" and len(a.ints) <= MAX_ELEMENTS:
            return np.array(list(a.ints), np.int64)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats" and len(a.floats) <= MAX_ELEMENTS:
            return np.array(list(a.floats), np.float32)
    return None
