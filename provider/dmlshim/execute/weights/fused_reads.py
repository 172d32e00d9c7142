"""Initializers replaced by ``SessionOptions.add_initializer`` that onnxruntime's optimizations consume
whole at session creation, so that no node reads the added value.

onnxruntime applies ``add_initializer`` values after its graph optimizations ran (as
:mod:`.folded_reads` says of constant folding). Its fusions read the model's own values too: Conv followed
by BatchNormalization becomes one Conv whose weights are computed from the model's scale, bias, mean and
variance; ``Mul(MatMul(x, W), s)`` becomes one MatMul scaled by the model's ``s``. When no node of the
optimized graph reads an initializer any more, the value added for it is read by nothing: every node
computes with the model's own value, at build and on every run (measured on onnxruntime 1.24 and 1.32).

onnxruntime is asked: it optimizes the model (with its own values, at the caller's level) into a private
temporary folder, and the names its optimized graph still reads are the ones the added values reach.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import onnx

from ...graph import walk_nodes
from ...model.ort_errors import ORT_ERRORS
from .added_initializers import AddedInitializers

logger = logging.getLogger(__name__)


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for _, node in walk_nodes(graph):
        names.update(node.input)
    return names


def unread_after_optimizing(model: str | bytes, names: Collection[str], options: Any) -> frozenset[str]:
    """Those of ``names`` (initializers of ``model``, a path or bytes, with its own values) that no node of
    onnxruntime's optimized graph reads at ``options``' optimization level (none at ``ORT_DISABLE_ALL``,
    or when onnxruntime cannot optimize the model: the run reports that)."""
    from ...runtime.options_copy import copy_options
    from ...runtime.real import DISABLED_OPTIMIZERS, OrtInferenceSession

    wanted = set(names)
    level = getattr(options, "graph_optimization_level", None) if options is not None else None
    if not wanted or (level is not None and int(level) == 0):
        return frozenset()
    copy = copy_options(options)  # without the added values: onnxruntime optimizes the model's own
    copy.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="dmlshim-fused-") as tmp:
        target = Path(tmp) / "optimized.onnx"
        copy.optimized_model_filepath = str(target)
        copy.add_session_config_entry("session.optimized_model_external_initializers_file_name", "w.bin")
        try:
            # onnxruntime's constant sharing leaves the names values are added for alone: so must the probe
            disabled = {*DISABLED_OPTIMIZERS.get(), "ConstantSharing"}
            OrtInferenceSession(
                model,
                copy,
                providers=["CPUExecutionProvider"],
                disabled_optimizers=disabled,
            )
            optimized = onnx.load(str(target), load_external_data=False)
        except (*ORT_ERRORS, OSError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
            logger.debug("onnxruntime's optimized graph not read (%s): every added value counts", exc)
            return frozenset()
    unread = frozenset(wanted - _read_names(optimized.graph))
    if unread:
        logger.info("added initializers onnxruntime's optimizations consume at build: %s", sorted(unread))
    return unread


def without_fused(added: AddedInitializers, loaded: Any, options: Any) -> AddedInitializers:
    """``added`` without the ``add_initializer`` values onnxruntime's optimizations leave unread (those of
    ``add_external_initializers`` and supplied external data replace the tensors before optimizing, and
    stay)."""
    names = set(added.values) - set(added.external) - set(getattr(loaded, "supplied", ()))
    if not names:
        return added
    try:  # the file as onnxruntime reads it, else the model with its weights (a model given as bytes)
        source = (
            loaded.path if loaded.path and not loaded.supplied else loaded.with_weights().SerializeToString()
        )
    except ValueError as exc:  # over protobuf's 2 GB
        logger.debug("model not optimized by onnxruntime to find fused initializers: %s", exc)
        return added
    unread = unread_after_optimizing(source, names, options)
    if not unread:
        return added
    values = {n: v for n, v in added.values.items() if n not in unread}
    return dataclasses.replace(added, values=values)
