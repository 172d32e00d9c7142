"""The part of a model whose sizes a second inference can change, inferred alone.

The static size check infers a model again once small constant arithmetic is computed
(:mod:`.folded_sizes`) or outer-scope constants are copied into subgraphs
(:mod:`dmlshim.model.outer_constants`). Only the top-level nodes so changed (a folded node, or the node
holding it or the subgraph given constants) and the nodes that read their outputs, directly or not, can
be typed differently from the model's first inference; every other value keeps the type that inference
gave and the first check checked. :func:`changed_part` gives that part as a model of its own, for onnx's
inference with data propagation: Mask R-CNN's two folded values sit in its last ``Loop``, and inferring
the 2,364-node model again for them was a quarter of its build.

What the part reads from the rest of the model is given as the rest gave it: an initializer or graph
input as it is (a large initializer as a typed input, as in the weightless copy), a value computed by an
op through which onnx propagates data (``Shape``, ``Gather``, ``Concat``, ...) by that node itself, walked
back to values no propagation reaches, and any other value as a graph input typed by the first
inference. Those types hold what the second inference would find and sometimes more (the first inference
also read declared shapes and onnxruntime's types), so a refusal from the part is not taken as it is: the
caller infers the whole model then, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import onnx

from ...graph import subgraphs
from ...model.weightless import model_shell

__all__ = ["changed_part"]

logger = logging.getLogger(__name__)

_PROPAGATING = frozenset(
    {"Shape", "Size", "Cast", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Add", "Sub", "Mul"}
    | {"Div", "Identity", "Reshape", "Neg", "Abs", "Max", "Min", "ReduceProd", "ReduceSum", "Range"}
    | {"Expand", "ConstantOfShape", "Where", "Equal", "Floor", "Ceil", "Sqrt", "Mod", "Constant"}
)
"""Ops walked back through: every op through which onnx propagates data, and more (a node taken that
propagates nothing costs inference a node, no precision)."""

_TYPE_ONLY = frozenset({"Shape", "Size"})
"""Ops whose propagated value needs only their input's type, not its data."""


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` (a subgraph) and its own subgraphs read from enclosing graphs."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    read: set[str] = set()
    for node in graph.node:
        read.update(name for name in node.input if name and name not in defined)
        for _, sub in subgraphs(node):
            read.update(name for name in _outer_reads(sub) if name not in defined)
        defined.update(node.output)
    read.update(v.name for v in graph.output if v.name not in defined)
    return read


def _reads(node: onnx.NodeProto) -> set[str]:
    read = {name for name in node.input if name}
    if node.attribute:
        for _, sub in subgraphs(node):
            read |= _outer_reads(sub)
    return read


def changed_part(
    model: onnx.ModelProto, typed: onnx.GraphProto, roots: Collection[int]
) -> tuple[onnx.ModelProto, list[int]] | None:
    """``model`` (weightless) cut to its top-level nodes ``roots``, every node reading their outputs
    directly or not, and the propagating nodes they read (module docstring); what else they read is a
    graph input typed as in ``typed`` (the first inference's graph). None when a value read has no type
    there, or the part would be the whole model (the caller infers the whole model then). With the
    part, the indices of its nodes in ``model``'s graph, in their order."""
    graph = model.graph
    nodes = graph.node
    made: set[str] = set()
    part: set[int] = set()
    for i in range(min(roots), len(nodes)):
        node = nodes[i]
        if i in roots or not made.isdisjoint(_reads(node)):
            part.add(i)
            made.update(o for o in node.output if o)
    needed: set[str] = set()
    for i in part:
        needed |= _reads(nodes[i])
    needed -= made
    producer = {o: i for i, node in enumerate(nodes) for o in node.output if o}
    initializers = {t.name: t for t in graph.initializer}
    inputs = {v.name: v for v in graph.input}
    boundary: set[str] = set()
    stack = sorted(needed)
    seen = set(stack)
    while stack:
        name = stack.pop()
        index = producer.get(name)
        node = nodes[index] if index is not None else None
        if node is None or node.op_type not in _PROPAGATING or node.domain not in ("", "ai.onnx"):
            boundary.add(name)
            continue
        part.add(index)
        if node.op_type in _TYPE_ONLY:
            boundary.update(n for n in node.input if n)
            continue
        for each in node.input:
            if each and each not in seen:
                seen.add(each)
                stack.append(each)
    if len(part) == len(nodes):
        return None  # the whole model: inferred as it is
    boundary -= {o for i in part for o in nodes[i].output}
    types = {v.name: v for v in (*typed.input, *typed.value_info, *typed.output) if v.name in boundary}
    out = model_shell(model)
    sub = out.graph
    sub.name = graph.name
    for name in sorted(boundary):
        if name in inputs:
            sub.input.append(inputs[name])
        if name in initializers:
            sub.initializer.append(initializers[name])
        elif name not in inputs:
            found = types.get(name)
            if found is None or not found.type.HasField("tensor_type"):
                logger.debug(
                    "value %r read by the changed part has no type: the whole model is inferred", name
                )
                return None
            sub.input.append(found)
    kept = sorted(part)
    sub.node.extend(nodes[i] for i in kept)
    outputs = {v.name: v for v in graph.output}
    sub.output.extend(outputs[name] for name in sorted(made & outputs.keys()))
    if not len(sub.output):
        last = nodes[max(part)]
        sub.output.append(onnx.ValueInfoProto(name=next(o for o in last.output if o)))
    produced = {o for i in part for o in nodes[i].output}
    sub.value_info.extend(v for v in graph.value_info if v.name in produced)
    logger.debug(
        "%d of %d top-level nodes inferred again for the sizes they may change", len(part), len(nodes)
    )
    return out, kept
