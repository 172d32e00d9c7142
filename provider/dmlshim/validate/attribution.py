"""Where a difference starts: which gather/scatter nodes each value depends on, and every node's inputs
and output compared between dmlshim's run and the like-for-like reference.

A node is blamed (``diverges_here``) only when every input agreed and its output did not; a node whose
input already differed is reported as such (``inputs_differed``), whatever it did with that input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs, walk_nodes
from .results import ATTR_DIVERGES, NodeValidation
from .value_kinds import as_compared


@dataclass(frozen=True)
class Dependencies:
    """Dependencies between top-level nodes and the gather/scatter nodes each value depends on.

    Attributes:
        upstream: value -> the gather/scatter nodes it depends on (itself included for their outputs).
        node_io: top-level gather/scatter node -> (its non-empty inputs, its first output).
    """

    upstream: Mapping[str, frozenset[str]]
    node_io: Mapping[str, tuple[tuple[str, ...], str | None]]


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value a node reads, including what its subgraphs read from the enclosing scope."""
    found = {n for n in node.input if n}
    for _, sub in subgraphs(node):
        produced = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        produced |= {t.name for t in sub.initializer}
        for inner in sub.node:
            found |= _reads(inner) - produced
    return found


def _walk_subgraphs(node: onnx.NodeProto, name: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    for attr_name, sub in subgraphs(node):
        yield from walk_nodes(sub, subgraph_prefix(name, attr_name))


def dependencies(graph: onnx.GraphProto) -> Dependencies:
    """Trace the gather/scatter nodes upstream of every value of the top-level graph."""
    upstream: dict[str, frozenset[str]] = {}
    node_io: dict[str, tuple[tuple[str, ...], str | None]] = {}
    for i, node in enumerate(graph.node):
        name = node_path("", node, i)
        before: frozenset[str] = frozenset().union(*(upstream.get(v, frozenset()) for v in _reads(node)))
        mine = set(before)
        if is_gather_scatter(node):
            mine.add(name)
            node_io[name] = (tuple(n for n in node.input if n), node.output[0] if node.output else None)
        for sub_name, sub_node in _walk_subgraphs(node, name):
            if is_gather_scatter(sub_node):
                mine.add(sub_name)
        for out in node.output:
            if out:
                upstream[out] = frozenset(mine)
    return Dependencies(upstream, node_io)


Compare = Callable[[np.ndarray, np.ndarray], bool]


def _same(
    name: str | None, ours: Mapping[str, Any], theirs: Mapping[str, Any], compare: Compare
) -> bool | None:
    if not name or name not in ours or name not in theirs:
        return None
    # bfloat16 and float8 values (OrtValues) compare by their values, as the outputs do
    return compare(np.asarray(as_compared(ours[name])), np.asarray(as_compared(theirs[name])))


def compare_nodes(
    deps: Dependencies, ours: Mapping[str, Any], theirs: Mapping[str, Any], compare: Compare
) -> dict[str, tuple[tuple[tuple[str, bool | None], ...], bool | None]]:
    """For every top-level gather/scatter node: ``(input name, agreed)`` pairs and whether its output
    agreed, from the two runs' value tables (None where a value was not observed on both sides)."""
    found: dict[str, tuple[tuple[tuple[str, bool | None], ...], bool | None]] = {}
    cache: dict[str, bool | None] = {}

    def same(name: str | None) -> bool | None:
        if not name:
            return None
        if name not in cache:
            cache[name] = _same(name, ours, theirs, compare)
        return cache[name]

    for node, (inputs, output) in deps.node_io.items():
        found[node] = (tuple((n, same(n)) for n in inputs), same(output))
    return found


def suspects(output: str, deps: Dependencies, nodes: tuple[NodeValidation, ...]) -> tuple[str, ...]:
    """The gather/scatter nodes upstream of a graph output that are to blame for its difference."""
    upstream = deps.upstream.get(output, frozenset())
    return tuple(n.name for n in nodes if n.name in upstream and n.attribution == ATTR_DIVERGES)


def upstream_order(output: str, deps: Dependencies, nodes: tuple[NodeValidation, ...]) -> tuple[str, ...]:
    """The gather/scatter nodes a graph output depends on, in graph order."""
    upstream = deps.upstream.get(output, frozenset())
    return tuple(n.name for n in nodes if n.name in upstream)
