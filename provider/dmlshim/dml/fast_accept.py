"""The accepting pass: proves a gather/scatter descriptor valid with plain comparisons.

Translation validates every descriptor it builds, most of them valid. ``accepted`` proves validity without
building a message; only when it cannot does ``validate`` run the rule checks (``rule_checks``), which then
find and describe every violation. It must never accept what a rule check rejects (the tests compare both
passes on mutated descriptors); rejecting a valid descriptor only costs time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .enums import (
    DML_MAX_TENSOR_ELEMENTS,
    DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT,
    DataType,
    FeatureLevel,
    TensorFlags,
)
from .operators import (
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
    snake_case,
)
from .rules import UINT64_MAX, UINT_MAX
from .shapes import gather_nd_output_sizes, gather_output_sizes
from .support import max_dimension_count, support_row
from .tensor import BufferTensorDesc

_BITS: dict[DataType, int] = {t: t.bits for t in DataType}


def accepted(desc: OperatorDesc, fl: FeatureLevel) -> bool:
    """True only if no rule check of ``validate`` reports anything for ``desc`` at ``fl``."""
    row = support_row(desc.OPERATOR_TYPE, fl)
    if row is None:
        return False
    first = desc.input_tensor
    if type(first) is not BufferTensorDesc:
        return False
    d = len(first.sizes)
    if not 1 <= d <= max_dimension_count(fl) or d not in row.dimension_counts:
        return False
    input_type = first.data_type
    inputs = desc.INPUT_TENSOR_FIELDS
    for name, attribute in _TENSOR_ATTRIBUTES[type(desc)]:
        tensor = getattr(desc, attribute)
        if type(tensor) is not BufferTensorDesc:
            return False
        sizes = tensor.sizes
        data_type = tensor.data_type
        if len(sizes) != d or min(sizes) < 1 or max(sizes) > UINT_MAX:
            return False
        if name == "IndicesTensor":
            if data_type not in row.index_types:
                return False
        elif data_type not in row.data_types or (name != "InputTensor" and data_type != input_type):
            return False
        flags = int(tensor.flags)
        if flags and (flags != TensorFlags.OWNED_BY_DML or name not in inputs):
            return False
        elements = math.prod(sizes)
        if elements > DML_MAX_TENSOR_ELEMENTS:
            return False
        strides = tensor.strides
        if strides is not None:
            if len(strides) != d or min(strides) < 0 or max(strides) > UINT_MAX:
                return False
            elements = sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) + 1
        # DMLCalcBufferTensorSize (calc_buffer_tensor_size) from the element count at hand.
        required = ((elements * _BITS[data_type] + 7) // 8 + 3) & ~3
        if not required <= int(tensor.total_tensor_size_in_bytes) <= UINT64_MAX:
            return False
        alignment = int(tensor.guaranteed_base_offset_alignment)
        if alignment and not (
            0 < alignment <= UINT_MAX
            and not alignment & (alignment - 1)
            and alignment >= DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT
        ):
            return False
    return _ACCEPTS[type(desc)](desc, d)


def _accept_gather(desc: GatherDesc, d: int) -> bool:
    axis, k = int(desc.axis), int(desc.index_dimensions)
    if not (0 <= axis < d and 0 <= k <= d):
        return False
    inp, indices = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if any(s != 1 for s in indices[: d - k]):
        return False
    # gather_output_sizes without its right-alignment, which changes nothing when the ranks add up to d.
    expected = (*inp[:axis], *indices[d - k :], *inp[axis + 1 :])
    if len(expected) != d:
        try:
            expected = gather_output_sizes(inp, indices, axis, k)
        except ValueError:
            return False
    return desc.output_tensor.sizes == expected


def _accept_elements(desc: GatherElementsDesc | ScatterDesc, d: int) -> bool:
    axis = int(desc.axis)
    if not 0 <= axis < d:
        return False
    inp, idx = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if inp[:axis] != idx[:axis] or inp[axis + 1 :] != idx[axis + 1 :]:
        return False
    if isinstance(desc, ScatterDesc):
        return desc.updates_tensor.sizes == idx and desc.output_tensor.sizes == inp
    return desc.output_tensor.sizes == idx


def _accept_nd(desc: GatherNdDesc | GatherNd1Desc | ScatterNdDesc, d: int) -> bool:
    r, q = int(desc.input_dimension_count), int(desc.indices_dimension_count)
    batch = int(desc.batch_dimension_count) if isinstance(desc, GatherNd1Desc) else 0
    if not (1 <= r <= d and 1 <= q <= d and 0 <= batch <= min(r, q - 1)):
        return False
    inp, idx = desc.input_tensor.sizes, desc.indices_tensor.sizes
    if any(s != 1 for s in inp[: d - r]) or any(s != 1 for s in idx[: d - q]):
        return False
    if inp[d - r : d - r + batch] != idx[d - q : d - q + batch] or not 1 <= idx[-1] <= r - batch:
        return False
    try:
        expected = gather_nd_output_sizes(inp, idx, r, q, batch)
    except ValueError:
        return False
    if isinstance(desc, ScatterNdDesc):
        return desc.updates_tensor.sizes == expected and desc.output_tensor.sizes == inp
    return desc.output_tensor.sizes == expected


_TENSOR_ATTRIBUTES: dict[type, tuple[tuple[str, str], ...]] = {
    desc_type: tuple((name, snake_case(name)) for name in desc_type.TENSOR_FIELDS)
    for desc_type in (GatherDesc, GatherElementsDesc, ScatterDesc, GatherNdDesc, GatherNd1Desc, ScatterNdDesc)
}
"""(DirectML name, attribute) of the tensor fields of each descriptor type, in struct order."""

_ACCEPTS: dict[type, Callable[[Any, int], bool]] = {
    GatherDesc: _accept_gather,
    GatherElementsDesc: _accept_elements,
    ScatterDesc: _accept_elements,
    GatherNdDesc: _accept_nd,
    GatherNd1Desc: _accept_nd,
    ScatterNdDesc: _accept_nd,
}
