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

This reading holds where onnx's inference meets no error and knows every operator; elsewhere (an
intermediate ``value_info`` inference contradicts, contrib operators, model-local functions, subgraphs)
onnxruntime's acceptance session is asked instead (:mod:`dmlshim.model.ort_outputs`), and what it answers
replaces this reading in the session's ``get_outputs()``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper
import onnx.shape_inference

__all__ = [
    "InferredGraph",
    "dim_params",
    "merge_shapes",
    "resolved_outputs",
    "source_outputs",
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
    found = None  # the last entry for the domain, as onnxruntime reads opset_import
    for op in model.opset_import:
        if op.domain == domain or (domain in ("", "ai.onnx") and op.domain in ("", "ai.onnx")):
            found = int(op.version)
    return found


@dataclass(frozen=True)
class InferredGraph:
    """What the producers of graph outputs are inferred from, indexed once: every value's type in onnx's
    inference, the values of initializers held in the model and of ``Constant`` nodes, each value's
    producing node."""

    types: Mapping[str, onnx.TypeProto]
    data: Mapping[str, onnx.TensorProto]
    producers: Mapping[str, onnx.NodeProto]

    @classmethod
    def of(cls, inferred: onnx.ModelProto, outputs: frozenset[str] | None = None) -> InferredGraph:
        """The index for inferring the producers of ``outputs`` (only their inputs are looked up; every
        node's when None)."""
        graph = inferred.graph
        producers = {
            name: node for node in graph.node for name in node.output if outputs is None or name in outputs
        }
        wanted = {name for node in producers.values() for name in node.input if name}
        shapes = []
        for node in graph.node:
            kind = node.op_type in ("Shape", "Constant") and node.domain in ("", "ai.onnx")
            if kind and node.output and node.output[0] in wanted:
                shapes.append(node)
        looked_up = wanted | {node.input[0] for node in shapes if node.op_type == "Shape"}
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, onnx.TensorProto] = {}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            if vi.name in looked_up and vi.name not in types and vi.type.WhichOneof("value"):
                types[vi.name] = vi.type
        for tensor in graph.initializer:
            if tensor.name not in looked_up:
                continue
            if tensor.name not in types:
                types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
            if tensor.data_location != onnx.TensorProto.EXTERNAL and tensor.name in wanted:
                data[tensor.name] = tensor
        for node in shapes:
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None:
                    data[node.output[0]] = value
                continue
            # onnxruntime's data propagation gives a Shape's readers its value
            shape = _static_shape(types.get(node.input[0]), node)
            if shape is not None:
                data[node.output[0]] = onnx.numpy_helper.from_array(
                    np.asarray(shape, np.int64), node.output[0]
                )
        return cls(types, data, producers)


def _static_shape(tp: onnx.TypeProto | None, node: onnx.NodeProto) -> list[int] | None:
    """The value of ``Shape`` node ``node`` when its input's type ``tp`` is fully static, else None."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    shape = tp.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in shape):
        return None
    dims = [d.dim_value for d in shape]
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return dims[start:end]


def _producer_inference(
    model: onnx.ModelProto, known: InferredGraph, node: onnx.NodeProto
) -> dict[str, onnx.TypeProto] | None:
    """The types onnx's inference gives ``node``'s outputs from its inputs' types in ``known`` (the
    declarations of the outputs left out); None when it cannot say (no schema, a subgraph, an error)."""
    version = _opset(model, node.domain)
    if node.op_type == "If" and node.domain in ("", "ai.onnx"):
        return _if_outputs(node)
    if version is None or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return None
    wanted = {name for name in node.input if name}
    if not wanted <= known.types.keys():
        return None
    types = {name: known.types[name] for name in wanted}
    if any(tp.WhichOneof("value") == "sequence_type" for tp in types.values()):
        return None  # onnxruntime does not carry a sequence's element shape into its readers
    data = {name: known.data[name] for name in wanted if name in known.data}
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        return onnx.shape_inference.infer_node_outputs(
            schema, node, types, data, opset_imports=list(model.opset_import), ir_version=model.ir_version
        )
    except _INFERENCE_ERRORS as exc:
        logger.debug("node %r (%s) not inferred alone: %s", node.name, node.op_type, exc)
        return None


def _if_outputs(node: onnx.NodeProto) -> dict[str, onnx.TypeProto] | None:
    """onnx's ``If`` inference from its branches as inferred: each output the union of the two branches'
    (a dimension the branches disagree on unknown, a rank they disagree on no shape)."""
    branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    then, other = branches.get("then_branch"), branches.get("else_branch")
    if then is None or other is None or not len(then.output) == len(other.output) == len(node.output):
        return None
    result: dict[str, onnx.TypeProto] = {}
    for name, a, b in zip(node.output, then.output, other.output, strict=True):
        if a.type.WhichOneof("value") != "tensor_type" or b.type.WhichOneof("value") != "tensor_type":
            return None
        union = onnx.TypeProto()
        union.CopyFrom(a.type)
        if not b.type.tensor_type.HasField("shape"):
            union.tensor_type.ClearField("shape")
        elif union.tensor_type.HasField("shape"):
            _union(b.type.tensor_type.shape, union.tensor_type)
        result[name] = union
    return result


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
    if declared.WhichOneof("value") == "optional_type" and inferred.WhichOneof("value") == "optional_type":
        merged.optional_type.elem_type.CopyFrom(
            merge_shapes(declared.optional_type.elem_type, inferred.optional_type.elem_type)
        )
        return merged
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


def source_outputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The graph outputs onnxruntime reports from their source, whatever they are declared as: a graph
    input (as the input is declared) or an initializer (its own type and shape), by name. (A ``Constant``
    node's output, which onnxruntime's graph holds as an initializer, is :func:`resolved_outputs`'.)"""
    graph = model.graph
    names = {out.name for out in graph.output}
    found: dict[str, onnx.ValueInfoProto] = {}
    for vi in graph.input:
        if vi.name in names:
            found.setdefault(vi.name, vi)
    for tensor in graph.initializer:
        if tensor.name in names and tensor.name not in found:
            found[tensor.name] = onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)
            )
    return found


def resolved_outputs(
    model: onnx.ModelProto, inferred: onnx.ModelProto, outputs: Mapping[str, onnx.ValueInfoProto]
) -> dict[str, onnx.TypeProto]:
    """The graph outputs ``outputs`` (each with a type) as onnxruntime's first resolve types them: each
    producer inferred alone from its inputs and merged into the declaration (:func:`merge_shapes`). An
    output whose type so differs from onnx's (which keeps a declared size) is carried into the nodes that
    read it, and those are inferred again. An output whose producer cannot be inferred alone is left out
    (the caller keeps onnx's answer). A declared ``value_info`` is not merged so (telling whether one is
    contradicted costs another whole-model inference): onnx's answer, the declaration, is kept."""
    graph = inferred.graph
    declared = outputs
    onnx_types = {v.name: v.type for v in graph.output if v.name in declared}
    index = InferredGraph.of(inferred, frozenset(declared))
    producers = list({id(node): node for node in index.producers.values()}.values())  # in graph order
    result, changed = _resolve(model, producers, index, declared, onnx_types, outputs.keys())
    if changed:  # a value typed otherwise than onnx's: every node is walked, its readers inferred again
        full = InferredGraph.of(inferred)
        types = dict(full.types)
        known = InferredGraph(types, full.data, full.producers)
        result, _ = _resolve(model, graph.node, known, declared, onnx_types, outputs.keys(), types)
    return result


def _resolve(
    model: onnx.ModelProto,
    nodes: Iterable[onnx.NodeProto],
    known: InferredGraph,
    declared: Mapping[str, onnx.ValueInfoProto],
    onnx_types: Mapping[str, onnx.TypeProto],
    outputs: Collection[str],
    types: dict[str, onnx.TypeProto] | None = None,
) -> tuple[dict[str, onnx.TypeProto], set[str]]:
    """:func:`resolved_outputs`' walk of ``nodes``: the outputs' types and the values typed otherwise
    than onnx's. ``types`` (``known.types``, updated as the walk goes), when given: the readers of a
    value so typed are inferred again."""
    changed: set[str] = set()
    result: dict[str, onnx.TypeProto] = {}
    for node in nodes:
        reads_changed = types is not None and bool(changed) and any(name in changed for name in node.input)
        if not reads_changed and not any(name in declared for name in node.output):
            continue
        value = _constant(node)
        if value is not None:  # onnxruntime holds it as an initializer: its type, whatever is declared
            tp = onnx.helper.make_tensor_type_proto(value.data_type, list(value.dims))
            if node.output[0] in outputs:
                result[node.output[0]] = tp
            if onnx_types.get(node.output[0]) != tp:
                changed.add(node.output[0])
                if types is not None:
                    types[node.output[0]] = tp
            continue
        inferred = _producer_inference(model, known, node)
        for name in node.output:
            tp = None if inferred is None else inferred.get(name)
            if tp is None or not tp.WhichOneof("value"):
                continue
            if name in declared:
                tp = merge_shapes(declared[name].type, tp)
                if name in outputs:
                    result[name] = tp
                before = onnx_types.get(name)
            else:
                before = known.types.get(name)
            if before is None or before != tp:
                changed.add(name)
                if types is not None:
                    types[name] = tp
    return result, changed


def _constant(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """A ``Constant`` node's ``value`` tensor (None for another node or attribute)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    return next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)


def dim_params(graph: onnx.GraphProto) -> frozenset[str]:
    """Every dimension name ``graph``'s declarations use."""
    names: set[str] = set()
    for v in (*graph.input, *graph.output, *graph.value_info):
        if v.type.HasField("tensor_type"):
            names.update(d.dim_param for d in v.type.tensor_type.shape.dim if d.dim_param)
    return frozenset(names)


def without_invented_dims(
    value: onnx.ValueInfoProto, ours: frozenset[str] | Callable[[], frozenset[str]]
) -> onnx.ValueInfoProto:
    """``value`` with the dimension names shape inference made up (``unk__0``...) left unnamed, as
    onnxruntime reports them (None); names the model itself uses (``ours``: :func:`dim_params`, or what
    gives it, asked only when a name looks made up) are kept."""
    if not value.type.HasField("tensor_type"):
        return value

    def invented(d: onnx.TensorShapeProto.Dimension) -> bool:
        name = d.dim_param
        if not name or _INVENTED_DIM.fullmatch(name) is None:
            return False
        return name not in (ours() if callable(ours) else ours)

    if not any(invented(d) for d in value.type.tensor_type.shape.dim):
        return value
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    for d in copy.type.tensor_type.shape.dim:
        if invented(d):
            d.ClearField("dim_param")
    return copy
