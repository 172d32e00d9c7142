"""dmlshim: run and validate the gather/scatter part of ONNX models exactly as DirectML executes it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .dml import DataType, FeatureLevel, OperatorType
from .errors import (
    BadInputError,
    BadModelError,
    DmlShimError,
    EngineUnavailableError,
    IndexOutOfRangeError,
    InvalidDescriptorError,
    TooLargeError,
    UnsupportedNodeError,
    ValidationMismatchError,
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from .execute.session import InferenceSession


def __getattr__(name: str) -> Any:
    # InferenceSession pulls in onnxruntime and the translator; import them only when it is used.
    if name == "InferenceSession":
        from .execute.session import InferenceSession

        return InferenceSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BadInputError",
    "BadModelError",
    "DataType",
    "DmlShimError",
    "EngineUnavailableError",
    "FeatureLevel",
    "IndexOutOfRangeError",
    "InferenceSession",
    "InvalidDescriptorError",
    "OperatorType",
    "TooLargeError",
    "UnsupportedNodeError",
    "ValidationMismatchError",
    "__version__",
]
