"""The ops beyond plain shape arithmetic that :mod:`.computed_values` follows, evaluated as onnxruntime does.

Round 51 followed ``Shape``/``Gather``/``Slice``/``Concat``/... into a sized node; a size made through a
``Where`` and a comparison, a ``ReduceProd`` of a shape, a ``Mod``, ``Max``/``Min``, ``Abs``/``Neg`` escaped
the memory limit (1.67 GB peak under a 100 MB limit, 6.4 GB for an int64 ``Range``). These are evaluated
here on small integer and bool tensors, with onnxruntime's integer semantics (wrapping arithmetic; ``Mod``
with the divisor's sign, or ``fmod`` through a double; the reductions in the input's own type), and on
float32/float64 ones (a shape scaled through floats: ``Cast``, ``Mul``, ``Floor``, ``Cast`` back, as
exporters write for a resize; IEEE arithmetic element by element is numpy's and onnxruntime's alike). A
case whose onnxruntime result numpy cannot reproduce exactly (a zero divisor, a ``fmod`` past 2**53, an
empty ``ReduceMax``, a NaN into ``Max``, a float sum, a float made an integer past its range) is left
unknown: its node is sized where it runs, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import numpy_helper

__all__ = ["OPS", "cast", "evaluate", "result_size", "sliced", "squeezed"]

_COMPARE: dict[str, Callable[..., Any]] = {
    "Equal": np.equal,
    "Greater": np.greater,
    "Less": np.less,
    "GreaterOrEqual": np.greater_equal,
    "LessOrEqual": np.less_equal,
}
_LOGIC: dict[str, Callable[..., Any]] = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
_REDUCE: dict[str, Callable[..., Any]] = {
    "ReduceProd": np.prod,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
}
_ROUND: dict[str, Callable[..., Any]] = {"Floor": np.floor, "Ceil": np.ceil, "Round": np.round}
"""``Round`` rounds half to even, as numpy's."""
OPS = frozenset(
    {
        "ConstantOfShape",
        "Transpose",
        "Where",
        "Not",
        "Mod",
        "Max",
        "Min",
        "Abs",
        "Neg",
        "Sign",
        "Size",
        *_COMPARE,
        *_LOGIC,
        *_REDUCE,
        *_ROUND,
    }
)
_EXACT = 2**53
"""onnxruntime's integer ``fmod`` goes through ``std::fmod``, a double: exact below this."""


def evaluate(
    op: str, attrs: Mapping[str, Any], opset: int, args: Sequence[np.ndarray | None]
) -> np.ndarray | None:
    """``op`` on ``args`` (None for an omitted optional input) as onnxruntime computes it, or None where
    this cannot say (an invalid input: onnxruntime's error stands)."""
    values = [a for a in args if a is not None]
    kinds = {a.dtype.kind for a in values}
    if op in ("ConstantOfShape", "Transpose"):
        return _arranged(op, attrs, values[0])
    if op in _COMPARE:
        a, b = args[0], args[1]
        if a is None or b is None or a.dtype != b.dtype or (op != "Equal" and a.dtype.kind == "b"):
            return None
        return _COMPARE[op](a, b)
    if op in _LOGIC or op == "Not":
        if kinds != {"b"}:
            return None
        return np.logical_not(values[0]) if op == "Not" else _LOGIC[op](values[0], values[1])
    if op == "Where":
        cond, x, y = args
        if cond is None or x is None or y is None or cond.dtype.kind != "b" or x.dtype != y.dtype:
            return None
        return np.where(cond, x, y).astype(x.dtype)
    if kinds - {"i", "u", "f"} or not values:
        return None  # every other op here reads numbers alone
    floats = "f" in kinds
    if op in _ROUND:
        return _ROUND[op](values[0]) if kinds == {"f"} else None
    if floats and any(np.isnan(a).any() for a in values):
        return None  # NaN's fate in onnxruntime's Max, Min, Sign, ReduceMax: not asked here
    if op in ("Max", "Min"):
        if len({a.dtype for a in values}) != 1:
            return None
        combine = np.maximum if op == "Max" else np.minimum
        out = values[0]
        for a in values[1:]:
            out = combine(out, a)
        return np.asarray(out).astype(values[0].dtype)
    if op == "Mod":
        if floats:  # a float Mod is C's fmod (exact); ONNX requires fmod=1 for it
            fmod = bool(attrs.get("fmod", 0)) and args[0] is not None and args[1] is not None
            return np.fmod(args[0], args[1]) if fmod and args[0].dtype == args[1].dtype else None
        return _mod(args[0], args[1], bool(attrs.get("fmod", 0)))
    if op == "Abs":
        return np.abs(values[0]).astype(values[0].dtype)
    if op == "Neg":
        return None if values[0].dtype.kind == "u" else np.negative(values[0])
    if op == "Sign":
        return np.sign(values[0]).astype(values[0].dtype)
    if op in _REDUCE:
        if floats and op in ("ReduceSum", "ReduceProd"):
            return None  # a float sum's value depends on its order
        return _reduced(op, attrs, opset, args)
    return None


def _arranged(op: str, attrs: Mapping[str, Any], data: np.ndarray) -> np.ndarray | None:
    """``ConstantOfShape`` (its ``value``, a float32 0 by default) and ``Transpose`` (its ``perm``, the
    axes reversed by default): the torch exporter's ``F.pad`` turns its pads through both (round 55b)."""
    if op == "Transpose":
        perm = [int(p) for p in attrs.get("perm") or range(data.ndim - 1, -1, -1)]
        return np.transpose(data, perm) if sorted(perm) == list(range(data.ndim)) else None
    if data.dtype != np.int64 or data.ndim != 1 or np.any(data < 0):
        return None
    tensor = attrs.get("value")
    fill = numpy_helper.to_array(tensor).reshape(-1) if tensor is not None else np.zeros(1, np.float32)
    if fill.size != 1:
        return None
    return np.full([int(d) for d in data], fill[0], fill.dtype)


def _mod(a: np.ndarray | None, b: np.ndarray | None, fmod: bool) -> np.ndarray | None:
    if a is None or b is None or a.dtype != b.dtype or not np.all(b):
        return None  # a zero divisor: onnxruntime's own error or result
    if a.dtype.kind == "i" and np.any(b == -1):
        return None  # INT_MIN % -1 traps in C++
    if not fmod:
        return np.mod(a, b).astype(a.dtype)  # the result takes the divisor's sign, as onnxruntime's
    if np.any(np.abs(a.astype(np.float64)) >= _EXACT) or np.any(np.abs(b.astype(np.float64)) >= _EXACT):
        return None
    return np.fmod(a, b).astype(a.dtype)


def _reduced(
    op: str, attrs: Mapping[str, Any], opset: int, args: Sequence[np.ndarray | None]
) -> np.ndarray | None:
    """``ReduceProd``/``Sum``/``Max``/``Min``: axes as an attribute before opset 18 (13 for ``ReduceSum``),
    as an optional input from then on; ``keepdims`` (default 1), ``noop_with_empty_axes`` (default 0)."""
    data = args[0]
    if data is None:
        return None
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    raw = (args[1] if len(args) > 1 else None) if as_input else attrs.get("axes")
    axes = [int(x) for x in np.reshape(np.asarray(raw if raw is not None else [], np.int64), -1)]
    keep = bool(attrs.get("keepdims", 1))
    if not axes:
        if as_input and attrs.get("noop_with_empty_axes", 0):
            return data
        axes = list(range(data.ndim))
    rank = data.ndim
    norm = tuple(sorted({a + rank if a < 0 else a for a in axes}))
    if len(norm) != len(axes) or any(not 0 <= a < rank for a in norm):
        return None
    if op in ("ReduceMax", "ReduceMin") and any(data.shape[a] == 0 for a in norm):
        return None  # an empty maximum: onnxruntime's own answer
    if op in ("ReduceMax", "ReduceMin"):
        out = _REDUCE[op](data, axis=norm, keepdims=keep)
    else:
        out = _REDUCE[op](data, axis=norm, keepdims=keep, dtype=data.dtype)
    return np.asarray(out).astype(data.dtype)


def cast(value: np.ndarray, dtype: Any) -> np.ndarray | None:
    """``Cast`` to ``dtype`` (an integer, bool, float32 or float64 type) as onnxruntime's: a float made
    an integer truncates toward zero; a NaN, an infinity or a value past the type's range (C++'s
    undefined conversion) is left unknown."""
    dtype = np.dtype(dtype)
    if value.dtype.kind == "f" and dtype.kind in "iu":
        if not np.all(np.isfinite(value)):
            return None
        info = np.iinfo(dtype)
        whole = np.trunc(value.astype(np.float64))
        if np.any(whole < info.min) or np.any(whole > info.max) or np.any(np.abs(whole) >= 2.0**63):
            return None
        return whole.astype(dtype)
    return value.astype(dtype)


def result_size(op: str, attrs: Mapping[str, Any], args: list[np.ndarray]) -> int:
    """An upper bound of the number of elements ``op`` makes of ``args`` (all at most
    :data:`_MAX_ELEMENTS` each): two ``[4096, 1]`` and ``[1, 4096]`` values broadcast to 16.7 million."""
    if op == "Concat":
        return sum(a.size for a in args)
    if op == "ConstantOfShape" and args:  # its input's values are the shape it makes
        total = 1
        for d in args[0].reshape(-1).tolist():
            total *= max(int(d), 0)
            if total > 1 << 40:
                break
        return total
    if op == "Gather" and len(args) == 2 and args[0].ndim:
        axis = int(attrs.get("axis", 0))
        dim = args[0].shape[axis] if -args[0].ndim <= axis < args[0].ndim else 1
        return (args[0].size // dim if dim else 0) * args[1].size
    if len(args) < 2:
        return args[0].size if args else 0
    if op in ("Reshape", "Slice", "Squeeze", "Unsqueeze") or op.startswith("Reduce"):
        return args[0].size
    # an elementwise op broadcasts: at most the largest size at each (right-aligned) position
    rank = max(a.ndim for a in args)
    total = 1
    for k in range(1, rank + 1):
        total *= max((a.shape[-k] if k <= a.ndim else 1) for a in args)
    return total


def squeezed(op: str, data: np.ndarray, axes: list[int] | None) -> np.ndarray | None:
    if op == "Squeeze":
        rank = data.ndim
        axes = [i for i, d in enumerate(data.shape) if d == 1] if axes is None else axes
        norm = sorted({a + rank if a < 0 else a for a in axes})
        if len(norm) != len(axes) or any(not 0 <= a < rank or data.shape[a] != 1 for a in norm):
            return None
        return data.reshape([d for i, d in enumerate(data.shape) if i not in norm])
    if axes is None:
        return None
    rank = data.ndim + len(axes)
    norm = sorted({a + rank if a < 0 else a for a in axes})
    if len(norm) != len(axes) or any(not 0 <= a < rank for a in norm):
        return None
    dims = iter(data.shape)
    return data.reshape([1 if i in norm else next(dims) for i in range(rank)])


def sliced(opset: int, args: list[Any]) -> np.ndarray | None:
    """``Slice`` (opset 10 on: starts, ends, axes, steps as inputs), with onnx's clamping."""
    if opset < 10:
        return None
    data = args[0]
    starts, ends = (np.reshape(a, -1) for a in args[1:3])
    axes = np.reshape(args[3], -1) if len(args) > 3 and args[3] is not None else np.arange(len(starts))
    strides = (
        np.reshape(args[4], -1) if len(args) > 4 and args[4] is not None else np.ones(len(starts), np.int64)
    )
    if not len(starts) == len(ends) == len(axes) == len(strides):
        return None
    index: list[slice] = [slice(None)] * data.ndim
    for start, end, axis, stride in zip(
        starts.tolist(), ends.tolist(), axes.tolist(), strides.tolist(), strict=True
    ):
        axis = axis + data.ndim if axis < 0 else axis
        if not 0 <= axis < data.ndim or not stride:
            return None
        dim = data.shape[axis]
        start, end = (v + dim if v < 0 else v for v in (start, end))
        if stride > 0:
            index[axis] = slice(max(0, min(dim, start)), max(0, min(dim, end)), stride)
        else:
            last = max(-1, min(dim - 1, end))
            index[axis] = slice(max(0, min(dim - 1, start)), last if last >= 0 else None, stride)
    return data[tuple(index)]
