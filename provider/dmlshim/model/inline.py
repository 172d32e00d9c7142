"""Model-local functions expanded as onnxruntime expands them, before anything else looks at the model.

onnxruntime inlines every call of a model-local function (``ModelProto.functions``) before its execution
providers place nodes, so on real DirectML a Gather inside a function body runs like any other Gather.
dmlshim does the same, with onnxruntime's names, so that reports, exports and profiles agree:

* each call gets an identifier ``_inlfunc_<function>``, or ``_inlfunc_<function>_token_<n>`` when the
  graph already used that one (``n`` counts up per graph);
* a named body node becomes ``<identifier>_<name>``; every value the body defines (subgraphs included)
  becomes ``<identifier>_<value>``; formal inputs and outputs become the call's own values;
* calls are expanded graph by graph in passes over the nodes in onnxruntime's order (the nodes the model
  lists, then the nodes each expansion appends), so a function called inside another one is expanded
  in the next pass, and an unnamed node keeps the index onnxruntime gives it (its profile name
  ``<op_type>_<index>``; Constant nodes, which onnxruntime turns into initializers, take no index).

Attributes a body refers to (``ref_attr_name``) take the call's value, else the function's default, else
are left out, as ONNX specifies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx

logger = logging.getLogger(__name__)

__all__ = ["IndexedNode", "expand_functions", "has_local_calls", "is_constant", "ort_indices"]

FunctionKey = tuple[str, str, str]


@dataclass
class IndexedNode:
    """A node and the index onnxruntime gives it in its graph (it names unnamed nodes by that index)."""

    index: int
    node: onnx.NodeProto


@dataclass
class _GraphNames:
    """onnxruntime's per-graph name generator for inlining identifiers."""

    taken: set[str] = field(default_factory=set)
    counter: int = 0

    def generate(self, base: str, node_names: set[str]) -> str:
        name = base
        while name in self.taken or name in node_names:
            name = f"{base}_token_{self.counter}"
            self.counter += 1
        self.taken.add(name)
        return name


def is_constant(node: onnx.NodeProto) -> bool:
    """An ONNX Constant node: onnxruntime turns it into an initializer when it builds its graph, so it has
    no node index there (the nodes after it are numbered as if it were not listed)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def ort_indices(nodes: Sequence[onnx.NodeProto]) -> list[IndexedNode]:
    """The nodes of one graph with the indices onnxruntime gives them (-1 for Constant nodes)."""
    out: list[IndexedNode] = []
    index = 0
    for node in nodes:
        if is_constant(node):
            out.append(IndexedNode(-1, node))
        else:
            out.append(IndexedNode(index, node))
            index += 1
    return out


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _key(node: onnx.NodeProto) -> FunctionKey:
    return (_domain(node.domain), node.op_type, getattr(node, "overload", ""))


def _function_keys(model: onnx.ModelProto) -> dict[FunctionKey, onnx.FunctionProto]:
    # onnxruntime (1.24, 1.32) never calls a local function of the ONNX domain: a node there is the
    # standard op (a function named Gather does not replace Gather), or an operator it refuses to load
    return {
        (_domain(f.domain), f.name, getattr(f, "overload", "")): f
        for f in model.functions
        if _domain(f.domain) != ""
    }


def _graph_calls(graph: onnx.GraphProto, functions: Mapping[FunctionKey, onnx.FunctionProto]) -> bool:
    for node in graph.node:
        if _key(node) in functions:
            return True
        for attr in node.attribute:
            subs = [attr.g] if attr.HasField("g") else []
            subs.extend(attr.graphs)
            if any(_graph_calls(g, functions) for g in subs):
                return True
    return False


def has_local_calls(model: onnx.ModelProto) -> bool:
    """Whether any node of the model (subgraphs included) calls one of its local functions."""
    functions = _function_keys(model)
    return bool(functions) and _graph_calls(model.graph, functions)


def _rename_graph(graph: onnx.GraphProto, rename: Callable[[str], str], attrs: _AttrResolver) -> None:
    """Rename, in place, every value and node of a subgraph inside a function body."""
    for vi in (*graph.input, *graph.output, *graph.value_info):
        vi.name = rename(vi.name)
    for t in graph.initializer:
        t.name = rename(t.name)
    for s in graph.sparse_initializer:
        s.values.name = rename(s.values.name)
        s.indices.name = rename(s.indices.name)
    for node in graph.node:
        _rename_node(node, rename, attrs)


class _AttrResolver:
    """Resolves ``ref_attr_name`` attributes of a body against the call node and the function defaults."""

    def __init__(self, call: onnx.NodeProto, function: onnx.FunctionProto):
        self._given = {a.name: a for a in call.attribute}
        self._defaults = {a.name: a for a in function.attribute_proto}

    def resolve(self, node: onnx.NodeProto) -> None:
        kept: list[onnx.AttributeProto] = []
        for attr in node.attribute:
            if attr.ref_attr_name:
                source = self._given.get(attr.ref_attr_name) or self._defaults.get(attr.ref_attr_name)
                if source is None:
                    continue  # neither given nor defaulted: the attribute is absent
                value = onnx.AttributeProto()
                value.CopyFrom(source)
                value.name = attr.name
                kept.append(value)
            else:
                kept.append(attr)
        if len(kept) != len(node.attribute) or any(a.ref_attr_name for a in node.attribute):
            del node.attribute[:]
            node.attribute.extend(kept)


def _rename_node(node: onnx.NodeProto, rename: Callable[[str], str], attrs: _AttrResolver) -> None:
    node.input[:] = [rename(n) if n else n for n in node.input]
    node.output[:] = [rename(n) if n else n for n in node.output]
    if node.name:
        node.name = rename(node.name)
    attrs.resolve(node)
    for attr in node.attribute:
        if attr.HasField("g"):
            _rename_graph(attr.g, rename, attrs)
        for g in attr.graphs:
            _rename_graph(g, rename, attrs)


def _body(call: onnx.NodeProto, function: onnx.FunctionProto, uid: str) -> list[onnx.NodeProto]:
    """The function's nodes with onnxruntime's names for one call."""
    actual: dict[str, str] = {}
    for i, formal in enumerate(function.input):
        actual[formal] = call.input[i] if i < len(call.input) else ""
    for i, formal in enumerate(function.output):
        if i < len(call.output) and call.output[i]:
            actual[formal] = call.output[i]

    def rename(name: str) -> str:
        found = actual.get(name)
        return found if found is not None else f"{uid}_{name}"

    attrs = _AttrResolver(call, function)
    body: list[onnx.NodeProto] = []
    for original in function.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        _rename_node(node, rename, attrs)
        body.append(node)
    return body


def _expand_graph(
    nodes: list[IndexedNode], functions: Mapping[FunctionKey, onnx.FunctionProto]
) -> tuple[list[IndexedNode], int]:
    """Expand every call in one graph (pass after pass, as onnxruntime does); the new node list, in an
    order where each body stands where its call stood, and how many calls were expanded."""
    names = _GraphNames()
    next_index = max((n.index for n in nodes), default=-1) + 1
    expanded = 0
    while True:
        calls = sorted(n.index for n in nodes if _key(n.node) in functions)
        if not calls:
            return nodes, expanded
        for index in calls:
            position = next(i for i, n in enumerate(nodes) if n.index == index)
            call = nodes[position].node
            function = functions[_key(call)]
            node_names = {n.node.name for n in nodes if n.node.name}
            uid = names.generate(f"_inlfunc_{function.name}", node_names)
            body: list[IndexedNode] = []
            for node in _body(call, function, uid):
                if is_constant(node):  # onnxruntime makes it an initializer: it takes no node index
                    body.append(IndexedNode(-1, node))
                else:
                    body.append(IndexedNode(next_index, node))
                    next_index += 1
            nodes[position : position + 1] = body
            expanded += 1


def expand_functions(
    graph_nodes: list[IndexedNode], functions: Mapping[FunctionKey, onnx.FunctionProto]
) -> tuple[list[IndexedNode], int]:
    """Expand the local-function calls of one graph's nodes (see :func:`_expand_graph`); subgraphs are
    the caller's to visit afterwards. Returns the nodes and the number of calls expanded."""
    return _expand_graph(graph_nodes, functions)


def function_table(model: onnx.ModelProto) -> dict[FunctionKey, onnx.FunctionProto]:
    """The model's local functions by (domain, name, overload)."""
    return _function_keys(model)
