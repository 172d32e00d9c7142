"""What a step's translations, proofs and notes are keyed on: the inputs' shapes and dtypes, at run time
or from static shape inference, and the note a real shape that contradicts inference leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import helper

from ...translate import TensorInfo

__all__ = ["NOTE_SHAPE_DIFFERS", "arrays_key", "shape_note", "shapes_key", "static_key"]

NOTE_SHAPE_DIFFERS = "output_shape_differs_from_inference"


def arrays_key(arrays: Sequence[Any]) -> tuple[Any, ...] | None:
    """:func:`shapes_key` when every input is a plain ndarray or absent, else None."""
    key = []
    for a in arrays:
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray:
            key.append((a.shape, a.dtype))
        else:
            return None
    return tuple(key)


def shapes_key(arrays: Sequence[Any]) -> tuple[Any, ...]:
    """The inputs' shapes and dtypes (None for an absent one): what a translation and a proof hold for."""
    return tuple((a.shape, a.dtype) if a is not None else None for a in arrays)


def shape_note(shape: tuple[int, ...], inferred: TensorInfo | None) -> tuple[str, str] | None:
    """A record note when a real output shape contradicts the statically inferred one, else None."""
    if inferred is None or inferred.shape is None:
        return None
    dims = inferred.shape
    if len(dims) == len(shape) and all(
        not isinstance(d, int) or d == s for d, s in zip(dims, shape, strict=True)
    ):
        return None
    said = "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
    return (
        NOTE_SHAPE_DIFFERS,
        f"the output has shape {list(shape)}, static shape inference said {said} (often a stale value_info "
        "left by the exporter); the run used the real shape",
    )


def static_key(infos: Sequence[TensorInfo | None]) -> tuple[Any, ...] | None:
    """The cache key a run with exactly these static shapes and types will look up."""
    key: list[Any] = []
    for info in infos:
        if info is None:
            key.append(None)
            continue
        if not info.is_static:
            return None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(info.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        key.append((info.static_shape, dtype))
    return tuple(key)
