"""The DirectML rules a gather/scatter descriptor must follow: stable rule codes and the violation record.

Rule codes (``Violation.rule``) are stable; tests and reports match on them, never on messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UINT_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

RULES: dict[str, str] = {
    "OPERATOR_UNAVAILABLE": "the operator was introduced at a higher feature level",
    "TENSOR_DIMENSION_COUNT_OUT_OF_RANGE": (
        "a buffer tensor has 1 to DML_TENSOR_DIMENSION_COUNT_MAX (5) dimensions before FL 3_0, "
        "1 to DML_TENSOR_DIMENSION_COUNT_MAX1 (8) from FL 3_0"
    ),
    "DIMENSION_COUNT_UNSUPPORTED": "the operator's support table does not list this DimensionCount",
    "DIMENSION_COUNT_MISMATCH": "all tensors of the operator must have the same DimensionCount",
    "DATA_TYPE_UNSUPPORTED": "the operator's support table does not list this DataType for the tensor",
    "DATA_TYPE_MISMATCH": "OutputTensor (and UpdatesTensor) must have InputTensor's DataType",
    "FLAGS_INVALID": "Flags is NONE or OWNED_BY_DML, and OWNED_BY_DML only on input tensors",
    "SIZE_ZERO": "a size of 0 in any dimension is invalid",
    "UINT_OUT_OF_RANGE": "Sizes, Strides and GuaranteedBaseOffsetAlignment are 32-bit UINTs",
    "ELEMENT_COUNT_EXCEEDS_MAX": "a tensor holds at most 2^32-1 elements",
    "STRIDES_LENGTH_MISMATCH": "Strides, if given, has DimensionCount entries like Sizes",
    "TOTAL_TENSOR_SIZE_TOO_SMALL": "TotalTensorSizeInBytes is at least DMLCalcBufferTensorSize",
    "BASE_OFFSET_ALIGNMENT_INVALID": (
        "GuaranteedBaseOffsetAlignment is 0 or a power of two >= DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT (16)"
    ),
    "AXIS_OUT_OF_RANGE": "Axis is in [0, DimensionCount)",
    "INDEX_DIMENSIONS_OUT_OF_RANGE": "GATHER IndexDimensions is in [0, DimensionCount] (inclusive)",
    "INPUT_DIMENSION_COUNT_OUT_OF_RANGE": "InputDimensionCount is in [1, DimensionCount] (inclusive)",
    "INDICES_DIMENSION_COUNT_OUT_OF_RANGE": "IndicesDimensionCount is in [1, DimensionCount] (inclusive)",
    "BATCH_DIMENSION_COUNT_OUT_OF_RANGE": (
        "BatchDimensionCount is in [0, min(InputDimensionCount, IndicesDimensionCount - 1)]"
    ),
    "LEADING_DIMENSIONS_NOT_ONE": "the dimensions before the meaningful ones (the padding) must be 1",
    "BATCH_SIZES_MISMATCH": "the batch dimensions of InputTensor and IndicesTensor must be equal",
    "INDEX_TUPLE_SIZE_OUT_OF_RANGE": (
        "the last IndicesTensor dimension (coordinates per index tuple) is in "
        "[1, InputDimensionCount - BatchDimensionCount]"
    ),
    "OUTPUT_RANK_EXCEEDS_DIMENSION_COUNT": (
        "the meaningful dimensions of the computed Sizes must fit into the shared DimensionCount"
    ),
    "SIZES_MISMATCH": "a tensor's Sizes differ from what the operator's Sizes rule requires",
}
"""Every rule code ``validate`` can report, with a one-line statement of the DirectML rule."""


@dataclass(frozen=True)
class Violation:
    """One DirectML rule a descriptor breaks.

    Attributes:
        rule: stable code from ``RULES``, e.g. ``"DATA_TYPE_UNSUPPORTED"``.
        field: DirectML path of the offending field, e.g. ``"IndicesTensor.DataType"`` or ``"Axis"``.
        message: one sentence quoting the DirectML rule and the feature level.
        value: the offending value, JSON-able (int, list of int, or a DirectML enum name).
    """

    rule: str
    field: str
    message: str
    value: object

    def as_dict(self) -> dict[str, Any]:
        """The violation as a JSON-ready dict with DirectML-style keys."""
        return {"rule": self.rule, "field": self.field, "message": self.message, "value": self.value}

    def __str__(self) -> str:
        return f"[{self.rule}] {self.field} = {self.value!r}: {self.message}"
