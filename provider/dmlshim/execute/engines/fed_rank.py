"""Graph inputs declared rank 0 and fed at another rank.

onnxruntime checks no shape against a rank-0 declaration: a feed of any rank runs, and every node after it
computes at the fed rank. A model lowered for the declared scalar would restore a scalar where onnxruntime
keeps the fed rank, so the custom-op engine lowers a copy of the model whose such inputs carry the fed rank
(each dimension symbolic) and runs that for these feeds. An initializer declared as a graph input of no
shape is the same case at any fed shape (lowering takes the initializer's dims as its static shape). The
lowered copy that onnxruntime runs declares those inputs as the caller's model does (:func:`declared_again`):
onnxruntime folds a ``Shape`` or ``Size`` of a rank-0 input from its declaration (``[]`` and 1 at the
default optimization level), which a fed-rank declaration would change. So are the outputs a custom op
computes in its If, Loop and Scan bodies (from the caller's model:
:mod:`dmlshim.execute.lowering.body_outputs`): onnxruntime holds a body's output to the shape it inferred
from the declaration (an If refuses a branch computing another, a Loop of no iteration returns its scan
outputs at it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

__all__ = [
    "FedRanks",
    "declared_again",
    "fed_ranks",
    "rank_zero_inputs",
    "shapeless_initializers",
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
            shape = getattr(value, "shape", None)  # an OrtValue (bfloat16: numpy cannot read it): shape()
            ndim = len(shape()) if callable(shape) else np.ndim(value)
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
