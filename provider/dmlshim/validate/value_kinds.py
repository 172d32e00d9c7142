"""Values a model can produce besides numpy arrays: sequences (lists), maps (dicts, or lists of dicts as
skl2onnx's ZipMap gives), and OrtValues of element types numpy cannot hold (bfloat16, float8, int4).

An ``.npz`` holds arrays only; reports describe the other values by kind and compare them element by
element.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from ..comparison import DTYPE_TOLERANCE, dtype_tolerance
from ..inputs.narrow_floats import ortvalue_bits

__all__ = [
    "as_compared",
    "comparable",
    "compared_dtype",
    "describe",
    "feed_shape",
    "fitting_tolerance",
    "is_array",
    "kind_text",
    "narrow_bits",
    "ortvalue_bits",
    "reference_values",
]


def is_array(value: Any) -> bool:
    """A numpy array an ``.npz`` can hold (no object dtype)."""
    return isinstance(value, np.ndarray) and value.dtype != object


def as_compared(value: Any, declared: int | None = None) -> Any:
    """The value as comparisons take it: a bfloat16 or float8 tensor OrtValue as the float32 array of its
    values (decoded exactly, so bit-for-bit equality is value equality with NaN equal to NaN, and a
    tolerance applies to the numbers, not to their bits); any other value unchanged.

    ``declared``: the ONNX element type the graph declares for the value. onnxruntime's ``run`` returns a
    float8 output as a uint8 array of its bits; given the declared float8 type, such an array is decoded
    too."""
    from ..inputs.narrow_floats import NARROW_FLOATS, decoded, from_bits

    kind = NARROW_FLOATS.get(declared) if declared is not None else None
    if kind is not None and isinstance(value, np.ndarray) and value.dtype == kind.bits_dtype:
        value = from_bits(value, kind.elem_type)
    values = decoded(value)
    return value if values is None else values


def compared_dtype(value: Any, declared: int | None = None) -> str | None:
    """The type a report names for a bfloat16 or float8 value (``bfloat16``), which :func:`as_compared`
    turns into float32; None for any other value (its array's dtype is its own)."""
    from ..inputs.narrow_floats import NARROW_FLOATS, narrow_type

    kind = narrow_type(value)
    if kind is None and declared is not None and isinstance(value, np.ndarray):
        kind = NARROW_FLOATS.get(declared)
        kind = kind if kind is not None and value.dtype == kind.bits_dtype else None
    return None if kind is None else kind.name


def narrow_bits(value: Any, declared: int | None = None) -> np.ndarray | None:
    """A bfloat16 or float8 value's raw bits as unsigned integers of its width (``uint16``, ``uint8``), in
    its shape: what ``--save-outputs`` writes for it, as onnxruntime's ``run`` returns a float8e4m3fn output
    and ``--inputs`` takes such an input. The bits themselves, not re-encoded values, so NaN payloads and
    infinities survive. None for any other value."""
    from ..inputs.narrow_floats import NARROW_FLOATS, bits_of, narrow_type

    if narrow_type(value) is not None:
        return bits_of(value)
    kind = NARROW_FLOATS.get(declared) if declared is not None else None
    if kind is not None and isinstance(value, np.ndarray) and value.dtype == kind.bits_dtype:
        return value
    return None


def reference_values(reference: np.ndarray, own_type: str | None) -> np.ndarray:
    """A reference array for an output of a bfloat16 or float8 type (``own_type``, from
    :func:`compared_dtype`) as the output compares: its raw bits (unsigned integers of the type's width, as
    ``--save-outputs`` writes them and onnxruntime returns a float8e4m3fn output; an ml_dtypes array of the
    type, or the untyped void array ``numpy.save`` stores for one) decoded exactly to float32. Any other
    array, float32 values included, unchanged."""
    from ..inputs.narrow_floats import NARROW_FLOATS, decoded, from_bits

    kinds = {kind.name: kind for kind in NARROW_FLOATS.values()}
    kind = kinds.get(own_type or "")
    dtype = reference.dtype
    if kind is None or dtype.itemsize * 8 != kind.bits or dtype.names is not None or dtype.subdtype:
        return reference
    if dtype == kind.bits_dtype or dtype.kind == "V" or dtype.name.replace("_", "") == kind.name:
        bits = np.ascontiguousarray(reference).view(kind.bits_dtype)
        values = decoded(from_bits(bits, kind.elem_type))
        return reference if values is None else values
    return reference


_NARROW_TOLERANCE = {
    "bfloat16": DTYPE_TOLERANCE["bfloat16"],
    **{name: (0.25, 0.25) for name in ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")},
}
"""The tolerance fitting outputs compared as decoded float32 values, by their own type (what
:func:`dmlshim.comparison.dtype_tolerance` gives ml_dtypes' arrays of those types)."""


def fitting_tolerance(compared: np.ndarray, own_type: str | None = None) -> tuple[float, float]:
    """(rtol, atol) fitting a compared array's dtype, or the output's own type when :func:`as_compared`
    decoded it (``own_type``, from :func:`compared_dtype`: bfloat16's, not float32's)."""
    return _NARROW_TOLERANCE.get(own_type or "") or dtype_tolerance(compared.dtype)


def feed_shape(value: Any) -> tuple[int, ...]:
    """The shape of a feed: an array's, or an OrtValue's (a bfloat16 or float8 input, say)."""
    if isinstance(value, ort.OrtValue):
        return tuple(int(d) for d in value.shape())
    return tuple(int(d) for d in np.shape(value))


def kind_text(value: Any) -> str:
    """What the value is, in a few words (``a sequence of 2 tensors``, ``a map``, ...)."""
    if isinstance(value, ort.OrtValue):
        return f"an onnxruntime {value.data_type()} value"
    if isinstance(value, dict):
        return f"a map of {len(value)} entries"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, dict) for v in value):
            return f"a sequence of {len(value)} maps"
        return f"a sequence of {len(value)} tensors"
    if isinstance(value, np.ndarray):
        return f"an array of Python objects {list(value.shape)}"
    return f"a {type(value).__name__}"


def describe(value: Any) -> dict[str, Any]:
    """A JSON description of any output: shape and dtype for arrays, kind and parts for the rest."""
    if is_array(value):
        return {"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, ort.OrtValue):
        out: dict[str, Any] = {"kind": "ortvalue", "type": value.data_type()}
        if value.is_tensor():
            out["shape"] = list(value.shape())
        return out
    if isinstance(value, dict):
        return {"kind": "map", "size": len(value)}
    if isinstance(value, (list, tuple)):
        return {"kind": "sequence", "length": len(value), "elements": [describe(v) for v in value]}
    return {"kind": type(value).__name__}


def _parts(value: Any) -> tuple[tuple[Any, ...], list[np.ndarray]]:
    if isinstance(value, dict):
        keys = sorted(value, key=repr)
        inner = [_parts(value[k]) for k in keys]
        return ("map", tuple(keys), tuple(s for s, _ in inner)), [a for _, arrays in inner for a in arrays]
    if isinstance(value, (list, tuple)):
        inner = [_parts(v) for v in value]
        return ("seq", tuple(s for s, _ in inner)), [a for _, arrays in inner for a in arrays]
    if isinstance(value, ort.OrtValue):
        kind = value.data_type()
        shape = tuple(value.shape())
        return ("ortvalue", kind, shape), [ortvalue_bits(value)]
    arr = np.asarray(value)
    return ("tensor", arr.shape, str(arr.dtype)), [arr.reshape(-1)]


def comparable(value: Any) -> tuple[tuple[Any, ...], np.ndarray]:
    """The value's structure (kinds, keys, shapes, dtypes) and all its elements as one flat array, so two
    sequences or maps compare as their structures and their elements."""
    structure, arrays = _parts(value)
    if not arrays:
        return structure, np.zeros(0)
    if len(arrays) == 1:
        return structure, arrays[0]
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        return structure, np.concatenate([a.astype(np.float64) for a in arrays])
    return structure, np.concatenate(arrays)
