"""The graph the HTML report draws: the model's nodes (subgraph bodies included) joined by the values they
pass, bounded for large models to the gather/scatter nodes, their neighbourhood, and one box per group of
the other nodes.

A body node (inside If/Loop/Scan) is joined to the values it reads from the enclosing graphs and, when
nothing in its own body feeds it, to the node that owns the body, so it is drawn below that node.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx

from ...graph import node_path, subgraph_prefix, subgraphs

__all__ = ["FULL_GRAPH_NODES", "GraphView", "ViewNode", "build_view"]

FULL_GRAPH_NODES = 600
"""Models with at most this many nodes are drawn whole; larger ones around their gather/scatter nodes."""

NEIGHBOURHOOD = 2
"""How many edges away from a gather/scatter node a node is still drawn in a large model."""

MAX_DRAWN = 1500
"""At most this many nodes are drawn (the layout's time grows faster than the node count); the
neighbourhood shrinks, then gather/scatter nodes past the bound join the groups (they stay listed)."""


@dataclass(frozen=True)
class ViewNode:
    """A box in the picture.

    Attributes:
        key: its id in the page (``n12``).
        name: the node's path name, or a group's description.
        op_type: the ONNX op, or ``""`` for a group.
        members: for a group, how many model nodes it stands for (0 for a node).
        member_ops: for a group, ``(op_type, count)`` of its nodes, most frequent first.
    """

    key: str
    name: str
    op_type: str
    members: int = 0
    member_ops: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GraphView:
    """The nodes and edges to lay out, and how the model was bounded.

    Attributes:
        nodes: the boxes.
        edges: ``(source index, target index)`` pairs into ``nodes``, without repeats or self-loops.
        total_nodes: the model's node count, bodies included.
        constants: the Constant nodes not drawn (their values are inputs of the nodes drawn).
        drawn_nodes: the model nodes drawn as their own box.
        bounded: whether the picture leaves nodes out (in groups).
        radius: the neighbourhood drawn around gather/scatter nodes when bounded.
        undrawn: gather/scatter nodes that are inside a group rather than drawn (past :data:`MAX_DRAWN`).
    """

    nodes: tuple[ViewNode, ...]
    edges: tuple[tuple[int, int], ...]
    total_nodes: int
    constants: int
    drawn_nodes: int
    bounded: bool
    radius: int
    undrawn: tuple[str, ...] = ()


FOLDED = frozenset({"Constant"})
"""Ops not drawn: a Constant is a value, like an initializer (half the nodes of a TorchScript export)."""


@dataclass
class _Flat:
    names: list[str]
    ops: list[str]
    edges: set[tuple[int, int]]
    folded: int = 0


def _flatten(model: onnx.ModelProto) -> _Flat:
    flat = _Flat([], [], set())

    def visit(graph: onnx.GraphProto, prefix: str, scope: dict[str, int], owner: int | None) -> None:
        local = dict(scope)
        if owner is not None:
            for value in graph.input:  # a body's formal inputs come from the node that runs it
                local[value.name] = owner
        for index, node in enumerate(graph.node):
            name = node_path(prefix, node, index)
            if node.op_type in FOLDED and node.domain in ("", "ai.onnx") and not node.input:
                flat.folded += 1  # its value is a constant of its consumer, as an initializer is
                continue
            me = len(flat.names)
            flat.names.append(name)
            flat.ops.append(node.op_type)
            fed = False
            for value in node.input:
                source = local.get(value) if value else None
                if source is not None and source != me:
                    flat.edges.add((source, me))
                    fed = fed or source != owner
            if owner is not None and not fed:
                flat.edges.add((owner, me))
            for value in node.output:
                if value:
                    local[value] = me
            for attr_name, sub in subgraphs(node):
                visit(sub, subgraph_prefix(name, attr_name), local, me)

    visit(model.graph, "", {}, None)
    return flat


def _neighbourhood(marked: Iterable[int], adjacency: list[list[int]], radius: int) -> set[int]:
    seen = set(marked)
    frontier = list(seen)
    for _ in range(radius):
        nxt = []
        for v in frontier:
            for w in adjacency[v]:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        frontier = nxt
    return seen


def _groups(left_out: set[int], adjacency: list[list[int]]) -> dict[int, int]:
    """Connected groups of the nodes left out: node -> group number."""
    group: dict[int, int] = {}
    count = 0
    for start in sorted(left_out):
        if start in group:
            continue
        group[start] = count
        stack = [start]
        while stack:
            v = stack.pop()
            for w in adjacency[v]:
                if w in left_out and w not in group:
                    group[w] = count
                    stack.append(w)
        count += 1
    return group


def build_view(model: onnx.ModelProto, marked_names: Mapping[str, object] | Iterable[str]) -> GraphView:
    """The graph to draw for ``model``; ``marked_names`` are the gather/scatter nodes' path names."""
    flat = _flatten(model)
    total = len(flat.names)
    everything = total + flat.folded
    wanted = set(marked_names)
    marked = [i for i, name in enumerate(flat.names) if name in wanted]
    if total <= FULL_GRAPH_NODES:
        whole = tuple(ViewNode(f"n{i}", flat.names[i], flat.ops[i]) for i in range(total))
        return GraphView(
            whole, tuple(sorted(flat.edges)), everything, flat.folded, total, bounded=False, radius=0
        )
    adjacency: list[list[int]] = [[] for _ in range(total)]
    for a, b in flat.edges:
        adjacency[a].append(b)
        adjacency[b].append(a)
    radius = NEIGHBOURHOOD
    kept = _neighbourhood(marked, adjacency, radius)
    while len(kept) > MAX_DRAWN and radius > 0:
        radius -= 1
        kept = _neighbourhood(marked, adjacency, radius)
    undrawn: tuple[str, ...] = ()
    if len(kept) > MAX_DRAWN:
        kept = set(marked[:MAX_DRAWN])
        undrawn = tuple(flat.names[i] for i in marked[MAX_DRAWN:])
    group = _groups(set(range(total)) - kept, adjacency)
    order = sorted(kept)
    index = {v: k for k, v in enumerate(order)}
    nodes = [ViewNode(f"n{v}", flat.names[v], flat.ops[v]) for v in order]
    members: dict[int, list[int]] = collections.defaultdict(list)
    for v, g in group.items():
        members[g].append(v)
    group_index: dict[int, int] = {}
    for g in sorted(members):
        vs = members[g]
        ops = collections.Counter(flat.ops[v] for v in vs).most_common()
        group_index[g] = len(nodes)
        label = f"{len(vs)} other node" + ("" if len(vs) == 1 else "s")
        nodes.append(ViewNode(f"g{g}", label, "", members=len(vs), member_ops=tuple(ops)))

    def at(v: int) -> int:
        return index[v] if v in index else group_index[group[v]]

    edges = {(at(a), at(b)) for a, b in flat.edges} - {(k, k) for k in range(len(nodes))}
    return GraphView(
        tuple(nodes),
        tuple(sorted(edges)),
        everything,
        flat.folded,
        len(order),
        bounded=True,
        radius=radius,
        undrawn=undrawn,
    )
