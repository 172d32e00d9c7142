"""The module-level names onnxruntime offers that dmlshim offers too (:mod:`dmlshim.ort.api` defines them;
``import dmlshim as ort`` reaches them lazily). Kept apart so that reading the list imports nothing."""

from __future__ import annotations

ORT_API_NAMES: tuple[str, ...] = (
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "IOBinding",
    "ModelMetadata",
    "NodeArg",
    "ORT_VERSION",
    "OrtAllocatorType",
    "OrtDevice",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtSparseFormat",
    "OrtValue",
    "RunOptions",
    "SessionOptions",
    "SparseTensor",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_seed",
)
