"""Initializers defined more than once under one name: keep the one onnxruntime reads.

onnxruntime loads such a model (it logs "Duplicate initializer ... the model will use the latest encountered
initializer") but which definition its kernels then read depends on the tensors, as measured on onnxruntime
1.24.4 and 1.32 (``tests/test_hostile53_duplicates.py`` asks onnxruntime each pattern): the last one, unless
an earlier one holds its data inline with at least 128 bytes (onnxruntime's threshold for turning an
initializer into a value when the graph is built), in which case the last such one before the final
definition. So ``[a, b]`` of 4096 bytes each reads ``a``; ``[a, b, c]`` reads ``b``; of 64 bytes each, the
last; external data and strings never count as inline-and-large.

dmlshim read the last definition (the emulated Gather gave ``b``'s rows where onnxruntime gave ``a``'s) and
refused models whose duplicated initializer was 64 KiB or more (its weightless check copy turned both into
graph inputs of one name, which onnxruntime refuses).
"""

from __future__ import annotations

import logging
import math

import onnx
from onnx import TensorProto

from .wellformed import RAW_ITEMSIZE

logger = logging.getLogger(__name__)

ORT_VALUE_MIN_BYTES = 128
"""An inline initializer of at least this many bytes is made a value when onnxruntime builds its graph."""


def _inline_and_large(tensor: TensorProto) -> bool:
    if tensor.data_location == TensorProto.EXTERNAL or tensor.data_type in (
        TensorProto.STRING,
        TensorProto.UNDEFINED,
    ):
        return False
    return (
        RAW_ITEMSIZE.get(tensor.data_type, 1) * math.prod(int(d) for d in tensor.dims) >= ORT_VALUE_MIN_BYTES
    )


def ort_choice(tensors: list[TensorProto]) -> int:
    """The index, in ``tensors`` (one name's definitions in file order), of the one onnxruntime reads."""
    for index in range(len(tensors) - 2, -1, -1):
        if _inline_and_large(tensors[index]):
            return index
    return len(tensors) - 1


def has_duplicates(graph: onnx.GraphProto) -> bool:
    """Whether two of ``graph``'s own initializers share a name."""
    names = [t.name for t in graph.initializer]
    return len(set(names)) != len(names)


def keep_onnxruntimes(graph: onnx.GraphProto) -> list[str]:
    """Remove from ``graph`` (in place, its own initializers only) every definition of a duplicated name
    but the one onnxruntime reads; the names that were duplicated."""
    if not has_duplicates(graph):
        return []
    where: dict[str, list[int]] = {}
    for index, tensor in enumerate(graph.initializer):
        where.setdefault(tensor.name, []).append(index)
    drop: set[int] = set()
    names = []
    for name, indices in where.items():
        if len(indices) < 2:
            continue
        names.append(name)
        keep = indices[ort_choice([graph.initializer[i] for i in indices])]
        drop.update(i for i in indices if i != keep)
    for index in sorted(drop, reverse=True):
        del graph.initializer[index]
    logger.warning(
        "initializer(s) %s defined more than once: kept the definition onnxruntime reads",
        ", ".join(repr(n) for n in names),
    )
    return names


__all__ = ["ORT_VALUE_MIN_BYTES", "has_duplicates", "keep_onnxruntimes", "ort_choice"]
