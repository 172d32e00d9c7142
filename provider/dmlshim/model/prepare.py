"""The model as onnxruntime sees it once loaded: local functions expanded, nodes in topological order.

Every command and the API read models through :func:`prepare_model` (called by both model loaders right
after the model check), so that translation, placement, emulation, export, generated inputs and reports all
see the same graph onnxruntime runs:

* calls of model-local functions are expanded with onnxruntime's names (:mod:`dmlshim.model.inline`);
* nodes listed out of topological order are sorted (onnxruntime sorts them; the ONNX standard asks for
  sorted graphs, but onnxruntime runs unsorted ones);
* an initializer defined twice under one name keeps only the definition onnxruntime reads
  (:mod:`dmlshim.model.duplicate_initializers`);
* an initializer's ``segment`` is dropped (onnxruntime reads the whole tensor; onnx refuses to);
* sparse initializers become dense initializers (onnxruntime densifies them when it loads the model), so
  that every engine reads them like any other weight;
* in a graph that changed, an unnamed node is given the name onnxruntime reports it under
  (``<op_type>_<index>``, its index in onnxruntime's graph, where Constant nodes take none), so that names
  do not move with the new order.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import subgraphs
from ..limits import check_bytes
from .duplicate_initializers import has_duplicates, keep_onnxruntimes
from .inline import (
    FunctionKey,
    IndexedNode,
    expand_functions,
    function_table,
    has_local_calls,
    ort_indices,
)

logger = logging.getLogger(__name__)

__all__ = ["prepare_model"]


def _defined(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input}
    names.update(t.name for t in graph.initializer)
    names.update(s.values.name for s in graph.sparse_initializer)
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def outer_references(graph: onnx.GraphProto) -> set[str]:
    """The names a subgraph (and its own subgraphs) reads from enclosing scopes."""
    defined = _defined(graph)
    used: set[str] = set()
    for node in graph.node:
        used.update(i for i in node.input if i)
        for _, sub in subgraphs(node):
            used.update(outer_references(sub))
    used.update(o.name for o in graph.output)
    return used - defined


def _needs(node: onnx.NodeProto) -> set[str]:
    needs = {i for i in node.input if i}
    for _, sub in subgraphs(node):
        needs.update(outer_references(sub))
    return needs


def _topological(nodes: list[IndexedNode]) -> list[IndexedNode] | None:
    """``nodes`` in a topological order that keeps the listed order wherever it can; ``nodes`` itself when
    already sorted, None when they form a cycle (onnxruntime refuses those; left as they are)."""
    producer: dict[str, int] = {}
    for position, item in enumerate(nodes):
        for out in item.node.output:
            if out:
                producer.setdefault(out, position)
    deps = [{producer[n] for n in _needs(item.node) if n in producer} - {p} for p, item in enumerate(nodes)]
    if all(all(d < p for d in ds) for p, ds in enumerate(deps)):
        return nodes
    waiting = [len(ds) for ds in deps]
    users: list[list[int]] = [[] for _ in nodes]
    for p, ds in enumerate(deps):
        for d in ds:
            users[d].append(p)
    ready = [p for p, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        p = heapq.heappop(ready)
        order.append(p)
        for u in users[p]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        return None
    return [nodes[p] for p in order]


def _prepare_graph(graph: onnx.GraphProto, functions: dict[FunctionKey, onnx.FunctionProto]) -> bool:
    """Expand calls and sort the nodes of ``graph`` and its subgraphs, in place; whether anything changed."""
    nodes = ort_indices(graph.node)
    expanded = 0
    if functions:
        nodes, expanded = expand_functions(nodes, functions)
    changed = expanded > 0
    for item in nodes:
        for _, sub in subgraphs(item.node):
            changed |= _prepare_graph(sub, functions)
    ordered = _topological(nodes)
    reordered = ordered is not None and ordered is not nodes
    if ordered is not None:
        nodes = ordered
    if not expanded and not reordered:
        return changed
    named = {item.node.name for item in nodes if item.node.name}
    kept: list[onnx.NodeProto] = []
    for item in nodes:
        node = onnx.NodeProto()
        node.CopyFrom(item.node)
        if not node.name and item.index >= 0:
            proposed = f"{node.op_type}_{item.index}"
            if proposed not in named:
                node.name = proposed
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return True


def _is_sorted(graph: onnx.GraphProto, nested: bool = True) -> bool:
    """Whether :func:`_topological` would keep ``graph``'s nodes (and its subgraphs' nodes) as they are:
    every value a node reads is produced (first) by an earlier node or by itself. One pass, no sets: on a
    loaded model (sorted at load) this is the whole cost of :func:`prepare_model`. ``nested=False``: the
    model is known to hold no subgraph (none is looked for)."""
    nodes = graph.node
    producer: dict[str, int] = {}
    for position, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer.setdefault(out, position)
    get = producer.get
    for position, node in enumerate(nodes):
        for name in node.input:
            if name and get(name, -1) > position:
                return False
        if not nested:
            continue
        for _, sub in subgraphs(node):
            if any(get(name, -1) > position for name in outer_references(sub)) or not _is_sorted(sub):
                return False
    return True


def dense_tensor(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    """The dense initializer a sparse one stands for (zeros where no value is given).

    Raises:
        TooLargeError: the dense tensor does not fit the memory limit.
    """
    dims = tuple(int(d) for d in sparse.dims)
    values = numpy_helper.to_array(sparse.values)
    check_bytes(
        int(np.prod(dims, dtype=np.int64)) * values.dtype.itemsize,
        what=f"the dense form of sparse initializer {sparse.values.name!r}",
        tensor=sparse.values.name,
    )
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64) if sparse.HasField("indices") else None
    dense = np.zeros(int(np.prod(dims, dtype=np.int64)), dtype=values.dtype)
    if indices is not None and indices.size:
        flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
        dense[flat] = values.reshape(-1)
    return numpy_helper.from_array(dense.reshape(dims), sparse.values.name)


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph in it."""
    found = [graph]
    for node in graph.node:
        for _, sub in subgraphs(node):
            found.extend(_graphs(sub))
    return found


def _densify(graph: onnx.GraphProto) -> None:
    if graph.sparse_initializer:
        graph.initializer.extend(dense_tensor(s) for s in graph.sparse_initializer)
        del graph.sparse_initializer[:]
    for node in graph.node:
        for _, sub in subgraphs(node):
            _densify(sub)


def _negative_dims(graphs: list[onnx.GraphProto]) -> list[onnx.TensorShapeProto.Dimension]:
    """The declared dimensions of ``graphs`` with a negative ``dim_value``."""
    return [
        d
        for graph in graphs
        for vi in (*graph.input, *graph.output, *graph.value_info)
        if vi.type.WhichOneof("value") == "tensor_type"
        for d in vi.type.tensor_type.shape.dim
        if d.HasField("dim_value") and d.dim_value < 0
    ]


def prepare_model(
    model: onnx.ModelProto,
    *,
    owned: bool = False,
    before_change: Callable[[], None] | None = None,
    sorted_known: bool = False,
) -> onnx.ModelProto:
    """The model onnxruntime runs: local-function calls expanded, every graph in topological order,
    sparse initializers dense, a negative declared dimension unknown (onnxruntime reads ``dim_value: -1``
    as a free dimension and reports it as None).

    Args:
        model: a checked model.
        owned: the caller owns ``model`` and lets it be changed in place; otherwise a changed model is a
            copy and ``model`` stays as it was.
        before_change: called once before anything is changed (not at all when nothing needs to be).
        sorted_known: the nodes of every graph are known to be in topological order (onnx.checker passed
            the model: ``check_model(..., sorted_found=...)``); they are not walked to find out.

    Returns:
        ``model`` itself when nothing needed to change, else the prepared model.

    Raises:
        TooLargeError: a sparse initializer's dense form does not fit the memory limit.
    """
    calls = has_local_calls(model)
    graphs = _graphs(model.graph)  # one walk; the checks below then look at no node's attributes
    sparse = any(g.sparse_initializer for g in graphs)
    negative = bool(_negative_dims(graphs))
    duplicated = has_duplicates(model.graph)  # (in a subgraph onnxruntime refuses them: not unique)
    # onnxruntime ignores a tensor's ``segment`` and reads the whole tensor; onnx's to_array refuses it
    segmented = [t for g in graphs for t in g.initializer if t.HasField("segment")]
    if (
        not calls
        and not sparse
        and not negative
        and not duplicated
        and not segmented
        and (sorted_known or _is_sorted(model.graph, nested=len(graphs) > 1))
    ):
        return model
    if before_change is not None:
        before_change()
    out = model
    if not owned:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    for dim in _negative_dims(_graphs(out.graph)):
        dim.ClearField("dim_value")
    if duplicated:
        keep_onnxruntimes(out.graph)
    if segmented:
        for graph in _graphs(out.graph):
            for tensor in graph.initializer:
                tensor.ClearField("segment")
    if sparse:
        _densify(out.graph)
    functions = function_table(out) if calls else {}
    _prepare_graph(out.graph, functions)
    if calls:
        have = {("" if o.domain == "ai.onnx" else o.domain) for o in out.opset_import}
        for f in out.functions:
            for o in f.opset_import:
                domain = "" if o.domain == "ai.onnx" else o.domain
                if domain not in have:
                    out.opset_import.add(domain=o.domain, version=o.version)
                    have.add(domain)
        names = [f.name for f in out.functions]
        del out.functions[:]
        logger.info("expanded the model's local functions (%s) as onnxruntime does", ", ".join(names))
    return out
