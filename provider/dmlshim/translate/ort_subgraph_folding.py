"""onnxruntime's level-1 optimizations inside If, Loop and Scan bodies.

onnxruntime's graph transformers recurse into subgraphs (``GraphTransformer::Recurse``): the Identity
elimination, common-subexpression elimination, constant folding and the reshape fusion apply in each body
as in the main graph (:mod:`.ort_folding`), a body's own initializers and Constant nodes being constants,
and so the constant initializers of the enclosing graphs, folded values included (a body reads outer
values only through its node's implicit inputs, computed before it). A body node is never folded into a
node of the enclosing graph nor removes one.

An ``If`` whose condition is a constant initializer (not one computed by folding, whose value inspect does
not know) is replaced by the branch it takes (``ConstantFolding``, onnxruntime 1.15 and later): the other
branch is dropped, its nodes run nowhere, and the branch taken is folded as a body of the graph it joins.
An ``If`` whose condition constant folding computes is inlined too, but inspect does not know which branch
onnxruntime keeps: its branches' gather/scatter nodes are reported as not modelled (:data:`UNMODELLED`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np
import onnx

from ..graph import node_path, subgraph_prefix, subgraphs
from .ort_folding import FoldCause, _Graph, _run
from .plan import Reason, TensorInfo

__all__ = ["BodyCause", "body_removals", "not_modelled_reason"]


class BodyCause(enum.Enum):
    """Why a body node is not where its subgraph puts it, beyond :class:`.ort_folding.FoldCause`."""

    BRANCH_NOT_TAKEN = "constant folding: the branch of an If with a constant condition not taken"
    UNKNOWN_BRANCH = "an If whose condition constant folding computes: onnxruntime keeps one branch"


NOT_MODELLED_CODE = "ORT_OPTIMIZATION_NOT_MODELLED"  # a note: not a placement reason (no EP_)


def not_modelled_reason() -> Reason:
    """The reason of a body node onnxruntime may remove in a way inspect does not follow."""
    return Reason(
        NOT_MODELLED_CODE,
        f"{BodyCause.UNKNOWN_BRANCH.value}, which inspect does not compute: whether onnxruntime's graph "
        "optimizations remove this node is not modelled",
        BodyCause.UNKNOWN_BRANCH.name,
    )


def _bool(value: np.ndarray | None) -> bool | None:
    if value is None or value.size != 1 or value.dtype == object:
        return None
    return bool(value.reshape(-1)[0])


def body_removals(
    graph: onnx.GraphProto,
    parent: _Graph,
    ir_version: int,
    opset: int,
    scopes: Mapping[str, Callable[[str], TensorInfo | None]],
    prefix: str = "",
    overridden: bool = False,
) -> dict[tuple[str, int], FoldCause | BodyCause]:
    """The nodes inside the bodies of ``graph`` (whose optimizations ``parent`` has run) that onnxruntime's
    level-1 optimizations remove, as ``(body path prefix, index in the body)`` -> why. ``scopes``: each
    body's inferred types and shapes, by its path prefix (as inspect names its nodes); ``overridden``:
    sizes are fixed by free-dimension overrides (``inspect --input-shape``), not declared."""
    out: dict[tuple[str, int], FoldCause | BodyCause] = {}
    inlined: list[tuple[int, _Graph]] = []  # the Ifs inlined, with the graph of their branch taken
    for index in [i for i, sub in enumerate(parent.subgraph) if sub]:
        node = graph.node[index]
        name = node_path(prefix, node, index)
        branch: str | None = None
        unknown = False
        if node.op_type == "If" and parent.onnx[index] and node.input and node.input[0] in parent.constant:
            taken = _bool(parent.value(parent.canon.get(node.input[0], node.input[0]), limit=1))
            if taken is None:
                unknown = parent.is_folded(parent.canon.get(node.input[0], node.input[0]))
            else:
                branch = "then_branch" if taken else "else_branch"
        for attr_name, sub in subgraphs(node):
            body = subgraph_prefix(name, attr_name)
            if unknown or (branch is not None and attr_name != branch):
                cause = BodyCause.UNKNOWN_BRANCH if unknown else BodyCause.BRANCH_NOT_TAKEN
                out.update(_every_node(sub, body, cause))
                continue
            info = scopes.get(body)
            if info is None:
                continue
            g = _Graph(sub, ir_version, opset, info, outer=parent, top_level=False)
            out.update({(body, i): cause for i, cause in _run(g).items()})
            if branch is not None:
                inlined.append((index, g))
            out.update(body_removals(sub, g, ir_version, opset, scopes, body, overridden))
    if inlined:  # a Shape an inlined branch folds may leave a node of ``graph`` unread
        before = set(parent.removed)
        _unread_after_inlining(parent, inlined, overridden)
        out.update({(prefix, i): parent.removed[i] for i in set(parent.removed) - before})
    return out


def _every_node(graph: onnx.GraphProto, prefix: str, cause: BodyCause) -> dict[tuple[str, int], BodyCause]:
    out: dict[tuple[str, int], BodyCause] = {}
    for index, node in enumerate(graph.node):
        out[(prefix, index)] = cause
        for attr_name, sub in subgraphs(node):
            out.update(_every_node(sub, subgraph_prefix(node_path(prefix, node, index), attr_name), cause))
    return out


def _unread_after_inlining(parent: _Graph, inlined: list[tuple[int, _Graph]], overridden: bool) -> None:
    """The Ifs of ``inlined`` replaced by their branch taken: each outer value they read loses the If's
    edge. A node of ``parent`` left so with no reader goes, with the chain feeding only it
    (``RemoveNodesWithOneOutputBottomUp``), when the pass removes one of its readers after the If, or,
    with free-dimension overrides (``overridden``), when a ``Shape`` of the branch taken read it: the
    branch's view of outer shapes is the one before the overrides until the graph is resolved again, so
    that Shape is folded after the inlining, when it reads the node through an edge; a Shape of a shape
    static as declared is folded inside the branch first, and the node it read stays."""
    first: dict[int, int] = {}  # a producer -> the first inlined If reading it
    shape_read: set[int] = set()  # read by a Shape the branch folded
    for index, g in inlined:
        left: Counter[str] = Counter()
        for j, names in enumerate(g.inputs):
            if j not in g.removed and g.rep[j] == j and not g.eliminated[j]:
                left.update(n for n in (*names, *g.bodies.get(j, ())) if n)
            elif overridden and g.removed.get(j) is FoldCause.STATIC_SHAPE and names and names[0]:
                p = parent.producer.get(names[0])
                if p is not None:
                    shape_read.add(p)
        for name in {parent.canon.get(n, n) for n in parent.bodies[index]}:  # one edge per value
            p = parent.producer.get(name)
            if p is not None and p not in parent.removed:
                parent.edges[p] = parent.edges.get(p, 0) - 1 + (left[name] if overridden else 0)
                first[p] = min(first.get(p, index), index)
    left_unread = {p for p in first if parent.edges.get(p, 0) == 0 and not parent.produces_output(p)}
    if not left_unread:
        return
    outputs = {o: p for p in left_unread for o in parent.outs[p] if o}
    later = shape_read & left_unread
    for j in parent.removed:
        for name in parent.inputs[j]:
            p = outputs.get(name)
            if p is not None and j > first[p]:
                later.add(p)
    for p in sorted(later):
        parent.remove_chain(p, FoldCause.ONLY_READ_BY_FOLDED)
