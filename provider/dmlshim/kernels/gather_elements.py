"""DML_OPERATOR_GATHER_ELEMENTS.

``output[i, j, k, ...] = input[i, index[i, j, k, ...], k, ...]`` (the index replaces the Axis coordinate).
IndicesTensor.Sizes equal InputTensor.Sizes except on Axis; OutputTensor.Sizes equal IndicesTensor.Sizes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml.operators import GatherElementsDesc, ScatterDesc
from .buffers import grid_offsets
from .common import bind, fail, index_context, require_same_data_type, require_sizes
from .indices import normalize_indices
from .options import KernelOptions, KernelResult


def check_axis_shapes(desc: GatherElementsDesc | ScatterDesc) -> None:
    """Axis in range and IndicesTensor.Sizes equal to InputTensor.Sizes except on Axis."""
    in_sizes = desc.input_tensor.sizes
    idx_sizes = desc.indices_tensor.sizes
    d = len(in_sizes)
    if not 0 <= desc.axis < d:
        fail(desc, f"Axis {desc.axis} is outside [0, {d})", value=desc.axis)
    mismatch = [i for i in range(d) if i != desc.axis and in_sizes[i] != idx_sizes[i]]
    if mismatch:
        fail(
            desc,
            f"IndicesTensor.Sizes {list(idx_sizes)} must equal InputTensor.Sizes {list(in_sizes)} in every "
            f"dimension except Axis {desc.axis} (differs in dimension {mismatch[0]})",
            field="IndicesTensor",
            value=list(idx_sizes),
        )


def element_offsets(
    idx: np.ndarray, grid: tuple[int, ...], strides: tuple[int, ...], axis: int
) -> np.ndarray:
    """Turn validated indices (shaped ``grid``, not modified) into a new array of flat element offsets.

    The offset of element ``p`` is ``idx[p] * strides[axis]`` plus the offset of ``p``'s other
    coordinates; the latter is split into the coordinates before and after Axis so that only two small
    offset vectors are built and broadcast (e.g. along the last axis: ``row_base + idx``). The first
    operation reads the indices in their own dtype and writes int64, so no separate conversion pass runs.
    """
    pre, mid, post = math.prod(grid[:axis]), grid[axis], math.prod(grid[axis + 1 :])
    idx3 = idx.reshape(pre, mid, post)
    terms: list[np.ndarray] = []
    if pre > 1:
        terms.append(grid_offsets(grid[:axis], strides[:axis])[:, None, None])
    if post > 1:
        terms.append(grid_offsets(grid[axis + 1 :], strides[axis + 1 :])[None, None, :])
    if strides[axis] != 1:
        off = np.multiply(idx3, strides[axis], dtype=np.int64)
    elif terms:
        off = np.add(idx3, terms.pop(0), dtype=np.int64)
    else:
        off = idx3.astype(np.int64)
    for term in terms:
        off += term
    return off.reshape(-1)


def run(desc: GatherElementsDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_GATHER_ELEMENTS; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    require_same_data_type(desc, "InputTensor", "OutputTensor")
    ctx = index_context(desc, options, "InputTensor")
    check_axis_shapes(desc)
    idx_sizes = desc.indices_tensor.sizes
    require_sizes(desc, "OutputTensor", idx_sizes, "it must equal IndicesTensor.Sizes")

    inp = views["InputTensor"]
    axis = desc.axis
    idx = normalize_indices(views["IndicesTensor"].array(), (inp.sizes[axis],), (axis,), ctx)
    dtype = desc.output_tensor.data_type.numpy_dtype
    if idx.size == 0:
        return KernelResult(np.zeros(idx_sizes, dtype=dtype))
    offsets = element_offsets(idx, idx_sizes, inp.strides, axis)
    # Indices are validated above; "clip" only skips numpy's own per-element bounds error path.
    return KernelResult(np.take(inp.flat, offsets, mode="clip").reshape(idx_sizes))
