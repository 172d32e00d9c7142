"""Graph inputs declared rank 0 and fed at another rank.

onnxruntime checks no shape against a rank-0 declaration: a feed of any rank runs, and every node after it
computes at the fed rank. A model lowered for the declared scalar would restore a scalar where onnxruntime
keeps the fed rank, so the custom-op engine lowers a copy of the model whose such inputs carry the fed rank
(each dimension symbolic) and runs that for these feeds. The lowered copy that onnxruntime runs declares
those inputs rank 0 again (:func:`declared_rank_zero`): onnxruntime folds a ``Shape`` or ``Size`` of such an
input from its declaration (``[]`` and 1 at the default optimization level), which a fed-rank declaration
would change.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

__all__ = ["FedRanks", "declared_rank_zero", "fed_ranks", "rank_zero_inputs", "with_fed_ranks"]

FedRanks = tuple[tuple[str, int], ...]
"""``((input name, fed rank), ...)`` for the rank-0 inputs fed at another rank, in name order."""


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


def fed_ranks(names: frozenset[str], feeds: Mapping[str, object]) -> FedRanks:
    """The inputs among ``names`` that ``feeds`` gives at a rank other than 0 (empty: none)."""
    ranks = []
    for name in sorted(names):
        value = feeds.get(name)
        ndim = getattr(value, "ndim", None)
        if ndim is None and value is not None:
            ndim = np.ndim(value)
        if ndim:
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
        for k in range(rank):
            shape.dim.add().dim_param = f"{value.name}_fed_dim{k}"
    return copy


def declared_rank_zero(model: onnx.ModelProto, names: frozenset[str]) -> None:
    """Declare the graph inputs ``names`` of ``model`` (a lowered :func:`with_fed_ranks` copy) rank 0 again,
    in place, as the caller's model declares them."""
    for value in model.graph.input:
        if value.name in names:
            del value.type.tensor_type.shape.dim[:]
