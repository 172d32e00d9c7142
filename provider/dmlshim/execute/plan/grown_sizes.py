"""Output shapes of the ops whose size a fed (or computed) value sets beyond :mod:`.fed_values`' first ones:
``Pad`` (its ``pads``, and ``axes``), ``Resize`` and ``Upsample`` (``sizes`` or float ``scales``),
``CenterCropPad`` (``shape``), the window ops (``HannWindow``, ``HammingWindow``, ``BlackmanWindow``:
``size``) and ``MelWeightMatrix`` (``num_mel_bins``, ``dft_length``), computed as onnxruntime computes
them so that a run is refused exactly when the value would pass the memory limit (issue 35 round 55:
a 1x1 value padded or resized to a fed 20000x20000 ran at 1675 MB peak under a 100 MB limit, in every
engine)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

__all__ = [
    "DATA_OPS",
    "GROWN_INPUTS",
    "WINDOW_OPS",
    "grown_positions",
    "grown_shape",
    "sized_axes",
    "sized_where_it_runs",
]

WINDOW_OPS = frozenset(("HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"))
"""Ops making a new value of the ``output_datatype`` their sizing inputs' values shape."""

GROWN_INPUTS = {
    "Pad": (1, 3),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "CenterCropPad": (1,),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1),
}
"""The shape-like inputs each op may have (:func:`grown_positions`: those a node has)."""

DATA_OPS = frozenset(("Pad", "Resize", "Upsample", "CenterCropPad"))
"""Those whose output keeps its first input's element type and, but for the sized axes, its shape."""

_MAX_ELEMENTS = 64


def grown_positions(node: onnx.NodeProto) -> tuple[int, ...] | None:
    """The positions of ``node``'s inputs that size its output, or None where none does: a Pad's ``pads``
    (with its ``axes`` when given; before opset 11 the pads are an attribute), a Resize's ``sizes`` when
    given, else its ``scales`` (input 1 in opset 10), an Upsample's ``scales`` (an attribute before opset
    9), a CenterCropPad's ``shape``, a window's ``size``."""
    given = [bool(name) for name in node.input]
    if node.op_type == "Pad":
        if len(given) < 2 or not given[1]:
            return None
        return (1, 3) if len(given) > 3 and given[3] else (1,)
    if node.op_type == "Resize":
        if len(given) > 3 and given[3]:
            return (3,)
        if len(given) > 2 and given[2]:
            return (2,)
        return (1,) if len(given) == 2 and given[1] else None
    positions = GROWN_INPUTS.get(node.op_type)
    if positions is None or len(given) <= max(positions) or not all(given[p] for p in positions):
        return None
    return positions


def sized_where_it_runs(node: onnx.NodeProto) -> bool:
    """A Resize keeping its aspect ratio (``keep_aspect_ratio_policy`` other than ``stretch``) scales within
    the sizes it is given: its output is not sized here."""
    policy = next((a.s for a in node.attribute if a.name == "keep_aspect_ratio_policy"), b"stretch")
    return node.op_type == "Resize" and policy not in (b"", b"stretch")


def sized_axes(node: onnx.NodeProto) -> tuple[int, ...] | None:
    """A Resize's or CenterCropPad's ``axes`` attribute (None: every axis)."""
    if node.op_type not in ("Resize", "CenterCropPad"):
        return None
    return next((tuple(int(i) for i in a.ints) for a in node.attribute if a.name == "axes"), None)


def grown_shape(
    op: str, data: tuple[int, ...], values: Sequence[np.ndarray], axes: tuple[int, ...] | None = None
) -> tuple[int, ...] | None:
    """The output shape onnxruntime allocates for ``op`` (see the module docstring) of data of shape
    ``data``, its sizing inputs ``values`` and ``axes`` (:func:`sized_axes`), or None where the inputs
    are invalid (onnxruntime's error stands)."""
    if any(v.size > _MAX_ELEMENTS for v in values):
        return None
    if op in WINDOW_OPS:
        sizes = [v.reshape(-1) for v in values]
        if any(v.size != 1 or v.dtype.kind not in "iu" or v[0] < 0 for v in sizes):
            return None
        if op == "MelWeightMatrix":  # num_mel_bins, dft_length: [dft_length // 2 + 1, num_mel_bins]
            return (int(sizes[1][0]) // 2 + 1, int(sizes[0][0]))
        return (int(sizes[0][0]),)
    rank = len(data)
    numbers = values[0].reshape(-1)
    if op == "Pad":
        listed = [int(a) for a in values[1].reshape(-1)] if len(values) > 1 else list(range(rank))
    else:
        listed = list(axes) if axes is not None else list(range(rank))
    listed = [a + rank if a < 0 else a for a in listed]
    if len(set(listed)) != len(listed) or any(not 0 <= a < rank for a in listed):
        return None
    if len(numbers) != (2 if op == "Pad" else 1) * len(listed):
        return None
    out = list(data)
    for k, a in enumerate(listed):
        if op == "Pad":
            out[a] = data[a] + int(numbers[k]) + int(numbers[k + len(listed)])
        elif numbers.dtype.kind == "f":
            if op == "CenterCropPad":
                return None
            # onnxruntime: static_cast<int64_t>(scale * dim), the product in float32
            with np.errstate(all="ignore"):
                product = np.float32(numbers[k]) * np.float32(data[a])
            if not numbers[k] > 0 or not math.isfinite(float(product)):
                return None
            out[a] = int(product)
        else:
            out[a] = int(numbers[k])
    return tuple(out) if all(d >= 0 for d in out) else None
