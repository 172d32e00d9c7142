"""The DirectML model: enums, buffer tensor descs, operator descriptors, validation and JSON form."""

from __future__ import annotations

from .enums import (
    DEFAULT_FEATURE_LEVEL,
    DataType,
    FeatureLevel,
    OperatorType,
    TensorFlags,
    TensorType,
)
from .operators import (
    DESC_TYPES,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
)
from .tensor import BufferTensorDesc, calc_buffer_tensor_size, right_align

__all__ = [
    "DEFAULT_FEATURE_LEVEL",
    "DESC_TYPES",
    "BufferTensorDesc",
    "DataType",
    "FeatureLevel",
    "GatherDesc",
    "GatherElementsDesc",
    "GatherNd1Desc",
    "GatherNdDesc",
    "OperatorDesc",
    "OperatorType",
    "ScatterDesc",
    "ScatterNdDesc",
    "TensorFlags",
    "TensorType",
    "calc_buffer_tensor_size",
    "right_align",
]
