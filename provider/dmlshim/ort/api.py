"""The onnxruntime names a script uses besides ``InferenceSession``, so that ``import dmlshim as ort`` works.

Option and value types (``SessionOptions``, ``RunOptions``, ``OrtValue``, the enums) are onnxruntime's own
objects: dmlshim hands them to the onnxruntime sessions it builds. The module-level functions answer for
dmlshim: ``get_available_providers()`` lists the emulated ``DmlExecutionProvider``, then onnxruntime's own,
``get_device()`` says ``"CPU-DML"`` as onnxruntime-directml does.
"""

from __future__ import annotations

import onnxruntime as _ort

from ..execute.feeds import ModelMetadata as ModelMetadata
from ..execute.feeds import NodeArg as NodeArg
from .iobinding import IOBinding as IOBinding
from .names import ORT_API_NAMES
from .providers import CPU_EP, DML_EP, available_providers

SessionOptions = _ort.SessionOptions
RunOptions = _ort.RunOptions
GraphOptimizationLevel = _ort.GraphOptimizationLevel
ExecutionMode = _ort.ExecutionMode
ExecutionOrder = _ort.ExecutionOrder
OrtValue = _ort.OrtValue
SparseTensor = _ort.SparseTensor
OrtDevice = _ort.OrtDevice
OrtMemType = _ort.OrtMemType
OrtMemoryInfo = _ort.OrtMemoryInfo
OrtAllocatorType = _ort.OrtAllocatorType
OrtSparseFormat = _ort.OrtSparseFormat
set_default_logger_severity = _ort.set_default_logger_severity
set_default_logger_verbosity = _ort.set_default_logger_verbosity
set_seed = _ort.set_seed
disable_telemetry_events = _ort.disable_telemetry_events
enable_telemetry_events = _ort.enable_telemetry_events

ORT_VERSION = _ort.__version__
"""The version of the onnxruntime that runs the non-emulated nodes."""


def get_available_providers() -> list[str]:
    """``DmlExecutionProvider`` (emulated), then what the onnxruntime installed here lists."""
    return available_providers()


def get_all_providers() -> list[str]:
    """The two providers that decide how dmlshim runs a model (DirectML emulated, or the CPU alone)."""
    return [DML_EP, CPU_EP]


def get_device() -> str:
    """``"CPU-DML"``, what onnxruntime-directml reports (the DirectML device is emulated on the CPU)."""
    return "CPU-DML"


def get_version_string() -> str:
    """The onnxruntime version running the non-emulated nodes (``dmlshim.__version__`` is dmlshim's)."""
    return str(_ort.get_version_string())


def get_build_info() -> str:
    """onnxruntime's build information, with dmlshim's emulation noted."""
    return f"dmlshim DirectML emulation over onnxruntime: {_ort.get_build_info()}"


__all__ = list(ORT_API_NAMES)
