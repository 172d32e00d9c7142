"""Checks on a loaded model that turn hostile or broken files into clear errors.

* external data must stay inside the model's folder (no absolute paths, no ``..``, no symlinks out);
* nodes whose operator neither ONNX nor onnxruntime defines (custom domains) are named;
* when onnxruntime refuses a model, the node that most likely caused it is named.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import TensorProto

from .errors import BadModelError
from .graph import node_path, subgraph_prefix, subgraphs, walk_nodes

__all__ = [
    "UnknownOperator",
    "all_tensors",
    "check_well_formed",
    "load_external_data",
    "ort_load_error",
    "unknown_operators",
]

logger = logging.getLogger(__name__)

EXTERNAL_DATA_RULE = "external data must lie in the model's folder"

# Domains whose operators onnxruntime implements without an onnx schema being registered in Python.
_ORT_DOMAINS = ("com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc")

_GATHER_SCATTER_INDEX_TYPES: dict[str, tuple[int, ...]] = {
    "Gather": (TensorProto.INT32, TensorProto.INT64),
    "GatherElements": (TensorProto.INT32, TensorProto.INT64),
    "Scatter": (TensorProto.INT32, TensorProto.INT64),
    "ScatterElements": (TensorProto.INT32, TensorProto.INT64),
    "GatherND": (TensorProto.INT64,),
    "ScatterND": (TensorProto.INT64,),
}


def all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Initializers and tensor attributes of a graph and of every subgraph."""
    found = list(graph.initializer)
    found.extend(s.values for s in graph.sparse_initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                found.append(attr.t)
            found.extend(attr.tensors)
            if attr.HasField("g"):
                found.extend(all_tensors(attr.g))
            for g in attr.graphs:
                found.extend(all_tensors(g))
    return found


def load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Load the external data of ``proto`` (read from ``path``) in place, refusing any file outside the
    model's folder.

    Raises:
        BadModelError: a location is absolute, leaves the folder (``..``, a symlink), or cannot be read.
    """
    from onnx import external_data_helper as edh

    tensors = [t for t in all_tensors(proto.graph) if edh.uses_external_data(t)]
    if not tensors:
        return
    base = path.resolve().parent
    for t in tensors:
        info = edh.ExternalDataInfo(t)
        location = info.location or ""
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(base):
            raise BadModelError(
                f"initializer {t.name!r} points at external data {location!r} outside the model's "
                "folder; refusing to read it",
                path=str(path),
                tensor=t.name,
                value=location,
                rule=EXTERNAL_DATA_RULE,
            )
    try:
        edh.load_external_data_for_model(proto, str(base))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise BadModelError(
            f"cannot read the model's external data: {exc}", path=str(path), rule=EXTERNAL_DATA_RULE
        ) from exc


@dataclass(frozen=True)
class UnknownOperator:
    """A node whose (domain, op_type) neither ONNX, onnxruntime nor a model-local function defines."""

    node: str
    domain: str
    op_type: str

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


def unknown_operators(model: onnx.ModelProto) -> list[UnknownOperator]:
    """Nodes whose operator is defined nowhere dmlshim or onnxruntime can find it, in graph order."""
    local = {(f.domain, f.name) for f in model.functions}
    found: list[UnknownOperator] = []
    for name, node in walk_nodes(model.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (domain, node.op_type) in local or domain in _ORT_DOMAINS:
            continue
        try:
            known = onnx.defs.has(node.op_type, domain)
        except Exception:  # onnx's binding raises on strange strings; treat as unknown
            known = False
        if not known:
            found.append(UnknownOperator(name, domain, node.op_type))
    return found


def _value_types(graph: onnx.GraphProto) -> dict[str, int]:
    types: dict[str, int] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
            types[vi.name] = int(vi.type.tensor_type.elem_type)
    for t in graph.initializer:
        types[t.name] = int(t.data_type)
    return types


def _type_name(elem_type: int) -> str:
    try:
        return f"tensor({str(TensorProto.DataType.Name(elem_type)).lower()})"
    except ValueError:
        return f"element type {elem_type}"


def ort_load_error(
    model: onnx.ModelProto, what: str, exc: BaseException, *, path: str | None = None
) -> BadModelError:
    """The BadModelError for onnxruntime refusing to load ``model``, naming the culprit node if it can.

    Args:
        model: the model onnxruntime was given.
        what: how to call it in the message ("the model", "CPU partition 0 ...").
        exc: onnxruntime's exception.
    """
    ort_text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    unknown = unknown_operators(model)
    if unknown:
        u = unknown[0]
        others = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        return BadModelError(
            f"operator {u.qualified} of domain {u.domain or 'ai.onnx'!r} is not defined by ONNX, onnxruntime "
            f"or a function of the model{others}, so onnxruntime cannot load {what} ({ort_text})",
            node=u.node,
            op_type=u.qualified,
            value=u.domain,
            path=path,
            rule="every operator must come from ai.onnx, ai.onnx.ml, com.microsoft or a model-local function",
        )
    types = _value_types(model.graph)
    for name, node in walk_nodes(model.graph):
        allowed = _GATHER_SCATTER_INDEX_TYPES.get(node.op_type)
        if allowed is None or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        elem = types.get(node.input[1])
        if elem is not None and elem not in allowed:
            want = " or ".join(_type_name(a) for a in allowed)
            return BadModelError(
                f"indices {node.input[1]!r} are {_type_name(elem)}; ONNX {node.op_type} takes {want}, so "
                f"onnxruntime cannot load {what} ({ort_text})",
                node=name,
                op_type=node.op_type,
                tensor=node.input[1],
                value=_type_name(elem),
                path=path,
                rule=f"{node.op_type} indices must be {want}",
            )
    return BadModelError(f"onnxruntime cannot load {what}: {exc}", path=path)


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
_RAW_ITEMSIZE: dict[int, int] = {
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


def _bad_string(message: Message, where: str) -> str | None:
    """The path of the first string field that is not valid UTF-8 (protobuf then hands back bytes)."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            values = value if field.is_repeated else [value]
            if any(not isinstance(v, str) for v in values):
                return f"{where}.{field.name}"
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            if not field.is_repeated:
                found = _bad_string(value, f"{where}.{field.name}")
                if found is not None:
                    return found
                continue
            for i, item in enumerate(value):
                found = _bad_string(item, f"{where}.{field.name}[{i}]")
                if found is not None:
                    return found
    return None


def _tensor_problem(t: onnx.TensorProto) -> str | None:
    if t.data_type not in _KNOWN_TYPES:
        return f"element type {t.data_type} is not an ONNX type"
    if any(d < 0 for d in t.dims):
        return f"negative dimension in {list(t.dims)}"
    if t.data_location == TensorProto.EXTERNAL or t.external_data:
        return None
    count = math.prod(int(d) for d in t.dims)
    if t.raw_data:
        size = _RAW_ITEMSIZE.get(t.data_type)
        if size is not None and len(t.raw_data) != count * size:
            return f"{len(t.raw_data)} bytes of raw_data for {count} elements of {size} bytes"
        return None
    typed = _TYPED_FIELD.get(t.data_type)
    if typed is not None:
        name, per = typed
        have = len(getattr(t, name))
        if have != count * per:
            return f"{have} values in {name} for {count} elements"
    return None


def _check_arity(node: onnx.NodeProto, label: str, opsets: dict[str, int], path: str | None) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ("", "ai.onnx.ml") or domain not in opsets:
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
    except Exception:  # unknown op or opset: onnxruntime reports those
        return
    n_in, n_out = len(node.input), len(node.output)
    ins = (schema.min_input, schema.max_input)
    outs = (schema.min_output, schema.max_output)
    if not ins[0] <= n_in <= ins[1] or not outs[0] <= n_out <= outs[1]:
        raise BadModelError(
            f"{node.op_type} has {n_in} inputs and {n_out} outputs; opset {opsets[domain]} takes "
            f"{ins[0]}..{ins[1]} inputs and {outs[0]}..{outs[1]} outputs",
            node=label,
            op_type=node.op_type,
            value=(n_in, n_out),
            path=path,
            rule="a node has as many inputs and outputs as its operator's schema allows",
        )


def _check_graph(graph: onnx.GraphProto, prefix: str, path: str | None, opsets: dict[str, int]) -> None:
    tensors = [(t.name, t) for t in graph.initializer]
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
    for i, node in enumerate(graph.node):
        label = node_path(prefix, node, i)
        _check_arity(node, label, opsets, path)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.UNDEFINED or (
                attr.name in _INT_ATTRIBUTES
                and node.op_type in _GATHER_SCATTER_INDEX_TYPES
                and attr.type != onnx.AttributeProto.INT
            ):
                raise BadModelError(
                    f"attribute {attr.name!r} has no valid type (type {attr.type})",
                    node=label,
                    op_type=node.op_type,
                    value=attr.name,
                    path=path,
                    rule="every attribute has a declared type that its op expects",
                )
            if attr.HasField("t"):
                tensors.append((f"{label}.{attr.name}", attr.t))
            tensors.extend((f"{label}.{attr.name}", t) for t in attr.tensors)
        for attr_name, sub in subgraphs(node):
            _check_graph(sub, subgraph_prefix(label, attr_name), path, opsets)
    for name, t in tensors:
        problem = _tensor_problem(t)
        if problem is not None:
            raise BadModelError(
                f"tensor {name!r} is damaged: {problem}",
                tensor=name,
                path=path,
                rule="a tensor's data matches its element type and dims",
            )


def check_well_formed(model: onnx.ModelProto, path: str | None = None) -> None:
    """Refuse a model that parses as protobuf but cannot be an ONNX model: names that are not UTF-8,
    tensors whose type is unknown or whose data does not match their dims, attributes without a type.

    onnx.checker lets some of these through, and they then break deep inside onnx or numpy helpers.

    Raises:
        BadModelError: naming the damaged field, tensor or node.
    """
    bad = _bad_string(model, "model")
    if bad is not None:
        raise BadModelError(
            f"the field {bad} is not valid UTF-8 text (a damaged or non-ONNX file)",
            path=path,
            value=bad,
            rule="ONNX string fields are UTF-8",
        )
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    _check_graph(model.graph, "", path, opsets)
