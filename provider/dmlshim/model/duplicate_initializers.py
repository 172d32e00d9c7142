"""Initializers defined more than once under one name (also as a Constant node's output or a sparse
initializer): keep the one onnxruntime reads.

onnxruntime loads such a model (it logs "Duplicate initializer ... the model will use the latest encountered
initializer") but which definition its kernels then read depends on the tensors, as measured on onnxruntime
1.24.4 and 1.32 (``tests/test_hostile53_duplicates.py`` asks onnxruntime each pattern): the last one, unless
an earlier one holds its data inline with at least 128 bytes (onnxruntime's threshold for turning an
initializer into a value when the graph is built), in which case the last such one before the final
definition. So ``[a, b]`` of 4096 bytes each reads ``a``; ``[a, b, c]`` reads ``b``; of 64 bytes each, the
last; external data and strings never count as inline-and-large. onnxruntime makes initializers of
Constant nodes and sparse initializers when it loads the model: it registers the initializers first, then
the Constant nodes, then the sparse initializers, and the same rule picks among them.

dmlshim read the last definition (the emulated Gather gave ``b``'s rows where onnxruntime gave ``a``'s) and
refused models whose duplicated initializer was 64 KiB or more (its weightless check copy turned both into
graph inputs of one name, which onnxruntime refuses).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from .wellformed import RAW_ITEMSIZE

logger = logging.getLogger(__name__)

ORT_VALUE_MIN_BYTES = 128
"""An inline initializer of at least this many bytes is made a value when onnxruntime builds its graph."""


def _tensor_bytes(tensor: TensorProto) -> int | None:
    """The bytes ``tensor`` holds inline (None: external data, strings, no type)."""
    if tensor.data_location == TensorProto.EXTERNAL or tensor.data_type in (
        TensorProto.STRING,
        TensorProto.UNDEFINED,
    ):
        return None
    return RAW_ITEMSIZE.get(tensor.data_type, 1) * math.prod(int(d) for d in tensor.dims)


def _constant_bytes(node: onnx.NodeProto) -> int | None:
    """The bytes of the initializer onnxruntime makes of a Constant node (None: strings, or unknown)."""
    for attr in node.attribute:
        if attr.name == "value":
            return _tensor_bytes(attr.t)
        if attr.name == "sparse_value":
            return _tensor_bytes(attr.sparse_tensor.values) and (
                RAW_ITEMSIZE.get(attr.sparse_tensor.values.data_type, 1)
                * math.prod(int(d) for d in attr.sparse_tensor.dims)
            )
        if attr.name in ("value_float", "value_int"):
            return 4 if attr.name == "value_float" else 8
        if attr.name in ("value_floats", "value_ints"):
            return len(attr.floats) * 4 if attr.name == "value_floats" else len(attr.ints) * 8
    return None


def _constant_type(node: onnx.NodeProto) -> tuple[int, tuple[int, ...]] | None:
    """The element type and shape of a Constant node's value (None: not known here)."""
    for attr in node.attribute:
        if attr.name == "value":
            return attr.t.data_type, tuple(attr.t.dims)
        if attr.name == "sparse_value":
            return attr.sparse_tensor.values.data_type, tuple(attr.sparse_tensor.dims)
        scalar = {"value_float": TensorProto.FLOAT, "value_int": TensorProto.INT64}
        if attr.name in scalar:
            return scalar[attr.name], ()
        if attr.name == "value_floats":
            return TensorProto.FLOAT, (len(attr.floats),)
        if attr.name == "value_ints":
            return TensorProto.INT64, (len(attr.ints),)
    return None


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1


@dataclass(frozen=True)
class _Definition:
    kind: str  # "initializer", "constant" (a Constant node) or "sparse" (a sparse initializer)
    index: int  # in the graph's initializer, node or sparse_initializer list
    size: int | None  # bytes held inline (None: not inline, or strings)
    typed: tuple[int, tuple[int, ...]] | None  # element type and shape (None: not known)


def _definitions(graph: onnx.GraphProto) -> dict[str, list[_Definition]]:
    """Every name's definitions in the order onnxruntime registers them: initializers, then Constant nodes
    (in node order), then sparse initializers (measured: ``tests/test_hostile53_duplicates.py``)."""
    found: dict[str, list[_Definition]] = {}
    for index, tensor in enumerate(graph.initializer):
        typed = (tensor.data_type, tuple(tensor.dims))
        found.setdefault(tensor.name, []).append(
            _Definition("initializer", index, _tensor_bytes(tensor), typed)
        )
    for index, node in enumerate(graph.node):
        if _is_constant(node):
            defined = _Definition("constant", index, _constant_bytes(node), _constant_type(node))
            found.setdefault(node.output[0], []).append(defined)
    for index, sparse in enumerate(graph.sparse_initializer):
        values = sparse.values
        size = _tensor_bytes(values) and RAW_ITEMSIZE.get(values.data_type, 1) * math.prod(
            int(d) for d in sparse.dims
        )
        typed = (values.data_type, tuple(sparse.dims))
        found.setdefault(values.name, []).append(_Definition("sparse", index, size, typed))
    return found


def ort_choice(sizes: list[int | None]) -> int:
    """The index, among one name's definitions (their inline sizes in bytes, in onnxruntime's order), of
    the one onnxruntime reads."""
    for index in range(len(sizes) - 2, -1, -1):
        size = sizes[index]
        if size is not None and size >= ORT_VALUE_MIN_BYTES:
            return index
    return len(sizes) - 1


def has_duplicates(graph: onnx.GraphProto) -> bool:
    """Whether two of ``graph``'s own initializers, Constant nodes or sparse initializers share a name."""
    names = [t.name for t in graph.initializer]
    names.extend(n.output[0] for n in graph.node if _is_constant(n))
    names.extend(s.values.name for s in graph.sparse_initializer)
    return len(set(names)) != len(names)


def keep_onnxruntimes(graph: onnx.GraphProto) -> list[str]:
    """Remove from ``graph`` (in place, its own initializers and Constant nodes only) every definition of
    a duplicated name but the one onnxruntime reads; the names that were duplicated."""
    if not has_duplicates(graph):
        return []
    drop: dict[str, set[int]] = {"initializer": set(), "constant": set(), "sparse": set()}
    names = []
    for name, defs in _definitions(graph).items():
        if len(defs) < 2 or sum(d.kind == "sparse" for d in defs) > 1:
            continue  # two sparse initializers of one name: onnxruntime refuses the model, left to it
        if defs[0].typed is None or any(d.typed != defs[0].typed for d in defs):
            continue  # another type or shape: onnxruntime refuses the model ("does not match"), left to it
        names.append(name)
        keep = defs[ort_choice([d.size for d in defs])]
        for d in defs:
            if d is not keep:
                drop[d.kind].add(d.index)
    for field, kind in (
        (graph.initializer, "initializer"),
        (graph.node, "constant"),
        (graph.sparse_initializer, "sparse"),
    ):
        for index in sorted(drop[kind], reverse=True):
            del field[index]
    if names:
        logger.warning(
            "%s defined more than once: kept the definition onnxruntime reads",
            ", ".join(repr(n) for n in names),
        )
    return names


__all__ = ["ORT_VALUE_MIN_BYTES", "has_duplicates", "keep_onnxruntimes", "ort_choice"]
