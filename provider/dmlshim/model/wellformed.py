"""Well-formedness: a model that parses as protobuf but cannot be an ONNX model is refused before anything
reads it (:func:`check_well_formed`). onnx.checker lets some of these defects through, and they then break
deep inside onnx or numpy helpers."""

from __future__ import annotations

import functools
import math

import onnx
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.internal import api_implementation
from google.protobuf.message import Message
from onnx import TensorProto

from ..errors import BadModelError
from ..graph import GRAPH_ATTRIBUTE_TYPES, node_path, subgraph_prefix, subgraphs
from ..limits import check_bytes
from .ort_errors import GATHER_SCATTER_INDEX_TYPES
from .utf8_parse import strings_valid

__all__ = ["RAW_ITEMSIZE", "check_well_formed"]


# Where each element type keeps its values when not in raw_data, and how many entries one element takes.
_TYPED_FIELD: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float_data", 1),
    TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.INT64: ("int64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.INT32: ("int32_data", 1),
    TensorProto.INT16: ("int32_data", 1),
    TensorProto.INT8: ("int32_data", 1),
    TensorProto.UINT16: ("int32_data", 1),
    TensorProto.UINT8: ("int32_data", 1),
    TensorProto.BOOL: ("int32_data", 1),
    TensorProto.FLOAT16: ("int32_data", 1),
    TensorProto.BFLOAT16: ("int32_data", 1),
    TensorProto.STRING: ("string_data", 1),
    TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.COMPLEX128: ("double_data", 2),
}
RAW_ITEMSIZE: dict[int, int] = {
    TensorProto.FLOAT: 4,
    TensorProto.DOUBLE: 8,
    TensorProto.INT64: 8,
    TensorProto.UINT64: 8,
    TensorProto.INT32: 4,
    TensorProto.UINT32: 4,
    TensorProto.INT16: 2,
    TensorProto.UINT16: 2,
    TensorProto.FLOAT16: 2,
    TensorProto.BFLOAT16: 2,
    TensorProto.INT8: 1,
    TensorProto.UINT8: 1,
    TensorProto.BOOL: 1,
    TensorProto.COMPLEX64: 8,
    TensorProto.COMPLEX128: 16,
}
_KNOWN_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
_INT_ATTRIBUTES = {"axis", "batch_dims"}
_PLAIN_TYPES = frozenset(
    {
        onnx.AttributeProto.FLOAT,
        onnx.AttributeProto.INT,
        onnx.AttributeProto.STRING,
        onnx.AttributeProto.FLOATS,
        onnx.AttributeProto.INTS,
        onnx.AttributeProto.STRINGS,
    }
)
"""Attribute types whose value is numbers or strings (nothing the walk checks further when no other field
is set)."""


@functools.cache
def _text_layout(
    descriptor: Descriptor,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """A message type's string and message fields: (single strings, repeated strings, single messages,
    repeated messages). Bytes fields (a tensor's ``raw_data``: hundreds of MB for a large weight) and map
    entries are left out, so they are never read."""
    groups: tuple[list[str], list[str], list[str], list[str]] = ([], [], [], [])
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            groups[1 if field.is_repeated else 0].append(field.name)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not _is_map_entry(field.message_type):
            groups[3 if field.is_repeated else 2].append(field.name)
    return tuple(groups[0]), tuple(groups[1]), tuple(groups[2]), tuple(groups[3])


@functools.cache
def _is_map_entry(descriptor: Descriptor) -> bool:
    """Whether a message type is a map's entry. Asked once per type: a descriptor's options are built on
    first request (importing protobuf's descriptor_pb2), and ONNX's message types have none."""
    return bool(descriptor.has_options and descriptor.GetOptions().map_entry)


@functools.cache
def _lists_fields(descriptor: Descriptor) -> bool:
    """Whether a message type's set fields can be read with ``ListFields``: it has no bytes field (a
    tensor's ``raw_data`` would be copied)."""
    return all(field.type != FieldDescriptor.TYPE_BYTES for field in descriptor.fields)


_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_OTHER, _TEXT, _TEXTS, _PART, _PARTS = range(5)
_FIELD_KINDS: dict[FieldDescriptor, int] = {}


def _field_kind(field: FieldDescriptor) -> int:
    """What :func:`_any_bad_string` does with a field (looked up once per field of the schema)."""
    kind = _FIELD_KINDS.get(field)
    if kind is None:
        kind = _OTHER
        if field.type == _STRING:
            kind = _TEXTS if field.is_repeated else _TEXT
        elif field.type == _MESSAGE and not _is_map_entry(field.message_type):
            kind = _PARTS if field.is_repeated else _PART
        _FIELD_KINDS[field] = kind
    return kind


def _any_bad_string(message: Message) -> bool:
    """Whether some string field of ``message`` or of a message inside it is not valid UTF-8: one pass over
    the set fields only, no paths built (:func:`_bad_string` names the field once one is known bad)."""
    stack = [message]
    kinds = _FIELD_KINDS
    while stack:
        current = stack.pop()
        descriptor = current.DESCRIPTOR
        if _lists_fields(descriptor):
            for field, value in current.ListFields():
                kind = kinds.get(field)
                if kind is None:
                    kind = _field_kind(field)
                if kind == _TEXTS:
                    try:
                        "".join(value)  # a string protobuf could not decode is bytes: join refuses it
                    except TypeError:
                        return True
                elif kind == _PARTS:
                    stack.extend(value)
                elif kind == _TEXT:
                    if not isinstance(value, str):
                        return True
                elif kind == _PART:
                    stack.append(value)
            continue
        strings, repeated_strings, messages, repeated_messages = _text_layout(descriptor)
        for name in strings:
            if not isinstance(getattr(current, name), str):
                return True
        for name in repeated_strings:
            if not all(isinstance(v, str) for v in getattr(current, name)):
                return True
        stack.extend(getattr(current, name) for name in messages if current.HasField(name))
        for name in repeated_messages:
            stack.extend(getattr(current, name))
    return False


def _bad_string(message: Message, where: str) -> str | None:
    """The path of the first string field that is not valid UTF-8 (protobuf then hands back bytes)."""
    strings, repeated_strings, messages, repeated_messages = _text_layout(message.DESCRIPTOR)
    for name in strings:
        if not isinstance(getattr(message, name), str):  # unset reads as "" (a str)
            return f"{where}.{name}"
    for name in repeated_strings:
        if any(not isinstance(v, str) for v in getattr(message, name)):
            return f"{where}.{name}"
    for name in messages:
        if message.HasField(name):
            found = _bad_string(getattr(message, name), f"{where}.{name}")
            if found is not None:
                return found
    for name in repeated_messages:
        for i, item in enumerate(getattr(message, name)):
            found = _bad_string(item, f"{where}.{name}[{i}]")
            if found is not None:
                return found
    return None


_READ_RAW_BELOW = 1 << 16
"""Tensors of at most this many serialized bytes have their raw_data read as it is (see ``_raw_length``)."""


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


_UPB = api_implementation.Type() == "upb"
"""protobuf's default implementation (4.21 on): its ``ByteSize`` serializes the message to measure it."""


def _raw_length(t: onnx.TensorProto) -> int:
    """``len(t.raw_data)`` without reading ``t.raw_data`` (which copies the bytes: hundreds of MB for a
    large weight): the tensor's serialized size less that of its other fields is the raw_data field's
    tag (1 byte), length (a varint) and bytes. Read for real when that does not add up, or when the
    tensor is small (copying its bytes then costs less than rebuilding its other fields), or under upb,
    whose ``ByteSize`` serializes the tensor, twice the bytes a read copies (a 100 MB weight: +191 MB
    while measured, +95 MB while read)."""
    if _UPB or t.ByteSize() <= _READ_RAW_BELOW:
        return len(t.raw_data)
    rest = onnx.TensorProto()
    for field in t.DESCRIPTOR.fields:
        if field.name == "raw_data":
            continue
        if field.is_repeated:
            values = getattr(t, field.name)
            if len(values):
                getattr(rest, field.name).extend(values)
        elif t.HasField(field.name):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(rest, field.name).CopyFrom(getattr(t, field.name))
            else:
                setattr(rest, field.name, getattr(t, field.name))
    field_bytes = t.ByteSize() - rest.ByteSize() - 1
    for prefix in range(1, 11):
        length = field_bytes - prefix
        if length >= 0 and _varint_size(length) == prefix:
            return length
    return len(t.raw_data)


def _tensor_problem(t: onnx.TensorProto) -> str | None:
    if t.data_type not in _KNOWN_TYPES:
        return f"element type {t.data_type} is not an ONNX type"
    if any(d < 0 for d in t.dims):
        return f"negative dimension in {list(t.dims)}"
    if t.data_location == TensorProto.EXTERNAL or t.external_data:
        return None
    count = math.prod(int(d) for d in t.dims)
    if t.HasField("raw_data"):
        have = _raw_length(t)
        if have:
            size = RAW_ITEMSIZE.get(t.data_type)
            if size is not None and have != count * size:
                return f"{have} bytes of raw_data for {count} elements of {size} bytes"
            return None
    typed = _TYPED_FIELD.get(t.data_type)
    if typed is not None:
        name, per = typed
        have = len(getattr(t, name))
        if have != count * per:
            return f"{have} values in {name} for {count} elements"
    return None


@functools.lru_cache(maxsize=1024)
def _schema_arity(op_type: str, version: int, domain: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((min, max) inputs, (min, max) outputs) of an operator's schema; None when onnx has none."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except Exception:
        return None
    return (schema.min_input, schema.max_input), (schema.min_output, schema.max_output)


def _check_arity(
    node: onnx.NodeProto, prefix: str, index: int, opsets: dict[str, int], path: str | None
) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ("", "ai.onnx.ml") or domain not in opsets:
        return
    arity = _schema_arity(node.op_type, opsets[domain], domain)
    if arity is None:  # unknown op or opset: onnxruntime reports those
        return
    n_in, n_out = len(node.input), len(node.output)
    ins, outs = arity
    if not ins[0] <= n_in <= ins[1] or not outs[0] <= n_out <= outs[1]:
        label = node_path(prefix, node, index)
        raise BadModelError(
            f"{node.op_type} has {n_in} inputs and {n_out} outputs; opset {opsets[domain]} takes "
            f"{ins[0]}..{ins[1]} inputs and {outs[0]}..{outs[1]} outputs",
            node=label,
            op_type=node.op_type,
            value=(n_in, n_out),
            path=path,
            rule="a node has as many inputs and outputs as its operator's schema allows",
        )


def _sparse_dense_bytes(sparse: onnx.SparseTensorProto) -> int:
    """The bytes of a sparse tensor's dense form, which onnxruntime makes when it loads the model (its
    dims alone say it: a 221-byte file may declare a 2 GB constant)."""
    count = math.prod(max(int(d), 0) for d in sparse.dims)
    return count * RAW_ITEMSIZE.get(sparse.values.data_type, 1)


def _held_sparse(attr: onnx.AttributeProto) -> list[onnx.SparseTensorProto]:
    """The sparse tensors an attribute holds (``sparse_tensor`` and ``sparse_tensors``)."""
    return [*([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []), *attr.sparse_tensors]


def _function_sparse(nodes: object, label: str, sparse: list[tuple[str, int]]) -> None:
    """Collect the sparse tensors the ``nodes`` of a model-local function (and their subgraphs) hold."""
    for node in nodes:  # type: ignore[attr-defined]
        for attr in node.attribute:
            held = _held_sparse(attr)
            sparse.extend(
                (f"{label}/{node.name or node.op_type}.{attr.name}", _sparse_dense_bytes(t)) for t in held
            )
            graphs = [attr.g] if attr.HasField("g") else []
            for graph in (*graphs, *attr.graphs):
                _function_sparse(graph.node, label, sparse)
                sparse.extend((t.values.name, _sparse_dense_bytes(t)) for t in graph.sparse_initializer)


def _check_graph(
    graph: onnx.GraphProto,
    prefix: str,
    path: str | None,
    opsets: dict[str, int],
    sparse: list[tuple[str, int]] | None = None,
) -> None:
    """Check ``graph`` and its subgraphs; ``sparse`` collects each sparse tensor's name and dense bytes."""
    sparse = [] if sparse is None else sparse
    tensors = [(t.name, t) for t in graph.initializer]
    sparse.extend((s.values.name, _sparse_dense_bytes(s)) for s in graph.sparse_initializer)
    for vi in (*graph.input, *graph.output):
        tp = vi.type
        if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type not in _KNOWN_TYPES:
            raise BadModelError(
                f"{vi.name!r} is declared as a tensor of element type {tp.tensor_type.elem_type}, which ONNX "
                "does not define",
                tensor=vi.name,
                value=int(tp.tensor_type.elem_type),
                path=path,
                rule="graph inputs and outputs have an ONNX element type",
            )
    arities: set[tuple[str, str, int, int]] = set()  # (domain, op, inputs, outputs) found within the schema
    # Attributes of a plain type (a number, a string, their lists) found to hold nothing to check further,
    # by their bytes and whether their node is a gather/scatter: equal bytes are equal fields, so another
    # such attribute passes alike (a chain's 20,000 ``axis`` attributes are checked once).
    plain: set[tuple[bytes, bool]] = set()
    for i, node in enumerate(graph.node):
        op_type = node.op_type
        arity = (node.domain, op_type, len(node.input), len(node.output))
        if arity not in arities:  # nodes of one op and arity pass or fail alike: each form is checked once
            _check_arity(node, prefix, i, opsets, path)
            arities.add(arity)
        attrs = node.attribute
        if not attrs:
            continue
        indexing = op_type in GATHER_SCATTER_INDEX_TYPES
        # The node's name is spelled out only where it is used: most nodes hold no tensor and no graph.
        held = False  # an attribute that may hold a graph: subgraphs() looks (one walk of the attributes)
        for attr in attrs:
            kind = attr.type
            key = (attr.SerializeToString(), indexing) if kind in _PLAIN_TYPES else None
            if key is not None and key in plain:
                continue
            held = held or kind in GRAPH_ATTRIBUTE_TYPES
            if attr.type == onnx.AttributeProto.UNDEFINED or (
                attr.name in _INT_ATTRIBUTES
                and node.op_type in GATHER_SCATTER_INDEX_TYPES
                and attr.type != onnx.AttributeProto.INT
            ):
                raise BadModelError(
                    f"attribute {attr.name!r} has no valid type (type {attr.type})",
                    node=node_path(prefix, node, i),
                    op_type=node.op_type,
                    value=attr.name,
                    path=path,
                    rule="every attribute has a declared type that its op expects",
                )
            if attr.HasField("t"):
                tensors.append((f"{node_path(prefix, node, i)}.{attr.name}", attr.t))
            if attr.tensors:
                label = node_path(prefix, node, i)
                tensors.extend((f"{label}.{attr.name}", t) for t in attr.tensors)
            if attr.HasField("sparse_tensor") or attr.sparse_tensors:
                label = f"{node_path(prefix, node, i)}.{attr.name}"
                sparse.extend((label, _sparse_dense_bytes(s)) for s in _held_sparse(attr))
            elif key is not None and not (
                attr.HasField("t") or attr.tensors or attr.HasField("g") or attr.graphs
            ):
                plain.add(key)
        if not held:
            continue
        for attr_name, sub in subgraphs(node):
            _check_graph(sub, subgraph_prefix(node_path(prefix, node, i), attr_name), path, opsets, sparse)
    for name, t in tensors:
        problem = _tensor_problem(t)
        if problem is not None:
            raise BadModelError(
                f"tensor {name!r} is damaged: {problem}",
                tensor=name,
                path=path,
                rule="a tensor's data matches its element type and dims",
            )


def check_well_formed(
    model: onnx.ModelProto, path: str | None = None, serialized: list[bytes] | None = None
) -> None:
    """Refuse a model that parses as protobuf but cannot be an ONNX model: names that are not UTF-8,
    tensors whose type is unknown or whose data does not match their dims, attributes without a type.

    onnx.checker lets some of these through, and they then break deep inside onnx or numpy helpers.
    ``serialized``: receives ``model.SerializeToString()`` where the UTF-8 check made it
    (:func:`~dmlshim.model.utf8_parse.strings_valid`).

    Raises:
        BadModelError: naming the damaged field, tensor or node.
    """
    # protobuf's parser checks the strings of all but the weights
    left_out = strings_valid(model, serialized)
    unsure = (model,) if left_out is None else left_out
    bad = _bad_string(model, "model") if any(_any_bad_string(m) for m in unsure) else None
    if bad is not None:
        raise BadModelError(
            f"the field {bad} is not valid UTF-8 text (a damaged or non-ONNX file)",
            path=path,
            value=bad,
            rule="ONNX string fields are UTF-8",
        )
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    sparse: list[tuple[str, int]] = []
    _check_graph(model.graph, "", path, opsets, sparse)
    for function in model.functions:
        _function_sparse(function.node, f"function {function.domain}.{function.name}", sparse)
    if sparse:
        names = [repr(name) for name, _ in sparse[:3]] + (["..."] if len(sparse) > 3 else [])
        # onnxruntime makes every sparse initializer and sparse Constant dense when it loads the model (and
        # so do dmlshim's folding and proofs): refused before any session is built, as external data is
        check_bytes(
            sum(size for _, size in sparse),
            what=f"the dense form of {len(sparse)} sparse tensor(s) ({', '.join(names)})",
            path=path,
            tensor=sparse[0][0] if len(sparse) == 1 else None,
        )
