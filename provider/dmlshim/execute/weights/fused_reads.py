"""Nodes whose ``SessionOptions.add_initializer`` inputs onnxruntime's optimizations consume at session
creation: they compute with the model's own value, not the added one.

onnxruntime applies ``add_initializer`` values after its graph optimizations ran (as
:mod:`.folded_reads` says of constant folding). Its fusions read the model's own values too: Conv followed
by BatchNormalization becomes one Conv whose weights are computed from the model's scale, bias, mean and
variance; ``Mul(MatMul(x, W), s)`` becomes one MatMul scaled by the model's ``s``. A node of the optimized
graph that still reads the initializer (a Gather of the same scale, say) reads the added value, on every
run; the fused one never does (measured on onnxruntime 1.24 and 1.32).

onnxruntime is asked: it optimizes the model (with its own values, at the caller's level) into a private
temporary folder. A top-level node reading an added initializer whose outputs no node of the optimized
graph produces while reading that initializer, when no new node of the optimized graph reads it, was
fused away: it is pointed at a copy of the model's own value. An initializer no optimized node reads at
all is not replaced (the added value is read by nothing).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import onnx

from ...graph import walk_nodes
from ...model.ort_errors import ORT_ERRORS
from ...model.weightless import graph_shell, model_shell
from .added_initializers import AddedInitializers
from .folded_reads import add_model_copies, copy_names

logger = logging.getLogger(__name__)


def optimized_graph(model: str | bytes, options: Any) -> onnx.GraphProto | None:
    """onnxruntime's optimized graph of ``model`` (a path or bytes, with its own values) at ``options``'
    level, constant sharing off as it is for added names; None at ``ORT_DISABLE_ALL`` or when onnxruntime
    cannot optimize the model (the run reports that)."""
    from ...runtime.options_copy import copy_options
    from ...runtime.real import DISABLED_OPTIMIZERS, OrtInferenceSession

    level = getattr(options, "graph_optimization_level", None) if options is not None else None
    if level is not None and int(level) == 0:
        return None
    copy = copy_options(options)  # without the added values: onnxruntime optimizes the model's own
    copy.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="dmlshim-fused-") as tmp:
        target = Path(tmp) / "optimized.onnx"
        copy.optimized_model_filepath = str(target)
        copy.add_session_config_entry("session.optimized_model_external_initializers_file_name", "w.bin")
        disabled = {*DISABLED_OPTIMIZERS.get(), "ConstantSharing"}
        try:
            OrtInferenceSession(model, copy, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
            return onnx.load(str(target), load_external_data=False).graph
        except (*ORT_ERRORS, OSError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
            logger.debug("onnxruntime's optimized graph not read (%s): every added value counts", exc)
            return None


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for _, node in walk_nodes(graph):
        names.update(node.input)
    return names


def fused_readers(
    graph: onnx.GraphProto, optimized: onnx.GraphProto, names: Collection[str]
) -> dict[int, set[str]]:
    """Positions of ``graph``'s top-level nodes reading one of ``names`` that ``optimized`` fused away, with
    the names each reads so. A reader is gone when no optimized node makes its outputs reading that name;
    it was fused with the model's value only when no new optimized node reads the name either (MatMul and
    Add become a Gemm that reads the MatMul's weight by name: the added value, as the MatMul would)."""
    found: dict[int, set[str]] = {}
    for name in set(names):
        original = {(k, tuple(n.output)) for k, n in enumerate(graph.node) if name in n.input}
        outputs = {o for _, o in original}
        readers = {tuple(n.output) for n in optimized.node if name in n.input}
        if readers - outputs:
            continue  # a new node reads it: which reader it stands for is not known
        for k, out in original:
            if out not in readers:
                found.setdefault(k, set()).add(name)
    return found


@dataclasses.dataclass(frozen=True)
class FusedReads:
    """What onnxruntime's optimizations do with the added values.

    Attributes:
        added: the added values, without those no optimized node reads.
        readers: top-level node positions that compute with the model's own value, with the names.
    """

    added: AddedInitializers
    readers: Mapping[int, frozenset[str]]


def fused_reads(added: AddedInitializers, loaded: Any, options: Any) -> FusedReads:
    """Ask onnxruntime which ``add_initializer`` values of ``added`` its optimizations consume
    (``add_external_initializers`` and supplied external data replace the tensors before optimizing)."""
    names = set(added.values) - set(added.external) - set(getattr(loaded, "supplied", ()))
    if not names:
        return FusedReads(added, {})
    try:  # the file as onnxruntime reads it, else the model with its weights (a model given as bytes)
        source = (
            loaded.path if loaded.path and not loaded.supplied else loaded.with_weights().SerializeToString()
        )
    except ValueError as exc:  # over protobuf's 2 GB
        logger.debug("model not optimized by onnxruntime to find fused initializers: %s", exc)
        return FusedReads(added, {})
    optimized = optimized_graph(source, options)
    if optimized is None:
        return FusedReads(added, {})
    unread = names - _read_names(optimized)
    if unread:
        logger.info("added initializers onnxruntime's optimizations consume at build: %s", sorted(unread))
        added = dataclasses.replace(added, values={n: v for n, v in added.values.items() if n not in unread})
    readers = fused_readers(loaded.proto.graph, optimized, names - unread)
    return FusedReads(added, {k: frozenset(v) for k, v in readers.items()})


def keep_model_values_where_fused(
    model: onnx.ModelProto, original: onnx.ModelProto, readers: Mapping[int, frozenset[str]]
) -> onnx.ModelProto:
    """``model`` (``original``'s nodes in their order, added values in it) with the fused ``readers``
    reading a copy of ``original``'s value; ``model`` itself when there is none."""
    if not readers:
        return model
    names = sorted(set().union(*readers.values()))
    copies = copy_names(model.graph, names)
    out = model_shell(model)
    graph_shell(model.graph, out.graph)
    for k, reads in readers.items():
        node = out.graph.node[k]
        node.input[:] = [copies[i] if i in reads else i for i in node.input]
    out.graph.initializer.extend(model.graph.initializer)
    add_model_copies(out.graph, original.graph, copies)
    logger.debug("nodes onnxruntime fuses read the model's own %s, not the added values", names)
    return out
