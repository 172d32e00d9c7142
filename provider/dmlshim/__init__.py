"""dmlshim: run and validate the gather/scatter part of ONNX models exactly as DirectML executes it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .startup import defer_collection_while_starting, quiet_interrupt_while_starting

quiet_interrupt_while_starting()  # before the heavy imports below: the command's Ctrl-C, quietly
defer_collection_while_starting()  # and no cycle collection over what they import (the command's only)

from .dml import DataType, FeatureLevel, OperatorType  # noqa: E402
from .errors import (  # noqa: E402
    BadInputError,
    BadModelError,
    DmlShimError,
    EngineUnavailableError,
    IndexOutOfRangeError,
    InvalidDescriptorError,
    NotSupportedError,
    TooLargeError,
    UnsupportedNodeError,
    ValidationMismatchError,
)
from .ort.names import ORT_API_NAMES  # noqa: E402
from .version import __version__  # noqa: E402

logging.getLogger(__name__).addHandler(logging.NullHandler())

_ORT_API = ORT_API_NAMES
"""onnxruntime's module-level names, from :mod:`dmlshim.ort.api`, so ``import dmlshim as ort`` works."""

if TYPE_CHECKING:
    from .ort.api import ExecutionMode as ExecutionMode
    from .ort.api import ExecutionOrder as ExecutionOrder
    from .ort.api import GraphOptimizationLevel as GraphOptimizationLevel
    from .ort.api import IOBinding as IOBinding
    from .ort.api import ModelMetadata as ModelMetadata
    from .ort.api import NodeArg as NodeArg
    from .ort.api import OrtValue as OrtValue
    from .ort.api import RunOptions as RunOptions
    from .ort.api import SessionOptions as SessionOptions
    from .ort.api import get_all_providers as get_all_providers
    from .ort.api import get_available_providers as get_available_providers
    from .ort.api import get_device as get_device
    from .ort.api import get_version_string as get_version_string
    from .ort.install import install as install
    from .ort.install import uninstall as uninstall
    from .ort.session import InferenceSession


def __getattr__(name: str) -> Any:
    # InferenceSession and the onnxruntime names pull in onnxruntime and the translator; import them only
    # when used, so that the CLI and the translator start fast.
    if name == "InferenceSession":
        from .ort.session import InferenceSession

        return InferenceSession
    if name == "ort":  # dmlshim.ort.standin_module() after a plain `import dmlshim`, as docs/coming-from.md
        import importlib

        return importlib.import_module(".ort", __name__)
    if name in ("install", "uninstall"):
        from .ort import install as _install

        return getattr(_install, name)
    if name in _ORT_API:
        from .ort import api as ort_api

        return getattr(ort_api, name)
    if not name.startswith("_"):
        # Every other public name of onnxruntime's module (OrtArenaCfg, capi, set_default_logger_callback,
        # get_ep_devices, ...) is onnxruntime's own, as in the stand-in module install() binds, so a script
        # whose only change is ``import dmlshim as ort`` keeps running (issue 35, round 3).
        import onnxruntime as _onnxruntime

        if hasattr(_onnxruntime, name):
            return getattr(_onnxruntime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ORT_API) | {"InferenceSession", "install", "uninstall"})


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
    "NotSupportedError",
    "OperatorType",
    "TooLargeError",
    "UnsupportedNodeError",
    "ValidationMismatchError",
    "__version__",
    "install",
    "uninstall",
    *_ORT_API,
]
