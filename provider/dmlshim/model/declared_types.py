"""A graph output's type as onnxruntime reports it: the declared type merged with the inferred one.

onnxruntime resolves a graph by inferring each node's outputs and merging the result into the type the
model declares for the value (``Graph::InferAndVerifyTypeMatch``, ``MergeShapeInfo``). The merge is
onnx's ``mergeInShapeInfo``: a dimension the declaration leaves unknown or symbolic takes the inferred size,
a declared size is kept. When the two disagree (both sizes, different; or different ranks) onnxruntime's
default (``session.strict_shape_type_inference`` off) is its *lenient* merge, ``UnionShapeInfo``, on the
declaration as the strict merge left it: a dimension the two disagree on becomes unknown (``None``), a rank
mismatch leaves no shape (``[]``). onnx's own inference keeps the declared size instead, so the inferred
model cannot answer this; the node producing the output is inferred again, alone.

onnxruntime infers again whenever one of its graph optimizations changes the graph; the merge then starts
from the lenient answer, and the dimension comes back with the inferred size. dmlshim reports the first
resolve's answer (what onnxruntime reports when no optimization rewrites the graph, as at
``ORT_DISABLE_ALL``): never a size the run contradicts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
import onnx.defs
import onnx.shape_inference

__all__ = [
    "InferredGraph",
    "dim_params",
    "merge_shapes",
    "merged_output",
    "source_output",
    "without_invented_dims",
]

logger = logging.getLogger(__name__)

_INFERENCE_ERRORS = (
    onnx.shape_inference.InferenceError,
    onnx.defs.SchemaError,
    onnx.checker.ValidationError,
    ValueError,
    RuntimeError,
    KeyError,
    TypeError,
)

_INVENTED_DIM = re.compile(r"unk__\d+")
"""The names onnx's shape inference makes up for a dimension it cannot name (onnxruntime reports None)."""


def _opset(model: onnx.ModelProto, domain: str) -> int | None:
    for op in model.opset_import:
        if op.domain == domain or (domain in ("", "ai.onnx") and op.domain in ("", "ai.onnx")):
            return int(op.version)
    return None


@dataclass(frozen=True)
class InferredGraph:
    """What the producers of graph outputs are inferred from, indexed once: every value's type in onnx's
    inference, the values of initializers held in the model and of ``Constant`` nodes, each value's
    producing node."""

    types: Mapping[str, onnx.TypeProto]
    data: Mapping[str, onnx.TensorProto]
    producers: Mapping[str, onnx.NodeProto]

    @classmethod
    def of(cls, inferred: onnx.ModelProto, outputs: frozenset[str]) -> InferredGraph:
        """The index for inferring the producers of ``outputs`` (only their inputs are looked up)."""
        graph = inferred.graph
        producers = {name: node for node in graph.node for name in node.output if name in outputs}
        wanted = {name for node in producers.values() for name in node.input if name}
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, onnx.TensorProto] = {}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            if vi.name in wanted and vi.name not in types and vi.type.WhichOneof("value"):
                types[vi.name] = vi.type
        for tensor in graph.initializer:
            if tensor.name not in wanted:
                continue
            if tensor.name not in types:
                types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                data[tensor.name] = tensor
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output[0] in wanted:
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None:
                    data[node.output[0]] = value
        return cls(types, data, producers)


def _producer_inference(
    model: onnx.ModelProto, known: InferredGraph, node: onnx.NodeProto
) -> dict[str, onnx.TypeProto] | None:
    """The types onnx's inference gives ``node``'s outputs from its inputs' types in ``known`` (the
    declarations of the outputs left out); None when it cannot say (no schema, a subgraph, an error)."""
    version = _opset(model, node.domain)
    if version is None or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return None
    wanted = {name for name in node.input if name}
    if not wanted <= known.types.keys():
        return None
    types = {name: known.types[name] for name in wanted}
    data = {name: known.data[name] for name in wanted if name in known.data}
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        return onnx.shape_inference.infer_node_outputs(
            schema, node, types, data, opset_imports=list(model.opset_import), ir_version=model.ir_version
        )
    except _INFERENCE_ERRORS as exc:
        logger.debug("node %r (%s) not inferred alone: %s", node.name, node.op_type, exc)
        return None


def _merge_dim(source: onnx.TensorShapeProto.Dimension, target: onnx.TensorShapeProto.Dimension) -> bool:
    """onnx's ``mergeInDimensionInfo`` of inferred ``source`` into declared ``target``; False on a
    conflict (both sizes, different), ``target`` then unchanged."""
    if source.HasField("dim_value"):
        if target.HasField("dim_value"):
            return target.dim_value == source.dim_value
        target.dim_value = source.dim_value
    elif (
        not target.HasField("dim_value") and not target.HasField("dim_param") and source.HasField("dim_param")
    ):
        target.dim_param = source.dim_param
    return True


def _union(source: onnx.TensorShapeProto, target: onnx.TypeProto.Tensor) -> None:
    """onnx's ``UnionShapeInfo``: onnxruntime's lenient merge after a conflict."""
    if len(source.dim) != len(target.shape.dim):
        target.ClearField("shape")
        return
    for s, t in zip(source.dim, target.shape.dim, strict=True):
        if s.HasField("dim_value"):
            same = t.HasField("dim_value") and t.dim_value == s.dim_value
        elif s.HasField("dim_param"):
            same = t.HasField("dim_param") and t.dim_param == s.dim_param
        else:
            same = not (t.HasField("dim_value") or t.HasField("dim_param"))
        if not same:
            t.ClearField("dim_value")
            t.ClearField("dim_param")


def merge_shapes(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> onnx.TypeProto:
    """onnxruntime's ``MergeShapeInfo`` (lenient) of an inferred tensor type into a declared one: a copy
    of ``declared`` with the shape merged. Types other than tensors are returned as declared."""
    merged = onnx.TypeProto()
    merged.CopyFrom(declared)
    if declared.WhichOneof("value") != "tensor_type" or inferred.WhichOneof("value") != "tensor_type":
        return merged
    source, target = inferred.tensor_type, merged.tensor_type
    if not source.HasField("shape"):
        return merged
    if not target.HasField("shape"):
        target.shape.CopyFrom(source.shape)
        return merged
    if len(source.shape.dim) == len(target.shape.dim) and all(
        _merge_dim(s, t) for s, t in zip(source.shape.dim, target.shape.dim, strict=True)
    ):
        return merged
    # a conflict: onnxruntime's lenient merge, on the declaration as far as the strict merge got
    _union(source.shape, target)
    return merged


def source_output(model: onnx.ModelProto, out: onnx.ValueInfoProto) -> onnx.ValueInfoProto | None:
    """Graph output ``out`` as onnxruntime reports it when it is a graph input (as the input is declared)
    or an initializer (its own type and shape, whatever the output declares); else None."""
    graph = model.graph
    for vi in graph.input:
        if vi.name == out.name:
            return vi
    for tensor in graph.initializer:
        if tensor.name == out.name:
            return onnx.helper.make_tensor_value_info(out.name, tensor.data_type, list(tensor.dims))
    return None


def merged_output(
    model: onnx.ModelProto, known: InferredGraph, out: onnx.ValueInfoProto
) -> onnx.ValueInfoProto | None:
    """Graph output ``out`` (declared with a type) as onnxruntime resolves it, or None when its producer
    cannot be inferred alone (the caller keeps onnx's answer then)."""
    node = known.producers.get(out.name)
    if node is None:
        return None
    types = _producer_inference(model, known, node)
    if types is None or out.name not in types or not types[out.name].WhichOneof("value"):
        return None
    result = onnx.ValueInfoProto()
    result.CopyFrom(out)
    result.type.CopyFrom(merge_shapes(out.type, types[out.name]))
    return result


def dim_params(graph: onnx.GraphProto) -> frozenset[str]:
    """Every dimension name ``graph``'s declarations use."""
    names: set[str] = set()
    for v in (*graph.input, *graph.output, *graph.value_info):
        if v.type.HasField("tensor_type"):
            names.update(d.dim_param for d in v.type.tensor_type.shape.dim if d.dim_param)
    return frozenset(names)


def without_invented_dims(value: onnx.ValueInfoProto, ours: frozenset[str]) -> onnx.ValueInfoProto:
    """``value`` with the dimension names shape inference made up (``unk__0``...) left unnamed, as
    onnxruntime reports them (None); names the model itself uses are kept."""
    if not value.type.HasField("tensor_type"):
        return value

    def invented(d: onnx.TensorShapeProto.Dimension) -> bool:
        name = d.dim_param
        return bool(name) and name not in ours and _INVENTED_DIM.fullmatch(name) is not None

    if not any(invented(d) for d in value.type.tensor_type.shape.dim):
        return value
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    for d in copy.type.tensor_type.shape.dim:
        if invented(d):
            d.ClearField("dim_param")
    return copy
