"""Subgraph value names made unique for onnx's data propagation, and given back afterwards.

onnx's shape inference with data propagation (``data_prop=True``) keeps the propagated data of a value by
its name across the graphs it walks: where two subgraphs hold values of one name (the two branches of
optimum-onnx's merged decoder are two exports of the same network: 976 shared names in MarianMT's), a
branch reads the other branch's data. In the merged decoder's no-past branch a ``ConstantOfShape`` was
given rank 2 (the other branch's value) for rank 1, the ``Where`` after it ``[batch_size, 4]`` for ``[4]``,
and the ``Expand`` reading it no type at all: the ScatterND on it was SHAPE_UNKNOWN in ``inspect``, while
the same decoder exported alone infers whole.

:func:`unshared` renames, in a copy, every value a subgraph makes or takes as an input whose name is also
used in another graph of the model (its references in nested graphs too); :func:`give_back` puts the
original names back into the inferred copy, whose types are then those of the model itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import onnx

from .data_cuts import GraphPath, graph_paths

__all__ = ["give_back", "unshared"]

_SUFFIX = "__dmlshim_sub"


def _own(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` defines itself: its inputs, initializers and node outputs."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(o for node in graph.node for o in node.output if o)
    return names


def unshared(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[GraphPath, dict[str, str]]] | None:
    """A copy of ``model`` in which no subgraph defines a name another graph defines too, with each
    subgraph's renaming (new name -> original) for :func:`give_back`; None when no name is shared."""
    graphs = list(graph_paths(model.graph))
    if len(graphs) == 1:
        return None
    owned = {path: _own(graph) for path, graph in graphs}
    counts = Counter(name for names in owned.values() for name in names)
    if all(counts[name] == 1 for path, names in owned.items() if path for name in names):
        return None
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    back: dict[GraphPath, dict[str, str]] = {}
    taken = set(counts)
    for n, (path, graph) in enumerate(graph_paths(copy.graph)):
        if not path:
            continue
        renames = {}
        for name in sorted(owned[path]):
            if counts[name] > 1:
                new = f"{name}{_SUFFIX}{n}"
                while new in taken:
                    new += "_"
                taken.add(new)
                renames[name] = new
        if renames:
            back[path] = {new: old for old, new in renames.items()}
            _rename(graph, renames, top=True)
    return copy, back


def _rename(graph: onnx.GraphProto, names: Mapping[str, str], top: bool) -> None:
    """``names`` applied to ``graph``'s node inputs, and where ``top`` (the graph that defines them) to its
    own definitions, outputs and value_info; nested graphs see them as outer-scope names unless they
    define the same name themselves."""
    if top:
        for v in (*graph.input, *graph.output, *graph.value_info):
            v.name = names.get(v.name, v.name)
        for t in graph.initializer:
            t.name = names.get(t.name, t.name)
    for node in graph.node:
        node.input[:] = [names.get(x, x) for x in node.input]
        if top:
            node.output[:] = [names.get(x, x) for x in node.output]
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                inner = {k: v for k, v in names.items() if k not in _own(sub)}
                if inner:
                    _rename(sub, inner, top=False)
    if not top:
        for v in graph.output:  # a nested graph may give an outer value straight out
            v.name = names.get(v.name, v.name)


def give_back(inferred: onnx.ModelProto, back: Mapping[GraphPath, Mapping[str, str]]) -> onnx.ModelProto:
    """``inferred`` (the inference of :func:`unshared`'s copy) with every original name back in place."""
    for path, graph in graph_paths(inferred.graph):
        names = back.get(path)
        if names:
            _rename(graph, names, top=True)
    return inferred
