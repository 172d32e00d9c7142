"""Shapes onnxruntime learns from the values its constant folding computes.

onnxruntime runs its shape inference again on the nodes after one it folds, with the folded outputs as
initializers, so a ``Resize`` whose sizes are computed from a static image size gets a static output
shape there, and the ``Shape`` nodes of everything after it fold in turn (Faster/Mask R-CNN exports). onnx's
inference, which dmlshim reads, does not compute those values. :func:`folded_value_model` computes them
with onnx's reference evaluator and gives a copy of the model where they are initializers, for a second
inference; :func:`worth_values` says when that can change anything: every graph input has a static shape
(otherwise the shapes stay symbolic) and some ``Shape`` node is still not folded.
:func:`apply_optimized_away` marks inspect's translations of the nodes removed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..model.weightless import without_weights
from .ort_folding import _MAX_PASSES, _ONNX, _RUN_WARNINGS, FoldCause, _Graph, _run, optimized_away_reason
from .plan import CPU_PROVIDER, NodeTranslation, TensorInfo, replace_translation
from .translator import is_ep_reason

__all__ = ["apply_optimized_away", "folded_value_model", "worth_values"]

logger = logging.getLogger(__name__)

MAX_FOLDED_ELEMENTS = 1 << 20
"""The most elements the folded values may hold in all (beyond, no second inference)."""


def worth_values(
    graph: onnx.GraphProto, removed: Mapping[int, object], info: Callable[[str], TensorInfo | None]
) -> bool:
    """Whether folded values may give shapes onnx's inference left symbolic (see the module)."""
    inits = {t.name for t in graph.initializer}
    for v in graph.input:
        if v.name in inits:
            continue
        found = info(v.name)
        if found is None or found.static_dims is None:
            return False
    return any(
        n.op_type == "Shape" and n.domain in ("", "ai.onnx") and i not in removed
        for i, n in enumerate(graph.node)
    )


def _shape_constant(node: onnx.NodeProto, dims: tuple[int, ...]) -> onnx.NodeProto:
    """A Constant giving what ``Shape`` (with its start/end) gives for ``dims``."""
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    value = np.array(dims[start:end] if end > start else [], dtype=np.int64)
    return helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value))


def folded_value_model(
    model: onnx.ModelProto,
    folded: Collection[int],
    removed: Collection[int],
    info: Callable[[str], TensorInfo | None],
    fused: Mapping[str, list[int]],
) -> onnx.ModelProto | None:
    """A copy of ``model`` whose ``folded`` nodes are replaced by initializers of the values they compute
    (from the other ``removed`` nodes they read, a static ``Shape`` giving its dimensions, a ``Concat`` the
    reshape fusion replaced the shape it gives, in ``fused``); None when the
    values cannot be computed here (an op onnx's reference evaluator lacks, external weights, too large)."""
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    needed = set(folded)
    stack = list(folded)
    while stack:  # the removed nodes the folded ones read, computed along (a fused Concat's real value)
        node = graph.node[stack.pop()]
        if node.op_type == "Shape" or node.output[0] in fused:
            continue  # a static Shape is its dimensions, a fused Concat its shape (below)
        for name in node.input:
            p = producer.get(name) if name else None
            if p is not None and p not in needed and graph.node[p].op_type != "Constant":
                if p not in removed:
                    logger.debug("folded values not computed: %r reads %r, which stays", node.name, name)
                    return None
                needed.add(p)
                stack.append(p)
    nodes = []
    outputs: list[str] = []
    for i, node in enumerate(graph.node):
        if i not in needed:
            continue
        if node.output and node.output[0] in fused:
            value = np.array(fused[node.output[0]], dtype=np.int64)
            nodes.append(
                helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value))
            )
        elif node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            found = info(node.input[0])
            if found is None or found.static_dims is None:
                logger.debug("folded values not computed: %r of a shape not static", node.name)
                return None
            nodes.append(_shape_constant(node, found.static_dims))
        else:
            nodes.append(node)
        if i in folded:
            outputs += [o for o in node.output if o]
    if not nodes:
        return None
    read = {n for node in nodes for n in node.input if n}
    inits = [t for t in graph.initializer if t.name in read]
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in inits):
        return None
    consts = [n for n in graph.node if n.op_type == "Constant" and any(o in read for o in n.output)]
    sub = helper.make_graph(
        [*consts, *nodes],
        "folded",
        [],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs],
        inits,
    )
    try:
        evaluator = ReferenceEvaluator(
            helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        )
        values = evaluator.run(None, {})
    except Exception as exc:
        logger.debug("folded values not computed: %s", exc)
        return None
    if sum(math.prod(np.shape(v)) for v in values) > MAX_FOLDED_ELEMENTS:
        logger.debug("folded values not used: more than %d elements", MAX_FOLDED_ELEMENTS)
        return None
    out = onnx.ModelProto()
    out.CopyFrom(without_weights(model))  # shapes are what is inferred: no weight byte copied
    folded = set(folded)
    keep = [n for i, n in enumerate(graph.node) if i not in folded]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    out.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v), name) for name, v in zip(outputs, values, strict=True)
    )
    return out


def apply_optimized_away(
    model: onnx.ModelProto,
    info: Callable[[str], TensorInfo | None],
    top_level: Mapping[int, int],
    translations: list[NodeTranslation],
    reinfer: Callable[[onnx.ModelProto], Callable[[str], TensorInfo | None]] | None = None,
) -> None:
    """Mark the top-level gather/scatter nodes onnxruntime's level-1 optimizations remove (constant folding
    computes them with its CPU kernels at session creation, or they are left unread): placed on the CPU
    with reason ``EP_OPTIMIZED_AWAY``, after the reasons of where they would run without the
    optimizations (a node with no other placement reason would run on DmlExecutionProvider then).

    Args:
        model: the prepared model (its own initializers).
        info: the inferred type and shape of a top-level value.
        top_level: node index in the top-level graph -> position in ``translations``.
        translations: the translations, changed in place.
        reinfer: shape inference of a model (:mod:`.ort_folded_shapes`: the shapes onnxruntime learns
            from the values it folds); without it, the shapes of ``info`` alone.
    """
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 0)
    fused: dict[str, list[int]] = {}
    g = _Graph(model.graph, model.ir_version, opset, info)
    removed = _run(g.fresh(info), fused)
    if reinfer is not None:
        removed = _with_folded_values(model, g, info, removed, fused, reinfer)
    for i, cause in removed.items():
        position = top_level.get(i)
        if position is None:
            continue
        t = translations[position]
        # the reasons of the placement it would have without the optimizations stay (EP_CPU_PREFERRED, a
        # provider without the kernel); the provider's warnings about running it do not (it never does)
        reasons = tuple(r for r in t.reasons if not (is_ep_reason(r) and r.code in _RUN_WARNINGS))
        translations[position] = replace_translation(
            t, ort_placement=CPU_PROVIDER, reasons=(*reasons, optimized_away_reason(cause))
        )


def _with_folded_values(
    model: onnx.ModelProto,
    g: _Graph,
    info: Callable[[str], TensorInfo | None],
    removed: dict[int, FoldCause],
    fused: dict[str, list[int]],
    reinfer: Callable[[onnx.ModelProto], Callable[[str], TensorInfo | None]],
) -> dict[int, FoldCause]:
    """``removed`` again with the shapes onnx's inference gives once the folded values are initializers,
    as onnxruntime's inference does after each fold (a few rounds, while more folds)."""
    from ..errors import DmlShimError

    for _ in range(_MAX_PASSES):
        if not worth_values(model.graph, removed, info):
            break
        computed = [i for i, c in removed.items() if c in (FoldCause.STATIC_SHAPE, FoldCause.CONSTANT_INPUTS)]
        valued = folded_value_model(model, computed, removed, info, fused)
        if valued is None:
            break
        try:
            learned = reinfer(valued)
        except DmlShimError:
            break
        first = info

        def info(name: str, learned=learned, first=first) -> TensorInfo | None:
            found = learned(name)
            if found is not None and found.static_dims is not None:
                return found
            return first(name)

        fused = {}
        again = _run(g.fresh(info), fused)
        if len(again) <= len(removed):
            break
        removed = again
    return removed
