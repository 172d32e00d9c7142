"""DirectML enumerations with the exact numeric values of DirectML.h (DML_TARGET_VERSION 0x6400)."""

from __future__ import annotations

import enum
import re

import numpy as np


class DataType(enum.IntEnum):
    """DML_TENSOR_DATA_TYPE."""

    UNKNOWN = 0
    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11
    UINT4 = 12
    INT4 = 13

    @property
    def dml_name(self) -> str:
        """The C name, e.g. ``DML_TENSOR_DATA_TYPE_FLOAT32``."""
        return f"DML_TENSOR_DATA_TYPE_{self.name}"

    @property
    def bits(self) -> int:
        """Element size in bits (DMLCalcBufferTensorSize)."""
        return _BITS[self]

    @property
    def is_signed_integer(self) -> bool:
        return self in (DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.INT4)

    @property
    def is_integer(self) -> bool:
        return self not in (DataType.UNKNOWN, DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64)

    @property
    def is_64bit(self) -> bool:
        return self.bits == 64

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype holding one element; raises ValueError for types numpy cannot hold."""
        try:
            return np.dtype(_NUMPY[self])
        except KeyError:
            raise ValueError(f"{self.dml_name} has no numpy equivalent") from None

    @classmethod
    def parse(cls, text: str) -> DataType:
        """Accept ``FLOAT32`` or ``DML_TENSOR_DATA_TYPE_FLOAT32`` (case-sensitive, as DxDispatch)."""
        name = text[len("DML_TENSOR_DATA_TYPE_") :] if text.startswith("DML_TENSOR_DATA_TYPE_") else text
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown DML_TENSOR_DATA_TYPE {text!r}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DataType:
        """The DirectML type of a numpy dtype (bool is UINT8, as the DML EP maps ONNX bool)."""
        dt = np.dtype(dtype)
        if dt == np.bool_:
            return cls.UINT8
        for member, name in _NUMPY.items():
            if np.dtype(name) == dt:
                return member
        raise ValueError(f"numpy dtype {dt} has no DML_TENSOR_DATA_TYPE")


_BITS = {
    DataType.UNKNOWN: 0,
    DataType.FLOAT64: 64,
    DataType.UINT64: 64,
    DataType.INT64: 64,
    DataType.FLOAT32: 32,
    DataType.UINT32: 32,
    DataType.INT32: 32,
    DataType.FLOAT16: 16,
    DataType.UINT16: 16,
    DataType.INT16: 16,
    DataType.UINT8: 8,
    DataType.INT8: 8,
    DataType.UINT4: 4,
    DataType.INT4: 4,
}

_NUMPY = {
    DataType.FLOAT32: "float32",
    DataType.FLOAT16: "float16",
    DataType.UINT32: "uint32",
    DataType.UINT16: "uint16",
    DataType.UINT8: "uint8",
    DataType.INT32: "int32",
    DataType.INT16: "int16",
    DataType.INT8: "int8",
    DataType.FLOAT64: "float64",
    DataType.UINT64: "uint64",
    DataType.INT64: "int64",
}


class OperatorType(enum.IntEnum):
    """DML_OPERATOR_TYPE, restricted to the operators dmlshim models (plus IDENTITY)."""

    ELEMENT_WISE_IDENTITY = 1
    GATHER = 67
    SCATTER_ELEMENTS = 94
    GATHER_ELEMENTS = 107
    GATHER_ND = 108
    SCATTER_ND = 109
    GATHER_ND1 = 140

    # DML_OPERATOR_SCATTER is an alias of SCATTER_ELEMENTS (same value, same struct).
    SCATTER = 94

    @property
    def dml_name(self) -> str:
        """The C name. SCATTER_ELEMENTS is written DML_OPERATOR_SCATTER: DxDispatch knows only that one."""
        if self is OperatorType.SCATTER_ELEMENTS:
            return "DML_OPERATOR_SCATTER"
        return f"DML_OPERATOR_{self.name}"

    @classmethod
    def parse(cls, text: str) -> OperatorType:
        """Accept ``DML_OPERATOR_GATHER_ND1`` or ``GATHER_ND1``; SCATTER and SCATTER_ELEMENTS are one."""
        name = text[len("DML_OPERATOR_") :] if text.startswith("DML_OPERATOR_") else text
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown or unsupported DML_OPERATOR_TYPE {text!r}") from None


class TensorType(enum.IntEnum):
    """DML_TENSOR_TYPE."""

    INVALID = 0
    BUFFER = 1


class TensorFlags(enum.IntFlag):
    """DML_TENSOR_FLAGS."""

    NONE = 0
    OWNED_BY_DML = 1

    @property
    def dml_name(self) -> str:
        return "OWNED_BY_DML" if self & TensorFlags.OWNED_BY_DML else "NONE"

    @classmethod
    def parse(cls, text: str) -> TensorFlags:
        name = text[len("DML_TENSOR_FLAG_") :] if text.startswith("DML_TENSOR_FLAG_") else text
        if name == "NONE":
            return cls.NONE
        if name == "OWNED_BY_DML":
            return cls.OWNED_BY_DML
        raise ValueError(f"unknown DML_TENSOR_FLAGS {text!r}")


class FeatureLevel(enum.IntEnum):
    """DML_FEATURE_LEVEL: ordered hex values, compared as numbers (0x2100 < 0x3000)."""

    FL_1_0 = 0x1000
    FL_2_0 = 0x2000
    FL_2_1 = 0x2100
    FL_3_0 = 0x3000
    FL_3_1 = 0x3100
    FL_4_0 = 0x4000
    FL_4_1 = 0x4100
    FL_5_0 = 0x5000
    FL_5_1 = 0x5100
    FL_5_2 = 0x5200
    FL_6_0 = 0x6000
    FL_6_1 = 0x6100
    FL_6_2 = 0x6200
    FL_6_3 = 0x6300
    FL_6_4 = 0x6400

    @property
    def dml_name(self) -> str:
        """e.g. ``DML_FEATURE_LEVEL_5_0``."""
        return "DML_FEATURE_LEVEL" + self.name[2:]

    def __str__(self) -> str:
        return self.dml_name

    @property
    def short(self) -> str:
        """e.g. ``5_0``."""
        return self.name[3:]

    @classmethod
    def parse(cls, text: str | int) -> FeatureLevel:
        """Accept ``3_0``, ``3.0``, ``0x3000``, ``DML_FEATURE_LEVEL_3_0`` or the integer 0x3000."""
        if isinstance(text, int):
            return cls(text)
        known = ", ".join(level.short for level in cls)
        if not isinstance(text, str):  # None, a float, bytes: named like any unknown level, not a traceback
            raise ValueError(f"unknown DirectML feature level {text!r}; known levels: {known}")
        raw = text.strip()
        if raw.upper().startswith("DML_FEATURE_LEVEL_"):
            raw = raw[len("DML_FEATURE_LEVEL_") :]
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", raw):
            try:
                return cls(int(raw, 16))
            except ValueError:
                pass
        else:
            m = re.fullmatch(r"(\d+)[._](\d+)", raw)
            if m:
                try:
                    return cls((int(m.group(1)) << 12) | (int(m.group(2)) << 8))
                except ValueError:
                    pass
        raise ValueError(f"unknown DirectML feature level {text!r}; known levels: {known}")


DEFAULT_FEATURE_LEVEL = FeatureLevel.FL_5_0
"""What onnxruntime-directml requires of a device."""

DML_TENSOR_DIMENSION_COUNT_MAX = 5
DML_TENSOR_DIMENSION_COUNT_MAX1 = 8
DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16
DML_MAX_TENSOR_ELEMENTS = 2**32 - 1
