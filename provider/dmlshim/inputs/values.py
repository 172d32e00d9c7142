"""Values of generated inputs: free values by type (and by the conventions of common input names), and
indices that stay inside the dimensions they address.

* Floating-point inputs: standard normal. bfloat16 and float8 inputs (numpy has no dtype for them): the
  same, rounded to the type by onnxruntime's Cast, as an ``onnxruntime.OrtValue`` of that type
  (:mod:`.narrow_floats`; onnxruntime takes no numpy array for them). Booleans: fair coin. Other
  integers: 0..7 (safe as sizes, counts and positions).
* Attention masks (an input whose name contains ``mask``): all ones, so that no query row is fully
  masked (a fully masked softmax row is NaN or arbitrary in many exports).
* Positions (``position_ids``, ``cache_position``): ``0, 1, 2, ...`` along the last axis, inside the range
  of the nodes they index.
* Inputs that reach indices (:mod:`dmlshim.inputs.constraints`): uniform in the allowed range; without
  repetition where a scatter without reduction would otherwise write one place twice: per line along the
  axis (ScatterElements) or as distinct tuples (ScatterND) when the graph input *is* the indices tensor,
  and as all-distinct values otherwise.

Every value is a numpy array, a 0-d array for a scalar input (never a numpy scalar: onnxruntime refuses
those), except the OrtValues of bfloat16 and float8 inputs.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import onnx

from ..errors import BadInputError, InputsNotGeneratedError
from .constraints import InputSpec
from .narrow_floats import NARROW_FLOATS, from_float32

__all__ = ["draw", "draw_free", "draw_indices"]

logger = logging.getLogger(__name__)

# A generated index that repeats: what to do for distinct ones.
_REPEATS = "so some repeat (--inputs chooses the values)"

_POSITION_NAMES = ("position_ids", "cache_position", "position")


def _is_mask(name: str) -> bool:
    return "mask" in name.lower()


def _is_position(name: str) -> bool:
    lowered = name.lower()
    return any(p in lowered for p in _POSITION_NAMES)


def draw_free(spec: InputSpec, rng: np.random.Generator) -> Any:
    """Values for an input that reaches no indices (an OrtValue for a bfloat16 or float8 input)."""
    if spec.elem_type in NARROW_FLOATS:
        # Drawn as float32 inputs are (ones for a mask), then rounded by onnxruntime's own Cast. Checked
        # before ``spec.dtype``: onnx before 1.18 calls these types float32.
        drawn: np.ndarray = (
            np.ones(spec.shape) if _is_mask(spec.name) else np.asarray(rng.standard_normal(spec.shape))
        )
        return from_float32(drawn.reshape(spec.shape), spec.elem_type, spec.name)
    dtype = spec.dtype
    shape = spec.shape
    if _is_mask(spec.name) and dtype.kind in "biuf":
        return np.ones(shape, dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5, dtype=np.bool_).reshape(shape)
    if dtype.kind == "f":
        return np.asarray(rng.standard_normal(shape)).astype(dtype).reshape(shape)
    if dtype.kind in "iu":
        if _is_position(spec.name) and shape:
            return _positions(shape, 0, 1 << 30, dtype)
        # Small non-negative values: safe for integer inputs used as sizes, counts or positions.
        return np.asarray(rng.integers(0, 8, size=shape)).astype(dtype).reshape(shape)
    if spec.elem_type == onnx.TensorProto.STRING:
        # Short distinct words, as onnxruntime takes string tensors: a numpy array of Python str.
        words = [f"w{int(k)}" for k in rng.integers(0, 100, size=int(np.prod(shape, dtype=np.int64)))]
        return np.array(words, dtype=object).reshape(shape)
    raise InputsNotGeneratedError(
        f"cannot generate input {spec.name!r} of type {onnx.TensorProto.DataType.Name(spec.elem_type)}; "
        "pass the inputs with --inputs FILE.npz",
        tensor=spec.name,
    )


def _positions(shape: tuple[int, ...], low: int, high: int, dtype: np.dtype) -> np.ndarray:
    n = shape[-1]
    line = low + np.arange(n, dtype=np.int64) % max(high - low, 1)  # wraps only when the range is short
    return np.broadcast_to(line, shape).astype(dtype)


def draw(spec: InputSpec, rng: np.random.Generator, negative: bool = False) -> Any:
    """Values for one input: free, or indices valid for every node the input reaches."""
    if not spec.constraints:
        return draw_free(spec, rng)
    if _is_position(spec.name) and spec.shape and spec.dtype.kind in "iu" and spec.bounds is not None:
        low, high = spec.bounds
        unique = any(c.unique for c in spec.constraints)
        if high > low and (not unique or (len(spec.shape) == 1 and spec.shape[0] <= high - low)):
            start = 0 if low <= 0 < high else low
            return _positions(spec.shape, start, high, spec.dtype)
    return draw_indices(spec, rng, negative)


def draw_indices(spec: InputSpec, rng: np.random.Generator, negative: bool) -> np.ndarray:
    assert spec.bounds is not None  # only called for constrained inputs
    low, high = spec.bounds
    dtype = spec.dtype
    if dtype.kind not in "iu":
        raise BadInputError(
            f"input {spec.name!r} feeds indices but has non-integer type {dtype}", tensor=spec.name
        )
    if dtype.kind == "u":
        low = max(low, 0)
    if 0 in spec.shape:  # no element, so no index to choose: valid whatever the bounds (an empty axis)
        return np.zeros(spec.shape, dtype)
    if high <= low:
        raise InputsNotGeneratedError(
            f"input {spec.name!r}: no value is a valid index for every node it feeds "
            f"({', '.join(c.node for c in spec.constraints)})",
            tensor=spec.name,
            value=[low, high],
        )
    shape = spec.shape
    size = math.prod(shape)
    unique = any(c.unique for c in spec.constraints)
    only = spec.constraints[0] if len(spec.constraints) == 1 else None
    values: np.ndarray
    if not unique:
        values = rng.integers(low, high, size=shape)
        if negative and all(c.offset == 0 and c.exact for c in spec.constraints) and dtype.kind == "i":
            # x and x - bound address the same element when the dim equals the bound.
            flip = rng.random(shape) < 0.5
            values = np.where(flip, values - high, values)
    elif only is not None and only.direct and only.structure == "lines" and shape:
        axis = only.axis if only.axis < len(shape) else len(shape) - 1
        moved = list(shape)
        n = moved.pop(axis)
        if n > high - low:
            logger.warning(
                "input %r: %d indices per line but only %d targets, %s", spec.name, n, high - low, _REPEATS
            )
            values = rng.integers(low, high, size=shape)
        else:
            lines = [rng.permutation(high - low)[:n] + low for _ in range(math.prod(moved))]
            stacked = np.asarray(lines, dtype=np.int64).reshape((*moved, n))
            values = np.moveaxis(stacked, -1, axis)
    elif only is not None and only.direct and only.structure == "tuples" and shape and only.tuple_dims:
        k = shape[-1]
        count = size // k if k else 0
        total = math.prod(only.tuple_dims)
        if count > total:
            logger.warning("input %r: %d tuples but only %d targets, %s", spec.name, count, total, _REPEATS)
            flat = rng.integers(0, total, size=count)
        else:
            flat = rng.permutation(total)[:count]
        values = np.stack(np.unravel_index(flat, only.tuple_dims), axis=-1).reshape(shape)
    elif size <= high - low:
        values = (rng.permutation(high - low)[:size] + low).reshape(shape)
    else:
        logger.warning(
            "input %r: %d scatter indices but only %d distinct values in range, %s",
            spec.name,
            size,
            high - low,
            _REPEATS,
        )
        values = rng.integers(low, high, size=shape)
    return np.asarray(values).astype(dtype)
