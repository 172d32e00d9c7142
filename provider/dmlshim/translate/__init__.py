"""ONNX gather/scatter nodes to DirectML operator descriptors, at any feature level.

Public API::

    from dmlshim.translate import translate_node, translate_model, run_translation, SUPPORT_TABLE
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .plan import (
    CPU_PROVIDER,
    DML_PROVIDER,
    HostStep,
    HostStepKind,
    InputBinding,
    Layout,
    NodeTranslation,
    OutputBinding,
    Reason,
    Reinterpret,
    Status,
    TensorInfo,
)
from .shapes_info import infer_shapes, load_model
from .support_table import SUPPORT_TABLE, SupportRow, render_markdown
from .translator import translate_node

if TYPE_CHECKING:
    from .model_translation import ModelTranslation, translate_model
    from .runner import RunResult, run_translation

_LAZY = frozenset({"ModelTranslation", "translate_model"})
"""Names of :mod:`.model_translation` (``inspect``'s whole-model translation, with the session refusals and
run cases it imports): a session build does not use it, so it is imported when first asked for."""

_LAZY_RUNNER = frozenset({"RunResult", "run_translation"})
"""Names of :mod:`.runner` (which imports the kernels): ``inspect`` runs no kernel, so it is imported when
first asked for (a session's steps ask for it)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import model_translation

        return getattr(model_translation, name)
    if name in _LAZY_RUNNER:
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CPU_PROVIDER",
    "DML_PROVIDER",
    "SUPPORT_TABLE",
    "HostStep",
    "HostStepKind",
    "InputBinding",
    "Layout",
    "ModelTranslation",
    "NodeTranslation",
    "OutputBinding",
    "Reason",
    "Reinterpret",
    "RunResult",
    "Status",
    "SupportRow",
    "TensorInfo",
    "infer_shapes",
    "load_model",
    "render_markdown",
    "run_translation",
    "translate_model",
    "translate_node",
]
