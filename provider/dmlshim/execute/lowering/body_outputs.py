"""The outputs a custom op computes in If, Loop and Scan bodies, declared as onnxruntime sees them.

onnxruntime infers a body output's shape from the node that computes it and merges it with the body's
declaration; a custom op's output has no shape to infer, so in the lowered model the declaration alone
would stand. onnxruntime holds a body output to that shape: an If allocates a fully static one before the
branch runs (and refuses the run when the branch computes another), and a Loop that runs no iteration
returns its scan outputs at it. So each such output of the lowered model is declared as onnxruntime would
see the caller's model's: ONNX's inference of the node's output (the caller's declarations of the graph
inputs, as onnxruntime reads them for a copy lowered at a fed rank:
:mod:`dmlshim.execute.engines.fed_rank`) merged with the
body's declaration as onnxruntime merges them (a conflicting dimension becomes unknown, a conflicting rank
leaves no shape).

A custom op never writes a body output of fully static shape itself: a ``Reshape`` to its own shape after
it does (an ``Identity`` there onnxruntime's optimizer removes). onnxruntime-extensions aborts the process
when an output allocated before the run has another shape than its op computes; onnxruntime's ``Reshape``
refuses the run as onnxruntime refuses the caller's model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import numpy as np
import onnx
from onnx import helper

from ...graph import value_names
from ...model.weightless import without_weights
from ..custom_ops.types import CUSTOM_DOMAIN

logger = logging.getLogger(__name__)

__all__ = ["BodyOutputs", "body_output_types", "declare_body_outputs"]

BodyKey = tuple[tuple[tuple[str, ...], str, int], ...]
BodyOutputs = Mapping[BodyKey, Mapping[str, onnx.TypeProto]]
"""The type onnxruntime sees for each output of each If/Loop/Scan body, by the body's place: one
``(owner node's outputs, attribute, index)`` per level, from the top-level graph down (the outputs as a
tuple: names may hold any character, so joined ones could name two owners)."""


def _bodies(graph: onnx.GraphProto, key: BodyKey = ()) -> Iterator[tuple[BodyKey, onnx.GraphProto]]:
    for node in graph.node:
        owner = tuple(node.output)
        for attr in node.attribute:
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for index, body in enumerate(bodies):
                here = (*key, (owner, attr.name, index))
                yield here, body
                yield from _bodies(body, here)


def _merged(inferred: onnx.TypeProto, declared: onnx.TypeProto) -> onnx.TypeProto:
    """``inferred`` merged with ``declared`` as onnxruntime merges a node's output with a declaration:
    the more specific of each dimension, or, where they conflict, what they share."""
    out = onnx.TypeProto()
    out.CopyFrom(inferred)
    if not declared.tensor_type.HasField("shape"):
        return out
    if not inferred.tensor_type.HasField("shape"):
        out.tensor_type.shape.CopyFrom(declared.tensor_type.shape)
        return out
    dims_i, dims_d = inferred.tensor_type.shape.dim, declared.tensor_type.shape.dim
    if len(dims_i) != len(dims_d):
        out.tensor_type.ClearField("shape")
        return out
    conflict = any(
        a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value != b.dim_value
        for a, b in zip(dims_i, dims_d, strict=True)
    )
    shape = out.tensor_type.shape
    del shape.dim[:]
    for a, b in zip(dims_i, dims_d, strict=True):
        dim = shape.dim.add()
        if conflict:
            if a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value == b.dim_value:
                dim.dim_value = a.dim_value
        elif a.HasField("dim_value") or b.HasField("dim_value"):
            dim.dim_value = a.dim_value if a.HasField("dim_value") else b.dim_value
        elif a.dim_param or b.dim_param:
            dim.dim_param = a.dim_param or b.dim_param
    return out


def body_output_types(model: onnx.ModelProto) -> BodyOutputs:
    """What onnxruntime sees for the tensor outputs of ``model``'s bodies (empty when there is no body, or
    ONNX's inference fails: the lowered bodies then stay as declared). ONNX infers without data
    propagation (onnxruntime runs none there) and without the bodies' declared output shapes (onnxruntime
    merges those after inferring)."""
    if not any(True for _ in _bodies(model.graph)):
        return {}
    bare = without_weights(model)
    if bare is model:
        bare = onnx.ModelProto()
        bare.CopyFrom(model)
    declared: dict[BodyKey, dict[str, onnx.TypeProto]] = {}
    for key, body in _bodies(bare.graph):
        declared[key] = {}
        for out in body.output:
            if out.type.HasField("tensor_type"):
                tp = onnx.TypeProto()
                tp.CopyFrom(out.type)
                declared[key][out.name] = tp
                out.type.tensor_type.ClearField("shape")
    if bare.ir_version >= 4:  # before, every initializer is a graph input too
        _outer_constants_inside(bare.graph, {})
    try:
        inferred = onnx.shape_inference.infer_shapes(bare)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as exc:
        logger.debug("the bodies' outputs stay as declared: %s", exc)
        return {}
    found: dict[BodyKey, dict[str, onnx.TypeProto]] = {}
    for key, body in _bodies(inferred.graph):
        mine = declared.get(key, {})
        found[key] = {
            o.name: _merged(o.type, mine[o.name])
            for o in body.output
            if o.name in mine
            and o.type.HasField("tensor_type")
            and o.type.tensor_type.elem_type == mine[o.name].tensor_type.elem_type
        }
    return found


OUTER_CONSTANT_MAX_ELEMENTS = 1024
"""Largest outer initializer copied into a body for inference (axes, shapes; not weights)."""


def _outer_constants_inside(graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto]) -> None:
    """Copy into each body of ``graph`` the small initializers of enclosing graphs it reads, in place (on
    the copy inferred): onnx's inference reads an initializer's value only in its own graph, onnxruntime's
    in enclosing ones too (a Loop body's ``ReduceSum`` whose axes are a top-level initializer: onnxruntime
    knows its output's shape, onnx did not). Initializers a caller may feed are not constants."""
    fed = {v.name for v in graph.input}
    here = dict(outer)
    here.update((t.name, t) for t in graph.initializer if t.name not in fed)
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                local = {v.name for v in body.input} | {t.name for t in body.initializer}
                local.update(o for n in body.node for o in n.output)
                reads = {i for n in body.node for i in n.input} - local
                for name in sorted(reads):
                    tensor = here.get(name)
                    if tensor is not None and int(np.prod(tensor.dims)) <= OUTER_CONSTANT_MAX_ELEMENTS:
                        body.initializer.add().CopyFrom(tensor)
                _outer_constants_inside(body, {n: t for n, t in here.items() if n not in local})


def _static(tp: onnx.TypeProto) -> bool:
    shape = tp.tensor_type.shape
    return tp.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim)


def declare_body_outputs(model: onnx.ModelProto, types: BodyOutputs) -> int:
    """Declare each body output of the lowered ``model`` that a node computes as ``types`` (from
    :func:`body_output_types` of the caller's model) gives it, in place: those a custom op computes, and
    those computed past one (onnxruntime infers nothing through a custom op, so a ReduceSum of a lowered
    Gather would have no shape where onnxruntime gives the caller's one). A fully static output a custom
    op computes is written by a ``Reshape`` after it. Returns how many outputs were declared."""
    count = 0
    taken: set[str] | None = None  # every name of the model: a body may read any outer one
    for key, body in _bodies(model.graph):
        known = types.get(key)
        if not known:
            continue
        producers = {name: node for node in body.node for name in node.output if name}
        if taken is None:
            taken = value_names(model.graph)
        for out in body.output:
            tp, producer = known.get(out.name), producers.get(out.name)
            if tp is None or producer is None:
                continue
            out.type.CopyFrom(tp)
            count += 1
            if producer.domain == CUSTOM_DOMAIN and _static(tp):
                _written_by_onnxruntime(body, producer, out.name, taken)
    return count


def _written_by_onnxruntime(
    body: onnx.GraphProto, producer: onnx.NodeProto, name: str, taken: set[str]
) -> None:
    fresh, shape = f"{name}_computed", f"{name}_computed_shape"
    while fresh in taken or shape in taken:
        fresh, shape = fresh + "_", shape + "_"
    taken.update((fresh, shape))
    for i, o in enumerate(producer.output):
        if o == name:
            producer.output[i] = fresh
    for node in body.node:  # the body's own readers of the value read the custom op's output
        for i, o in enumerate(node.input):
            if o == name:
                node.input[i] = fresh
    # named after the model's node, which a refusal of the run then names
    source = next((a.s.decode() for a in producer.attribute if a.name == "node_name" and a.s), producer.name)
    label = f"{source} (output {name} as declared)"
    body.node.append(helper.make_node("Shape", [fresh], [shape], name=f"{label} shape"))
    body.node.append(helper.make_node("Reshape", [fresh, shape], [name], name=label))
