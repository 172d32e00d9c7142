"""Which onnxruntime graph optimisation level validate runs at, and why.

Without ``--optimization-level`` validate runs at ``disabled`` (every fp32 op of the whole model then
computes what the partitions compute). Some exports run in onnxruntime only with its optimisations on:
a legacy TorchScript export whose If branches declare stale output shapes fails with optimisations
disabled (onnxruntime pre-allocates the If's output with the stale shape) and runs at onnxruntime's
default level, ``all``, whose optimisations drop or repair those shapes. When onnxruntime itself (the
whole model in one session, not a partition of dmlshim's) fails at ``disabled`` and runs the model on the
same feeds at ``all``, validate runs every side at ``all``, as onnxruntime would run the model, says so
in the report, and still compares bit for bit. A level the caller names is always kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import BadInputError, BadModelError, DmlShimError
from .references import DEFAULT_OPTIMIZATION_LEVEL, whole_model_run

logger = logging.getLogger(__name__)

ORT_DEFAULT_LEVEL = "all"
"""The level onnxruntime runs a model at when its caller sets none (``ORT_ENABLE_ALL``)."""


@dataclass(frozen=True)
class LevelChoice:
    """The optimisation level validate ran at.

    Attributes:
        level: the level every side ran at.
        requested: the level the caller named, or None (validate chose).
        reason: why the level differs from the one asked for (or from the default), else None.
    """

    level: str
    requested: str | None = None
    reason: str | None = None


def _onnxruntime_failure(exc: DmlShimError) -> bool:
    """The error is onnxruntime failing to load or run (a model, a partition, the lowered model), not a
    refusal of dmlshim's own (an index out of range in a kernel, a bad feed)."""
    if type(exc) is BadInputError:
        return "onnxruntime failed" in exc.message
    return type(exc) is BadModelError and "onnxruntime" in exc.message


def only_optimised_runs(
    exc: DmlShimError, proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], model_path: str | None
) -> str | None:
    """When a validation at ``disabled`` failed with ``exc`` because onnxruntime itself fails the whole
    model at ``disabled`` and runs it on the same feeds at its default level: why, in words; else None
    (the failure is dmlshim's, or onnxruntime fails at its default level too)."""
    if not _onnxruntime_failure(exc):
        return None
    try:
        outputs, disabled_error = whole_model_run(proto, feeds, DEFAULT_OPTIMIZATION_LEVEL, model_path)
    except DmlShimError as load_error:  # onnxruntime cannot even load the model at disabled
        outputs, disabled_error = None, load_error.message
    if outputs is not None:
        return None  # onnxruntime runs the whole model at disabled: the failure is a partition's
    try:
        optimised, _ = whole_model_run(proto, feeds, ORT_DEFAULT_LEVEL, model_path)
    except DmlShimError:
        return None
    if optimised is None:
        return None
    return (
        f"onnxruntime fails this model with graph optimizations disabled ({_short(disabled_error)}) and "
        f"runs it at its "
        f"default level, {ORT_DEFAULT_LEVEL}: every side ran at {ORT_DEFAULT_LEVEL} "
        "(--optimization-level sets another)"
    )


def _short(error: str | None) -> str:
    """onnxruntime's error in a line: the first node it names and its innermost message's first sentence."""
    if not error:
        return "it fails"
    node = re.search(r"running (\w+) node\. Name:'([^']*)'", error)
    innermost = re.split(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", error)[-1].strip()
    innermost = innermost.split(". ")[0].rstrip(".")
    text = f"{node.group(1)} node {node.group(2)!r}: {innermost}" if node else innermost
    return text if len(text) <= 300 else text[:297] + "..."


def note_default_level_runs(
    exc: DmlShimError,
    proto: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    opt_level: str,
    model_path: str | None,
) -> None:
    """When the caller asked for ``disabled`` and onnxruntime runs the model only optimised, say so in the
    error."""
    if opt_level != DEFAULT_OPTIMIZATION_LEVEL or not _onnxruntime_failure(exc):
        return
    try:
        outputs, _ = whole_model_run(proto, feeds, ORT_DEFAULT_LEVEL, model_path)
    except DmlShimError:
        return
    if outputs is not None:
        exc.message = exc.message.rstrip() + (
            f" (onnxruntime runs this model on these inputs at its default optimization level, "
            f"{ORT_DEFAULT_LEVEL}, but not with graph optimizations disabled, as asked: leave "
            "--optimization-level out, or pass --optimization-level all)"
        )
