"""ONNX gather/scatter nodes to DirectML operator descriptors, at any feature level.

Public API::

    from dmlshim.translate import translate_node, translate_model, run_translation, SUPPORT_TABLE
"""

from __future__ import annotations

from .model_translation import ModelTranslation, translate_model
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
from .runner import RunResult, run_translation
from .shapes_info import infer_shapes, load_model
from .support_table import SUPPORT_TABLE, SupportRow, render_markdown
from .translator import translate_node

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
