"""One frozen descriptor type per DirectML gather/scatter operator, with DirectML's field names.

Python attributes are snake_case (as PyDirectML does); ``TENSOR_FIELDS`` and ``UINT_FIELDS`` give the
DirectML names used wherever data leaves the program (JSON, reports, binding names).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from .enums import OperatorType
from .tensor import BufferTensorDesc


@functools.lru_cache(maxsize=64)
def snake_case(dml_field: str) -> str:
    """``InputDimensionCount`` -> ``input_dimension_count``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", dml_field).lower()


@functools.lru_cache(maxsize=32)
def _attr_names(fields: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, snake_case(name)) for name in fields)


@dataclass(frozen=True)
class _OperatorDescBase:
    OPERATOR_TYPE: ClassVar[OperatorType]
    TENSOR_FIELDS: ClassVar[tuple[str, ...]]
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]]
    UINT_FIELDS: ClassVar[tuple[str, ...]]

    @property
    def operator_type(self) -> OperatorType:
        return self.OPERATOR_TYPE

    def tensors(self) -> dict[str, BufferTensorDesc]:
        """Tensor fields by DirectML name, in struct order (``InputTensor``, ..., ``OutputTensor``)."""
        return {name: getattr(self, attr) for name, attr in _attr_names(self.TENSOR_FIELDS)}

    def uints(self) -> dict[str, int]:
        """UINT fields by DirectML name, in struct order."""
        return {name: int(getattr(self, attr)) for name, attr in _attr_names(self.UINT_FIELDS)}

    @classmethod
    def from_fields(cls, tensors: Mapping[str, BufferTensorDesc], uints: Mapping[str, int]) -> OperatorDesc:
        """Build a descriptor from DirectML-named fields (the inverse of ``tensors()``/``uints()``)."""
        kwargs: dict[str, object] = {snake_case(k): v for k, v in tensors.items()}
        kwargs.update({snake_case(k): int(v) for k, v in uints.items()})
        return cls(**kwargs)  # type: ignore[return-value]


@dataclass(frozen=True)
class GatherDesc(_OperatorDescBase):
    """DML_GATHER_OPERATOR_DESC."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.GATHER
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "OutputTensor")
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = ("Axis", "IndexDimensions")

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    axis: int
    index_dimensions: int


@dataclass(frozen=True)
class GatherElementsDesc(_OperatorDescBase):
    """DML_GATHER_ELEMENTS_OPERATOR_DESC."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.GATHER_ELEMENTS
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "OutputTensor")
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = ("Axis",)

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    axis: int


@dataclass(frozen=True)
class GatherNdDesc(_OperatorDescBase):
    """DML_GATHER_ND_OPERATOR_DESC."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.GATHER_ND
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "OutputTensor")
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = ("InputDimensionCount", "IndicesDimensionCount")

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    input_dimension_count: int
    indices_dimension_count: int

    @property
    def batch_dimension_count(self) -> int:
        """GATHER_ND has no batch dimensions; it equals GATHER_ND1 with BatchDimensionCount 0."""
        return 0


@dataclass(frozen=True)
class GatherNd1Desc(_OperatorDescBase):
    """DML_GATHER_ND1_OPERATOR_DESC (FL 3_0): GATHER_ND plus BatchDimensionCount."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.GATHER_ND1
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "OutputTensor")
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = (
        "InputDimensionCount",
        "IndicesDimensionCount",
        "BatchDimensionCount",
    )

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    input_dimension_count: int
    indices_dimension_count: int
    batch_dimension_count: int


@dataclass(frozen=True)
class ScatterDesc(_OperatorDescBase):
    """DML_SCATTER_OPERATOR_DESC, also named DML_SCATTER_ELEMENTS_OPERATOR_DESC."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.SCATTER_ELEMENTS
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = (
        "InputTensor",
        "IndicesTensor",
        "UpdatesTensor",
        "OutputTensor",
    )
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "UpdatesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = ("Axis",)

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    updates_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    axis: int


@dataclass(frozen=True)
class ScatterNdDesc(_OperatorDescBase):
    """DML_SCATTER_ND_OPERATOR_DESC."""

    OPERATOR_TYPE: ClassVar[OperatorType] = OperatorType.SCATTER_ND
    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = (
        "InputTensor",
        "IndicesTensor",
        "UpdatesTensor",
        "OutputTensor",
    )
    INPUT_TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ("InputTensor", "IndicesTensor", "UpdatesTensor")
    UINT_FIELDS: ClassVar[tuple[str, ...]] = ("InputDimensionCount", "IndicesDimensionCount")

    input_tensor: BufferTensorDesc
    indices_tensor: BufferTensorDesc
    updates_tensor: BufferTensorDesc
    output_tensor: BufferTensorDesc
    input_dimension_count: int
    indices_dimension_count: int


OperatorDesc = GatherDesc | GatherElementsDesc | GatherNdDesc | GatherNd1Desc | ScatterDesc | ScatterNdDesc
"""Any of the six gather/scatter descriptors."""

DESC_TYPES: dict[OperatorType, type[OperatorDesc]] = {
    OperatorType.GATHER: GatherDesc,
    OperatorType.GATHER_ELEMENTS: GatherElementsDesc,
    OperatorType.GATHER_ND: GatherNdDesc,
    OperatorType.GATHER_ND1: GatherNd1Desc,
    OperatorType.SCATTER_ELEMENTS: ScatterDesc,
    OperatorType.SCATTER_ND: ScatterNdDesc,
}
"""The descriptor class of each supported DML_OPERATOR_TYPE."""
