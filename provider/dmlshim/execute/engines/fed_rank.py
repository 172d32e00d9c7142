"""Graph inputs declared rank 0 and fed at another rank.

onnxruntime checks no shape against a rank-0 declaration: a feed of any rank runs, and every node after it
computes at the fed rank. A model lowered for the declared scalar would restore a scalar where onnxruntime
keeps the fed rank, so the custom-op engine lowers a copy of the model whose such inputs carry the fed rank
(each dimension symbolic) and runs that for these feeds. An initializer declared as a graph input of no
shape is the same case at any fed shape (lowering takes the initializer's dims as its static shape). The
lowered copy that onnxruntime runs declares those inputs as the caller's model does (:func:`declared_again`):
onnxruntime folds a ``Shape`` or ``Size`` of a rank-0 input from its declaration (``[]`` and 1 at the
default optimization level), which a fed-rank declaration would change. So are the outputs of its If,
Loop and Scan bodies (:func:`subgraph_output_types`, :func:`declare_subgraph_outputs`): onnxruntime infers
them from the declaration, and a custom op's output has no shape to infer, so the copy declares them as
onnxruntime's inference of the caller's model gives them. onnxruntime holds a body's output to that shape:
an If allocates a fully static one before running the branch (and refuses the run when the branch
computes another, as onnxruntime refuses the caller's model), and a Loop that runs no iteration returns
its scan outputs at it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import logging

import numpy as np
import onnx

from ...model.weightless import without_weights
from ..custom_ops.types import CUSTOM_DOMAIN

logger = logging.getLogger(__name__)

__all__ = [
    "FedRanks",
    "SubgraphOutputs",
    "declare_subgraph_outputs",
    "declared_again",
    "fed_ranks",
    "rank_zero_inputs",
    "shapeless_initializers",
    "subgraph_output_types",
    "with_fed_ranks",
]

FedRanks = tuple[tuple[str, int], ...]
"""``((input name, fed rank), ...)`` for the rank-0 inputs fed at another rank (and the shapeless
initializers fed at any), in name order."""


def rank_zero_inputs(model: onnx.ModelProto) -> frozenset[str]:
    """The graph inputs whose declared tensor shape has no dimension (an initializer declared as an input
    too: onnxruntime takes a feed of it at any rank as well)."""
    found = set()
    for value in model.graph.input:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            continue
        if tensor.HasField("shape") and len(tensor.shape.dim) == 0:
            found.add(value.name)
    return frozenset(found)


def shapeless_initializers(model: onnx.ModelProto) -> frozenset[str]:
    """The initializers declared as graph inputs of no shape: onnxruntime takes a feed of any shape for
    them, where lowering reads the initializer's dims as the input's static shape."""
    initializers = {t.name for t in model.graph.initializer}
    return frozenset(
        value.name
        for value in model.graph.input
        if value.name in initializers
        and value.type.HasField("tensor_type")
        and not value.type.tensor_type.HasField("shape")
    )


def fed_ranks(
    names: frozenset[str], feeds: Mapping[str, object], any_rank: frozenset[str] = frozenset()
) -> FedRanks:
    """The inputs among ``names`` that ``feeds`` gives at a rank other than 0, and those among
    ``any_rank`` that ``feeds`` gives at all (empty: none)."""
    ranks = []
    for name in sorted(names | any_rank):
        value = feeds.get(name)
        if value is None:
            continue
        ndim = getattr(value, "ndim", None)
        if ndim is None:
            ndim = np.ndim(value)
        if ndim or name in any_rank:
            ranks.append((name, int(ndim)))
    return tuple(ranks)


def with_fed_ranks(model: onnx.ModelProto, ranks: FedRanks) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs named in ``ranks`` are declared at that rank, dims symbolic."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    wanted = dict(ranks)
    for value in copy.graph.input:
        rank = wanted.get(value.name)
        if rank is None:
            continue
        shape = value.type.tensor_type.shape
        shape.SetInParent()  # a shapeless input declared at rank 0 has a shape of no dimension
        del shape.dim[:]
        for k in range(rank):
            shape.dim.add().dim_param = f"{value.name}_fed_dim{k}"
    return copy


def declared_again(model: onnx.ModelProto, declarations: Sequence[onnx.ValueInfoProto]) -> None:
    """Declare graph inputs of ``model`` (a lowered :func:`with_fed_ranks` copy) as ``declarations`` (the
    caller's model's) do again, in place."""
    types = {value.name: value.type for value in declarations}
    for value in model.graph.input:
        if value.name in types:
            value.type.CopyFrom(types[value.name])


SubgraphKey = tuple[tuple[str, str, int], ...]
SubgraphOutputs = Mapping[SubgraphKey, Mapping[str, onnx.TypeProto]]
"""The type of each output of each If/Loop/Scan body, by the body's place: one ``(node's outputs, attribute,
index)`` per level, from the top-level graph down."""


def _subgraphs(graph: onnx.GraphProto, key: SubgraphKey = ()) -> Iterator[tuple[SubgraphKey, onnx.GraphProto]]:
    for node in graph.node:
        owner = ",".join(node.output)
        for attr in node.attribute:
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for index, body in enumerate(bodies):
                here = (*key, (owner, attr.name, index))
                yield here, body
                yield from _subgraphs(body, here)


def subgraph_output_types(model: onnx.ModelProto) -> SubgraphOutputs:
    """The types ONNX's shape inference (no data propagation: onnxruntime runs none across bodies) gives
    the outputs of ``model``'s bodies, as declared (empty when inference fails or there is no body)."""
    if not any(True for _ in _subgraphs(model.graph)):
        return {}
    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model))
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as exc:
        logger.debug("bodies' outputs left as the lowering declares them: %s", exc)
        return {}
    return {
        key: {o.name: o.type for o in body.output if o.type.HasField("tensor_type")}
        for key, body in _subgraphs(inferred.graph)
    }


def declare_subgraph_outputs(model: onnx.ModelProto, types: SubgraphOutputs) -> None:
    """Give the outputs of the bodies of ``model`` (a lowered :func:`with_fed_ranks` copy) the shapes in
    ``types`` (:func:`subgraph_output_types` of the caller's model), in place.

    A custom op never writes such an output itself: a Reshape to its own shape after it does (an Identity
    there onnxruntime's optimizer removes). onnxruntime-extensions aborts the process when an output
    allocated before the run has another shape than the op computes; onnxruntime's own Reshape refuses the
    run as onnxruntime's Gather refuses the caller's model."""
    for key, body in _subgraphs(model.graph):
        known = types.get(key)
        if not known:
            continue
        producers = {name: node for node in body.node for name in node.output if name}
        for out in body.output:
            tp = known.get(out.name)
            if tp is None or not tp.tensor_type.HasField("shape") or not out.type.HasField("tensor_type"):
                continue
            if tp.tensor_type.elem_type != out.type.tensor_type.elem_type:
                continue
            out.type.tensor_type.shape.CopyFrom(tp.tensor_type.shape)
            producer = producers.get(out.name)
            if producer is not None and producer.domain == CUSTOM_DOMAIN:
                _written_by_onnxruntime(body, producer, out.name, set(producers))


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
    body.node.append(onnx.helper.make_node("Shape", [fresh], [shape], name=f"{name}_declared_shape"))
    body.node.append(onnx.helper.make_node("Reshape", [fresh, shape], [name], name=f"{name}_declared"))
