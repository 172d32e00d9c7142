"""Values added through ``SessionOptions.add_initializer`` read anew on every run, as onnxruntime reads them.

onnxruntime keeps the caller's ``OrtValue`` (which must outlive the session) and its kernels read that
buffer when they run: a caller who calls ``update_inplace`` on it between runs gets the new values from the
next run on. Two exceptions, measured on onnxruntime 1.24 and 1.32: a node onnxruntime's constant folding
computed at session creation read the model's own value (:mod:`.folded_reads`), and a kernel that packs a
weight when the session is built (MatMul's and Gemm's ``B``, LSTM's and GRU's ``W`` and ``R``,
MatMulInteger's ``B``, and Conv's ``W`` once the layout optimizations run) keeps the value the session
was built with.

dmlshim cannot hold the caller's ``OrtValue`` (``SessionOptions`` does not give it back), so it keeps a
probe session (:func:`.added_initializers.probe_model`) built with the caller's options and runs it before
every run: its outputs are the added values as they are now. In the model the engines run, every such
initializer is a graph input instead, and the values read are fed to it: no engine proves, folds or
caches anything from a value that can change, and every partition, emulated node and check reads the
value of this run. The packing kernels' inputs are
pointed at a copy of the value as it was when the session was built instead.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import helper

from ...graph import subgraphs
from ...model.weightless import graph_shell, model_shell
from .added_initializers import numpy_cannot_hold, probe_model, probe_session
from .folded_reads import copy_names

logger = logging.getLogger(__name__)

BUILT_VALUE_SUFFIX = "__dmlshim_built_value"
"""Appended to an initializer's name for the copy of its value at build that packing kernels read."""

PACKED_INPUTS: Mapping[str, tuple[int, ...]] = {
    "MatMul": (1,),
    "Gemm": (1,),
    "LSTM": (1, 2),
    "GRU": (1, 2),
    "MatMulInteger": (1,),
}
"""Inputs onnxruntime's CPU kernels pack when the session is built, at every optimization level."""

PACKED_WHEN_LAYOUT_OPTIMIZED: Mapping[str, tuple[int, ...]] = {"Conv": (1,)}
"""Inputs packed once the layout optimizations (level ``ORT_ENABLE_ALL``, the default) rewrite the node."""

_LAYOUT_LEVEL = 99
"""``onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL``."""


def packed_inputs(level: int | None) -> Mapping[str, tuple[int, ...]]:
    """The packed inputs at optimization ``level`` (None: onnxruntime's default, ``ORT_ENABLE_ALL``)."""
    if level is None or level >= _LAYOUT_LEVEL:
        return {**PACKED_INPUTS, **PACKED_WHEN_LAYOUT_OPTIMIZED}
    return PACKED_INPUTS


def _reads(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for _, sub in subgraphs(node):
            names |= _reads(sub)
    return names


@dataclass(frozen=True)
class LiveModel:
    """The model the engines run, with the live initializers declared graph inputs.

    Attributes:
        model: that model.
        live: the initializers fed on every run with their value of that run.
    """

    model: onnx.ModelProto
    live: frozenset[str]


def with_live_initializers(
    model: onnx.ModelProto, names: Collection[str], packed: Mapping[str, tuple[int, ...]]
) -> LiveModel:
    """``model`` with the initializers ``names`` (values ``add_initializer`` adds, already in ``model``)
    declared graph inputs, the ``packed`` inputs of top-level nodes pointed at a copy of their value;
    ``model`` itself when ``names`` is empty."""
    wanted = set(names)
    if not wanted:
        return LiveModel(model, frozenset())
    graph = model.graph
    tensors = {t.name: t for t in graph.initializer if t.name in wanted}
    frozen = {
        i
        for node in graph.node
        if node.domain in ("", "ai.onnx")
        for k, i in enumerate(node.input)
        if i in tensors and k in packed.get(node.op_type, ())
    }
    copies = copy_names(graph, sorted(frozen))
    out = model_shell(model)
    graph_shell(graph, out.graph)
    for node in out.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for k, name in enumerate(node.input):
            if name in frozen and k in packed.get(node.op_type, ()):
                node.input[k] = copies[name]
    live = frozenset(n for n in tensors if n in _reads(out.graph))
    # a graph input only (an initializer that is one too makes onnxruntime warn that it is no constant)
    out.graph.initializer.extend(t for t in graph.initializer if t.name not in live)
    for name in sorted(frozen):
        copy = out.graph.initializer.add()
        copy.CopyFrom(tensors[name])
        copy.name = copies[name]
    declared = {v.name for v in out.graph.input}
    out.graph.input.extend(
        helper.make_tensor_value_info(n, tensors[n].data_type, list(tensors[n].dims))
        for n in sorted(live - declared)
    )
    if frozen:
        logger.debug("kernels onnxruntime packs at build read the values added at build: %s", sorted(frozen))
    return LiveModel(out, live)


class LiveReader:
    """Reads the values the caller's options add for some initializers, as they are now."""

    def __init__(self, tensors: Mapping[str, onnx.TensorProto], so: Any) -> None:
        """Build the probe session for ``tensors`` (the model's initializers of those names) with ``so``
        (the caller's options, read now, as onnxruntime reads them when a session is built)."""
        self._names = list(tensors)
        self._narrow = frozenset(n for n, t in tensors.items() if numpy_cannot_hold(t))
        self._session = probe_session(probe_model(tensors, set()).SerializeToString(), so)

    def read(self) -> dict[str, Any]:
        """The added values by name, copied from the caller's buffers now (an OrtValue for a type numpy
        cannot hold: bfloat16, 4-bit)."""
        values = self._session.run_with_ort_values(self._names, {})
        return {n: v if n in self._narrow else v.numpy() for n, v in zip(self._names, values, strict=True)}


def live_engine_model(
    model: onnx.ModelProto, original: onnx.ModelProto, names: Collection[str], options: Any, so: Any
) -> tuple[onnx.ModelProto, LiveReader | None]:
    """The engines' model (``model``, the ``add_initializer`` values ``names`` in it) with those values read
    on every run, and the reader to feed them with (None when no node reads one).

    Args:
        model: the model the engines would run.
        original: the model as loaded (its initializers name the values' types and shapes).
        names: the initializers ``add_initializer`` replaces.
        options: the session's options as onnxruntime reads them (their optimization level).
        so: the caller's options, which hold the ``OrtValue``s.
    """
    level = getattr(options, "graph_optimization_level", None) if options is not None else None
    made = with_live_initializers(model, names, packed_inputs(None if level is None else int(level)))
    if not made.live:
        return made.model, None
    tensors = {t.name: t for t in original.graph.initializer if t.name in made.live}
    return made.model, LiveReader(tensors, so)
