"""The real onnxruntime, captured once, for every onnxruntime object dmlshim builds for itself.

A program binds dmlshim in place of onnxruntime in one of two ways: it patches
``onnxruntime.InferenceSession = dmlshim.InferenceSession``, or it replaces ``sys.modules["onnxruntime"]``
with dmlshim's stand-in (:mod:`dmlshim.ort.standin`). Either way the name ``onnxruntime.InferenceSession``
then means dmlshim, so dmlshim's own sessions (CPU segments, the whole-model check, references) must never
look it up at call time: they use :data:`OrtInferenceSession`, the class onnxruntime defines in
``onnxruntime.capi.onnxruntime_inference_collection`` (where no binding form patches it), and :data:`ort`,
the real package module even when the stand-in occupies ``sys.modules["onnxruntime"]``.
"""

from __future__ import annotations

import sys
from types import ModuleType

from onnxruntime.capi import _pybind_state as C
from onnxruntime.capi import onnxruntime_pybind11_state as pybind_state
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as OrtInferenceSession
from onnxruntime.capi.onnxruntime_inference_collection import IOBinding as OrtIOBinding

REAL_MODULE_ATTR = "__dmlshim_real_module__"
"""The attribute on dmlshim's stand-in module that holds the real onnxruntime package module."""


def _capture() -> ModuleType:
    found = sys.modules["onnxruntime"]  # imported by the lines above
    real = getattr(found, REAL_MODULE_ATTR, None)
    return real if isinstance(real, ModuleType) else found


ort: ModuleType = _capture()
"""The real onnxruntime package (never dmlshim's stand-in)."""

ORT_VERSION: str = str(ort.__version__)
"""The version of the onnxruntime that runs the non-emulated nodes."""


def ort_available_providers() -> list[str]:
    """What the real onnxruntime lists as available on this machine (never the emulated provider)."""
    return list(C.get_available_providers())


__all__ = [
    "ORT_VERSION",
    "REAL_MODULE_ATTR",
    "C",
    "OrtIOBinding",
    "OrtInferenceSession",
    "ort",
    "ort_available_providers",
    "pybind_state",
]
