"""dmlshim: run and validate the gather/scatter part of ONNX models exactly as DirectML executes it."""

from __future__ import annotations

import logging

from .dml import DataType, FeatureLevel, OperatorType
from .errors import (
    BadInputError,
    BadModelError,
    DmlShimError,
    EngineUnavailableError,
    IndexOutOfRangeError,
    InvalidDescriptorError,
    UnsupportedNodeError,
    ValidationMismatchError,
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "BadInputError",
    "BadModelError",
    "DataType",
    "DmlShimError",
    "EngineUnavailableError",
    "FeatureLevel",
    "IndexOutOfRangeError",
    "InvalidDescriptorError",
    "OperatorType",
    "UnsupportedNodeError",
    "ValidationMismatchError",
    "__version__",
]
