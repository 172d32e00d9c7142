"""ONNX graph traversal and node naming, shared by every layer (translation, execution, reports)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

GATHER_SCATTER_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)
"""The ONNX ops dmlshim translates to DirectML operators (default ONNX domain only)."""


def default_opset(model: onnx.ModelProto, missing: int = 0) -> int:
    """The model's ai.onnx opset as onnxruntime reads ``opset_import``: when the domain is listed more than
    once (as ``""`` or ``"ai.onnx"``), the last entry wins; ``missing`` when it is not listed."""
    found = missing
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            found = int(entry.version)
    return found


def is_gather_scatter(node: onnx.NodeProto) -> bool:
    """Whether a node is one of the six ops in the default ONNX domain."""
    return node.op_type in GATHER_SCATTER_OPS and node.domain in ("", "ai.onnx")


def node_path(prefix: str, node: onnx.NodeProto, index: int) -> str:
    """The name a node is reported under: its subgraph path, then its own name, else ``<op_type>_<index>``
    with ``index`` its position in its own graph.

    onnxruntime names unnamed nodes the same way in its profiles (``Gather_3_kernel_time``), so a name
    here can be looked up there. Every command and message (inspect, run records, validate, export,
    errors) names nodes with this function, so they agree.
    """
    return prefix + (node.name or f"{node.op_type}_{index}")


def subgraph_prefix(name: str, attr_name: str) -> str:
    """The path prefix of the nodes inside a node's subgraph attribute (``loop/body/``)."""
    return f"{name}/{attr_name}/"


def display_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """The names of a graph's own nodes (see :func:`node_path`)."""
    return [node_path("", node, i) for i, node in enumerate(nodes)]


GRAPH_ATTRIBUTE_TYPES = frozenset(
    {onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.UNDEFINED}
)
"""The attribute types :func:`subgraphs` looks for graphs in (an attribute of another declared type holds
none: the model check requires types)."""
_MAY_HOLD_GRAPHS = GRAPH_ATTRIBUTE_TYPES


_NO_SUBGRAPHS: Iterator[tuple[str, onnx.GraphProto]] = iter(())
"""An exhausted iterator: what :func:`subgraphs` gives a node without a graph attribute (shared, since an
exhausted iterator stays exhausted)."""


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """The (attribute name, graph) pairs a node carries (If branches, Loop/Scan bodies, ...)."""
    # Asked of every node by a dozen walks per session build: a node with no attribute that may hold a
    # graph (nearly all of them) is answered without making a generator.
    for attr in node.attribute:
        if attr.type in _MAY_HOLD_GRAPHS:
            return _node_subgraphs(node)
    return _NO_SUBGRAPHS


def _node_subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        kind = attr.type
        if kind not in _MAY_HOLD_GRAPHS:
            continue  # an attribute of another declared type holds no graph (the model check requires types)
        if attr.HasField("g"):
            yield attr.name, attr.g
        for g in attr.graphs:
            yield attr.name, g


def op_types(graph: onnx.GraphProto) -> frozenset[str]:
    """The op types of a graph's nodes and of its subgraphs' nodes (any domain): one walk, so that a pass
    looking for one op (If, Loop) can be skipped where no node of that op exists."""
    found: set[str] = set()
    pending = [graph]
    while pending:
        g = pending.pop()
        found.update([node.op_type for node in g.node])
        for node in g.node:
            for attr in node.attribute:
                if attr.type not in _MAY_HOLD_GRAPHS:
                    continue  # as in subgraphs()
                if attr.HasField("g"):
                    pending.append(attr.g)
                pending.extend(attr.graphs)
    return frozenset(found)


_SCAN_MAX_BYTES = 16 << 20
"""Largest graph whose serialized bytes :func:`op_types_among` searches (a larger one's bytes would be
its weights copied): it is walked instead."""


def _op_type_field(op: str) -> bytes:
    """How a NodeProto serializes ``op_type = op``: field 4, length-delimited (tag 0x22), the length as a
    varint, the UTF-8 bytes."""
    data = op.encode()
    length, n = b"", len(data)
    while True:
        byte, n = n & 0x7F, n >> 7
        length += bytes([byte | (0x80 if n else 0)])
        if not n:
            return b"\x22" + length + data


def _small_graph_bytes(graph: onnx.GraphProto) -> bytes | None:
    """The graph's serialized bytes when they are at most :data:`_SCAN_MAX_BYTES` (None: larger). One
    serialization: protobuf's (upb's) ``ByteSize()`` serializes the message too, with the same peak (a
    210 MB graph: +209 MB either way), so asking it first took twice the time for the same answer."""
    data = graph.SerializeToString()
    return data if len(data) <= _SCAN_MAX_BYTES else None


def op_types_among(
    graph: onnx.GraphProto, wanted: Sequence[str], serialized: bytes | None = None
) -> frozenset[str]:
    """``op_types(graph) & set(wanted)``, found without a walk where it is empty: a node of op ``op``
    (in any subgraph too: a nested message is serialized within its parent) puts :func:`_op_type_field`'s
    bytes into the graph's serialized bytes, so where none of them occurs no node has any of these ops.
    An occurrence (a true one, or the same bytes inside another field) walks as :func:`op_types` does.
    ``serialized``: bytes the caller already holds that contain the graph's (the model's own
    serialization: its graph field holds them), searched instead, whatever their size."""
    data = serialized if serialized is not None else _small_graph_bytes(graph)
    if data is not None and not any(_op_type_field(op) in data for op in wanted):
        return frozenset()
    return op_types(graph) & frozenset(wanted)


def may_hold_op_types(graph: onnx.GraphProto, wanted: Sequence[str], serialized: bytes | None = None) -> bool:
    """False only where no node of ``graph`` or of its subgraphs has one of these ops (none of their
    :func:`_op_type_field` bytes occurs in the graph's bytes); True where one may (an occurrence, true or
    not, or a graph too large to search). ``serialized``: as for :func:`op_types_among`."""
    data = serialized if serialized is not None else _small_graph_bytes(graph)
    return data is None or any(_op_type_field(op) in data for op in wanted)


def walk_nodes(graph: onnx.GraphProto, prefix: str = "") -> Iterator[tuple[str, onnx.NodeProto]]:
    """Every node of a graph and of its subgraphs with its path name, each subgraph right after its owner."""
    for i, node in enumerate(graph.node):
        name = node_path(prefix, node, i)
        yield name, node
        for attr_name, sub in subgraphs(node):
            yield from walk_nodes(sub, subgraph_prefix(name, attr_name))


def value_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name of ``graph`` and of its subgraphs (inputs, outputs, annotations, initializers,
    what nodes read and write): where a name dmlshim adds must not land, as a body may read any outer one."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for _, sub in subgraphs(node):
            names |= value_names(sub)
    return names


def all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Initializers and tensor attributes of a graph and of every subgraph."""
    found = list(graph.initializer)
    found.extend(s.values for s in graph.sparse_initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                found.append(attr.t)
            if attr.tensors:  # an empty repeated field tested is cheaper than extended (3 walks per load)
                found.extend(attr.tensors)
            if attr.HasField("g"):
                found.extend(all_tensors(attr.g))
            if attr.graphs:
                for g in attr.graphs:
                    found.extend(all_tensors(g))
    return found


_HALF_FLOATS = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})
_TYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype"})


def _elem_types(tp: onnx.TypeProto) -> Iterator[int]:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(tp, kind).elem_type
    elif kind in ("sequence_type", "optional_type"):
        yield from _elem_types(getattr(tp, kind).elem_type)
    elif kind == "map_type":
        yield tp.map_type.key_type
        yield from _elem_types(tp.map_type.value_type)


def uses_half_floats(graph: onnx.GraphProto) -> bool:
    """Whether a value of the graph or of its subgraphs may be float16 or bfloat16: a declared type, a
    tensor, or a type attribute (Cast's ``to``, ``dtype``, ``output_dtype``) says so. onnxruntime's CPU
    provider computes most such nodes in float32 between casts it inserts, and drops the cast pairs
    between neighbours, so where a graph is cut changes their results."""

    def declared(g: onnx.GraphProto) -> bool:
        values = (*g.input, *g.output, *g.value_info)
        return any(t in _HALF_FLOATS for v in values for t in _elem_types(v.type))

    if any(t.data_type in _HALF_FLOATS for t in all_tensors(graph)) or declared(graph):
        return True
    for _, node in walk_nodes(graph):
        for attr in node.attribute:
            typed = attr.name in _TYPE_ATTRIBUTES and attr.type == onnx.AttributeProto.INT
            if typed and attr.i in _HALF_FLOATS:
                return True
            if (attr.HasField("g") and declared(attr.g)) or any(declared(g) for g in attr.graphs):
                return True
    return False


CONSTANT_VALUE_ATTRIBUTES = (
    "value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
    "value_strings",
)  # fmt: skip
"""The attributes of which an ONNX Constant node holds exactly one (ONNX spec, Constant-13)."""


def _constant_attribute(node: onnx.NodeProto) -> onnx.AttributeProto | None:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    found = [a for a in node.attribute if a.name in CONSTANT_VALUE_ATTRIBUTES]
    return found[0] if len(found) == 1 else None


def constant_node_shape(node: onnx.NodeProto) -> tuple[int, ...] | None:
    """The shape of a Constant node's value without reading its data (None: not a Constant with one
    value attribute)."""
    attr = _constant_attribute(node)
    if attr is None:
        return None
    name = attr.name
    if name == "value":
        return tuple(int(d) for d in attr.t.dims)
    if name == "sparse_value":
        return tuple(int(d) for d in attr.sparse_tensor.dims)
    if name in ("value_float", "value_int", "value_string"):
        return ()
    return (len(attr.floats) if name == "value_floats" else len(attr.ints) if name == "value_ints"
            else len(attr.strings),)  # fmt: skip


def _dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """A SparseTensorProto as the dense array onnxruntime's Constant gives (zeros where no value is)."""
    values = _tensor_value(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    out = np.zeros(math.prod(dims), dtype=values.dtype)
    if values.dtype == object:
        out[:] = ""
    flat = indices.reshape(-1) if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
    out[flat] = values.reshape(-1)
    return out.reshape(dims)


def _tensor_value(tensor: onnx.TensorProto) -> np.ndarray:
    value = numpy_helper.to_array(tensor)
    if tensor.data_type == onnx.TensorProto.STRING:  # onnxruntime gives str; older onnx helpers give bytes
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in value.reshape(-1)]
        value = np.array(flat, dtype=object).reshape(value.shape)
    return value


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value a Constant node (default domain) gives, with onnxruntime's dtype and shape, for every
    form the ONNX spec allows: ``value`` (a tensor), ``sparse_value`` (made dense), ``value_float(s)``
    (float32), ``value_int(s)`` (int64), ``value_string(s)`` (object arrays of ``str``); the singular
    forms are scalars, the plural ones 1-D.

    None when ``node`` is not such a Constant (another op or domain, no or several value attributes), its
    tensor lies in external data (not readable without the model's folder), or it holds strings that are
    no UTF-8: onnxruntime builds the session and gives the value as its bytes (its ``run`` raises
    ``UnicodeDecodeError`` only when such a string reaches an output), which a ``str`` cannot hold; the
    node is left to onnxruntime.
    """
    attr = _constant_attribute(node)
    if attr is None:
        return None
    try:
        return _constant_value(attr)
    except UnicodeDecodeError:
        return None


def _constant_value(attr: onnx.AttributeProto) -> np.ndarray | None:
    name = attr.name
    if name == "value":
        if attr.t.data_location == onnx.TensorProto.EXTERNAL:
            return None
        return _tensor_value(attr.t)
    if name == "sparse_value":
        sparse = attr.sparse_tensor
        if onnx.TensorProto.EXTERNAL in (sparse.values.data_location, sparse.indices.data_location):
            return None
        return _dense(sparse)
    if name == "value_float":
        return np.array(attr.f, dtype=np.float32)
    if name == "value_floats":
        return np.array(list(attr.floats), dtype=np.float32)
    if name == "value_int":
        return np.array(attr.i, dtype=np.int64)
    if name == "value_ints":
        return np.array(list(attr.ints), dtype=np.int64)
    if name == "value_string":
        return np.array(attr.s.decode("utf-8"), dtype=object)
    return np.array([s.decode("utf-8") for s in attr.strings], dtype=object).reshape(len(attr.strings))
