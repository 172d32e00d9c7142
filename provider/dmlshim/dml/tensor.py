"""DML_BUFFER_TENSOR_DESC and DirectML's buffer-size rule (DMLCalcBufferTensorSize)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .enums import DataType, TensorFlags


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    """``values`` as a tuple of Python ints (returned as is when it already is one)."""
    # int() returns an int unchanged; map is cheaper than a generator here.
    return tuple(map(int, values))


def calc_buffer_tensor_size(data_type: DataType, sizes: Sequence[int], strides: Sequence[int] | None) -> int:
    """TotalTensorSizeInBytes as DirectMLX.h's DMLCalcBufferTensorSize computes it.

    Without strides the bits are product(Sizes) * elementBits; with strides they are
    (sum((Sizes[i]-1) * Strides[i]) + 1) * elementBits. Bytes are rounded up to a whole byte and then
    to a multiple of 4.
    """
    bits = data_type.bits
    if strides is None:
        elements = math.prod(sizes)
    else:
        elements = sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) + 1
    byte_count = (elements * bits + 7) // 8
    return (byte_count + 3) & ~3


@dataclass(frozen=True)
class BufferTensorDesc:
    """DML_BUFFER_TENSOR_DESC, field names as in DirectML.h (snake_case here, DirectML's in JSON).

    ``total_tensor_size_in_bytes`` defaults to DirectML's rule; pass it explicitly only to describe a
    buffer larger than the tensor needs.
    """

    data_type: DataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    flags: TensorFlags = TensorFlags.NONE
    total_tensor_size_in_bytes: int = field(default=-1)
    guaranteed_base_offset_alignment: int = 0

    def __post_init__(self) -> None:
        # Translation builds thousands of these: convert only what is not already of the right type.
        object.__setattr__(self, "sizes", _int_tuple(self.sizes))
        if self.strides is not None:
            object.__setattr__(self, "strides", _int_tuple(self.strides))
        if type(self.data_type) is not DataType:
            object.__setattr__(self, "data_type", DataType(self.data_type))
        if type(self.flags) is not TensorFlags:
            object.__setattr__(self, "flags", TensorFlags(self.flags))
        if self.total_tensor_size_in_bytes < 0:
            total = calc_buffer_tensor_size(self.data_type, self.sizes, self._strides_for_size())
            object.__setattr__(self, "total_tensor_size_in_bytes", total)

    @classmethod
    def of(
        cls, data_type: DataType, sizes: tuple[int, ...], strides: tuple[int, ...] | None = None
    ) -> BufferTensorDesc:
        """``BufferTensorDesc(data_type, sizes, strides)`` for values that are already what the
        constructor would make of them (a DataType, tuples of ints, Strides as long as Sizes).

        The translator builds thousands of tensors from such values; this skips re-checking them.
        """
        out = object.__new__(cls)
        out.__dict__.update(
            data_type=data_type,
            sizes=sizes,
            strides=strides,
            flags=TensorFlags.NONE,
            total_tensor_size_in_bytes=calc_buffer_tensor_size(data_type, sizes, strides),
            guaranteed_base_offset_alignment=0,
        )
        return out

    def _strides_for_size(self) -> tuple[int, ...] | None:
        # A malformed strides tuple must not crash construction: validation reports it instead.
        if self.strides is not None and len(self.strides) == len(self.sizes):
            return self.strides
        return None

    @property
    def dimension_count(self) -> int:
        """DimensionCount: the length of Sizes."""
        return len(self.sizes)

    @functools.cached_property
    def element_count(self) -> int:
        """Number of logical elements (product of Sizes)."""
        return math.prod(self.sizes)

    @functools.cached_property
    def packed_strides(self) -> tuple[int, ...]:
        """Row-major strides in elements, as DirectML assumes when Strides is null."""
        return packed_strides(self.sizes)

    @functools.cached_property
    def effective_strides(self) -> tuple[int, ...]:
        """Strides if given, packed strides otherwise."""
        return self.strides if self.strides is not None else self.packed_strides

    @functools.cached_property
    def is_packed(self) -> bool:
        """True when Strides is null or equal to the packed strides (size-1 dims ignored)."""
        if self.strides is None:
            return True
        return all(
            st == p or sz == 1
            for st, p, sz in zip(self.strides, self.packed_strides, self.sizes, strict=False)
        )

    @functools.cached_property
    def buffer_element_count(self) -> int:
        """Elements the bound buffer must hold: the span Strides reach, or product(Sizes) if packed."""
        if self.strides is None:
            return self.element_count
        if any(s == 0 for s in self.sizes):
            return 0
        return sum((s - 1) * st for s, st in zip(self.sizes, self.strides, strict=False)) + 1

    def with_sizes(self, sizes: Sequence[int]) -> BufferTensorDesc:
        """A packed copy with other Sizes (TotalTensorSizeInBytes recomputed)."""
        return BufferTensorDesc(self.data_type, tuple(sizes), None, self.flags)

    def with_data_type(self, data_type: DataType) -> BufferTensorDesc:
        """A copy with another DataType (TotalTensorSizeInBytes recomputed)."""
        return BufferTensorDesc(data_type, self.sizes, self.strides, self.flags)


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements of a tensor with these Sizes (what a null Strides means)."""
    out: list[int] = []
    acc = 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def right_align(shape: Sequence[int], dimension_count: int) -> tuple[int, ...]:
    """Right-align a shape into ``dimension_count`` dimensions by prepending 1s (DirectML's convention).

    Raises ValueError if the shape has more dimensions than ``dimension_count``.
    """
    shape = _int_tuple(shape)
    if len(shape) > dimension_count:
        raise ValueError(f"shape {list(shape)} has more than {dimension_count} dimensions")
    return (1,) * (dimension_count - len(shape)) + shape
