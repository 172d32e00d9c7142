"""Columns of a graph's top-level fields read in one C parse, without a Python step per node or value.

Protobuf merges the occurrences of a singular message field on parse, and appends the occurrences of a
repeated field. So a graph's serialized bytes parsed as a message whose field 1 (``node``) is declared a
*singular* message with ``repeated string output = 2`` give every top-level node's outputs in one list,
in node order; and ``value_info`` (field 13) read as a singular message with ``repeated string name = 1``
and ``repeated bytes type = 2`` gives every value's name and serialized type in two lists, aligned where
each value carries exactly one of each (checked by counting; where it does not, None: the caller walks).
A walk of 20,000 nodes makes a Python object per node and per field read; this makes a few lists.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["COLUMNS_MAX_BYTES", "declared_types", "flat_ops"]

COLUMNS_MAX_BYTES = 16 << 20
"""Largest graph read this way (its bytes are copied twice: a larger one's would be its weights)."""

_VALUE_FIELDS = (("input", 11), ("value_info", 13), ("output", 12))
"""GraphProto's fields of ValueInfoProto, in the order a later declaration of a name wins."""


@cache
def _columns_class() -> Any:
    """The message classes reading a GraphProto's bytes as columns, and a ModelProto's as its graph's
    columns (built once, in a pool of their own)."""
    proto = descriptor_pb2.FileDescriptorProto(name="dmlshim_graph_columns.proto", package="dmlshim_columns")
    proto.syntax = "proto2"
    label_opt = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    label_rep = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    string = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    raw = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    message = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE

    attributes = proto.message_type.add(name="Attributes")  # AttributeProto: g = 6, graphs = 11
    attributes.field.add(name="g", number=6, label=label_rep, type=raw)
    attributes.field.add(name="graphs", number=11, label=label_rep, type=raw)
    nodes = proto.message_type.add(name="Nodes")  # NodeProto: output = 2, op_type = 4, domain = 7
    nodes.field.add(name="output", number=2, label=label_rep, type=string)
    nodes.field.add(name="op_type", number=4, label=label_rep, type=string)
    nodes.field.add(name="domain", number=7, label=label_rep, type=string)
    nodes.field.add(name="attribute", number=5, label=label_opt, type=message,
                    type_name=".dmlshim_columns.Attributes")  # fmt: skip
    values = proto.message_type.add(name="Values")  # ValueInfoProto: name = 1, type = 2
    values.field.add(name="name", number=1, label=label_rep, type=string)
    values.field.add(name="type", number=2, label=label_rep, type=raw)
    graph = proto.message_type.add(name="Graph")
    graph.field.add(name="node", number=1, label=label_opt, type=message, type_name=".dmlshim_columns.Nodes")
    for field, number in _VALUE_FIELDS:
        graph.field.add(name=field, number=number, label=label_opt, type=message,
                        type_name=".dmlshim_columns.Values")  # fmt: skip
    model = proto.message_type.add(name="Model")  # ModelProto: graph = 7
    model.field.add(name="graph", number=7, label=label_opt, type=message, type_name=".dmlshim_columns.Graph")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    classes = (pool.FindMessageTypeByName(f"dmlshim_columns.{name}") for name in ("Graph", "Model"))
    # protobuf 4.22+ (onnx 1.20 needs 4.25.1+)
    return tuple(message_factory.GetMessageClass(descriptor) for descriptor in classes)


def _raw_bytes(graph: onnx.GraphProto) -> int:
    """The bytes ``graph``'s inline ``raw_data`` initializers hold, from their dims (no byte is read): at
    most the graph's size. protobuf's ``ByteSize`` serializes the whole graph to measure it (a 100 MB
    weight: +190 MB while it ran, on every session build)."""
    from .weightless import tensor_nbytes

    return sum(
        tensor_nbytes(t)
        for t in graph.initializer
        if t.data_location != onnx.TensorProto.EXTERNAL and t.HasField("raw_data")
    )


def _read(graph: onnx.GraphProto, model_bytes: bytes | None = None) -> Any | None:
    """``graph`` read as columns; from ``model_bytes`` (the serialized model holding ``graph`` as its
    graph) where given, without serializing the graph."""
    graph_class, model_class = _columns_class()
    if model_bytes is not None:
        return model_class.FromString(model_bytes).graph
    if _raw_bytes(graph) > COLUMNS_MAX_BYTES:
        return None  # never serialized to be measured: its inline weights alone are over the bound
    # one serialization: upb's ByteSize() serializes too (same peak), so asking it first took twice the time
    data = graph.SerializeToString()
    if len(data) > COLUMNS_MAX_BYTES:
        return None
    return graph_class.FromString(data)


def declared_types(graph: onnx.GraphProto) -> tuple[list[str], dict[str, bytes]] | None:
    """The top-level node outputs (``[o for node in graph.node for o in node.output]``) and
    ``{v.name: v.type.SerializeToString() for v in (*graph.input, *graph.value_info, *graph.output)}``, the
    later declaration of a name winning; None where a value lacks its name or type field (the columns
    would not align) or the graph is over :data:`COLUMNS_MAX_BYTES`."""
    columns = _read(graph)
    if columns is None:
        return None
    typed: dict[str, bytes] = {}
    for field, _ in _VALUE_FIELDS:
        values = getattr(columns, field)
        count = len(getattr(graph, field))
        if len(values.name) != count or len(values.type) != count:
            return None  # a value without its name or type field: the columns do not pair up
        typed.update(zip(values.name, values.type, strict=True))
    return list(columns.node.output), typed


def flat_ops(graph: onnx.GraphProto, model_bytes: bytes | None = None) -> tuple[set[str], set[str]] | None:
    """The op types and the domains of ``graph``'s nodes (a node without the field counts as ``""``),
    where no node carries a graph attribute (field ``g`` or ``graphs`` set, whatever the declared type:
    the graph is then the only one); None where one does, or the graph is over :data:`COLUMNS_MAX_BYTES`.
    Each node's (domain, op_type) is among the pairs of the two sets. ``model_bytes``: the serialized
    model whose graph ``graph`` is, read instead (whatever its size: the caller holds it already)."""
    columns = _read(graph, model_bytes)
    if columns is None:
        return None
    nodes = columns.node
    if nodes.attribute.g or nodes.attribute.graphs:
        return None
    count = len(graph.node)
    op_types, domains = set(nodes.op_type), set(nodes.domain)
    if len(nodes.op_type) < count:
        op_types.add("")
    if len(nodes.domain) < count:
        domains.add("")
    return op_types, domains
