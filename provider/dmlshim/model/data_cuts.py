"""The cuts of :mod:`dmlshim.model.data_prop`, made and undone: where a read is (a site), a copy of the
model whose cut sites read fresh graph inputs with their consumers' outputs pinned, and the inferred copy
put back under the original names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import onnx

from .node_types import pin_outputs

__all__ = [
    "BIG",
    "CUT_DIM",
    "UNKNOWN",
    "GraphPath",
    "Site",
    "cut_copy",
    "graph_paths",
    "restore",
    "value_names",
]

BIG, UNKNOWN = "big", "unknown"

MAX_RANK = 1024
"""Longest shape tensor whose length is taken as a rank (onnx 1.23's own bound on rank-only inference)."""

CUT_DIM = "__dmlshim_cut__"
"""The dimension name a big cut declares (rank kept, length unknown, and no symbol generated)."""
_CUT_DIM_BYTES = CUT_DIM.encode()

GraphPath = tuple[tuple[int, str, int], ...]
"""Where a subgraph is: (node index, attribute name, graph index) from the top-level graph down."""


class Site(NamedTuple):
    """One input of one node whose data inference may read (a tuple: one per read input of every
    data-propagating node, so they are built and hashed by the thousand)."""

    path: GraphPath
    node: int
    input: int
    value: str
    by_value: bool  # the node's type inference reads this input's values
    shape_input: bool  # a shape input of Reshape/Expand/ConstantOfShape (rank from its length)


def graph_at(model: onnx.ModelProto, path: GraphPath) -> onnx.GraphProto:
    graph = model.graph
    for index, attr_name, which in path:
        attr = next(a for a in graph.node[index].attribute if a.name == attr_name)
        graph = attr.g if attr.HasField("g") else attr.graphs[which]
    return graph


def graph_paths(graph: onnx.GraphProto, path: GraphPath = ()) -> Iterator[tuple[GraphPath, onnx.GraphProto]]:
    """Every graph under ``graph`` (itself first) with its path."""
    yield path, graph
    for i, node in enumerate(graph.node):
        if not node.attribute:
            continue
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graph_paths(attr.g, (*path, (i, attr.name, 0)))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    yield from graph_paths(sub, (*path, (i, attr.name, k)))


def each(model: onnx.ModelProto, paths: list[GraphPath]) -> Iterator[tuple[GraphPath, onnx.GraphProto]]:
    """The graphs of ``model`` (a copy of the model ``paths`` was taken from)."""
    for path in paths:
        yield path, graph_at(model, path)


def versions(model: onnx.ModelProto) -> dict[str, int]:
    found = {op.domain or "": int(op.version) for op in model.opset_import}
    found.setdefault("", found.get("ai.onnx", 0))
    return found


def _fresh(base: str, taken: set[str]) -> str:
    name = f"{base}__dmlshim_cut"
    k = 0
    while name in taken:
        k += 1
        name = f"{base}__dmlshim_cut{k}"
    taken.add(name)
    return name


def value_names(model: onnx.ModelProto, paths: list[GraphPath]) -> set[str]:
    """The names ``model``'s graphs (by ``paths``) give values: those a fresh input must not take."""
    taken: set[str] = set()
    for _, g in each(model, paths):
        taken.update([v.name for v in g.input])
        taken.update([v.name for v in g.value_info])
        taken.update([v.name for v in g.output])
        taken.update([t.name for t in g.initializer])
        for n in g.node:
            taken.update(n.output)
    return taken


def cut_copy(
    model: onnx.ModelProto,
    paths: list[GraphPath],
    plan: dict[Site, tuple[str, bytes]],
    types: Mapping[GraphPath, Mapping[str, onnx.TypeProto]],
    inits: Mapping[GraphPath, Mapping[str, onnx.TensorProto]],
    type_bytes: dict[GraphPath, dict[str, bytes]] | None = None,
    pinned: set[tuple[GraphPath, str]] | None = None,
    names: set[str] | None = None,
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy whose cut sites read fresh graph inputs; the consumers of big inputs pinned to ``types``.
    ``types`` and ``inits``: what each graph (by path) sees by name; ``type_bytes``: the serialized
    ``types`` already known (by path, then name), filled in as more are serialized; ``pinned`` gains the
    pinned outputs (the outputs of the nodes whose big inputs are cut) with their graph's path. Returns
    the copy and fresh name -> an original name it stands for.

    A big cut's type names every dimension (:data:`CUT_DIM`), so the big cuts of one type share fresh
    inputs: within a node the k-th distinct value cut to a type reads that type's k-th shared input
    (which inputs of a node read one name is as with one input per value, and that is all a node's
    inference and its per-structure key see of names). The Cast chain's 18,978 cuts read one input.
    An "unknown" cut keeps an input of its own (its type may hold unnamed dimensions).
    ``names``: :func:`value_names` of ``model`` when the caller has it (one set for all its passes over
    one model; not changed here)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graphs = dict(each(copy, paths))
    taken = set(names if names is not None else value_names(copy, paths))
    fresh: dict[tuple[str, bytes], str] = {}
    shared: dict[tuple[bytes, int], str] = {}
    renamed: dict[str, str] = {}
    done: set[tuple[GraphPath, int]] = set()
    # per node: its cut inputs' fresh name -> original, and per big cut type the values given a slot
    local: dict[tuple[GraphPath, int], tuple[dict[str, str], dict[bytes, dict[str, int]]]] = {}
    declared_in: dict[GraphPath, dict[str, onnx.ValueInfoProto]] = {}
    opsets = versions(model)
    typed_nodes: dict[tuple[object, ...], list[bytes | None]] = {}
    if type_bytes is None:
        type_bytes = {}
    top_inputs = copy.graph.input
    for site, (kind, declared) in plan.items():
        path = site.path
        where = (path, site.node)
        mine = local.get(where)
        if mine is None:
            mine = local[where] = ({}, {})
        if kind == BIG:
            slots = mine[1].setdefault(declared, {})
            slot = (declared, slots.setdefault(site.value, len(slots)))
            name = shared.get(slot)
            if name is None:
                name = shared[slot] = _fresh(site.value, taken)
        else:
            own = (site.value, declared)
            name = fresh.get(own)
            if name is None:
                name = fresh[own] = _fresh(site.value, taken)
        if name not in renamed:
            renamed[name] = site.value
            value = top_inputs.add()
            value.name = name
            value.type.ParseFromString(declared)
        mine[0][name] = site.value
        graph = graphs[path]
        node = graph.node[site.node]
        node.input[site.input] = name
        if kind == BIG and where not in done:
            done.add(where)
            known = declared_in.get(path)
            if known is None:
                known = declared_in[path] = {v.name: v for v in (*graph.value_info, *graph.output)}
            serialized = type_bytes.get(path)
            if serialized is None:
                serialized = type_bytes[path] = {}
            pin_outputs(
                graph, node, types[path], known, opsets, mine[0], inits[path], typed_nodes, serialized
            )
            if pinned is not None:
                pinned.update([(path, name) for name in node.output if name])
    return copy, renamed


def restore(
    inferred: onnx.ModelProto,
    paths: list[GraphPath],
    plan: dict[Site, tuple[str, bytes]],
    renamed: dict[str, str],
) -> None:
    """Undo the cuts in ``inferred``: original input names, no fresh inputs, no cut dimension names."""
    graphs = dict(each(inferred, paths))
    for site in plan:  # a shared fresh input stands for several values: each site names its own
        graphs[site.path].node[site.node].input[site.input] = site.value
    kept = [v for v in inferred.graph.input if v.name not in renamed]
    del inferred.graph.input[:]
    inferred.graph.input.extend(kept)
    # Only a big cut declares the cut dimension name: without one there is none to clear; and none is
    # left where no graph's bytes spell it (a string field is serialized as it is).
    scrub = any(kind == BIG for kind, _ in plan.values())
    if scrub and _CUT_DIM_BYTES not in inferred.graph.SerializeToString():
        scrub = False
    for graph in graphs.values():
        if any(v.name in renamed for v in graph.value_info):
            infos = [v for v in graph.value_info if v.name not in renamed]
            del graph.value_info[:]
            graph.value_info.extend(infos)
        if scrub:
            for value in (*graph.value_info, *graph.output):
                _scrub(value.type)


def _scrub(tp: onnx.TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        for d in tp.tensor_type.shape.dim:
            if d.dim_param == CUT_DIM:
                d.Clear()
    elif kind in ("sequence_type", "optional_type"):
        _scrub(getattr(tp, kind).elem_type)
