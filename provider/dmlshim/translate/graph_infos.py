"""The inferred types and shapes of a graph's values, read lazily: :class:`_GraphInfos` (a graph's values
over its enclosing scope) and :class:`_RunInfos` (the top-level graph with the shapes a run gave)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx

from .plan import TensorInfo
from .shapes_info import richer, tensor_info

_UNREAD: Any = object()
_DECLARED = frozenset({"input", "value_info", "output"})


class _GraphInfos(Mapping[str, TensorInfo]):
    """``tensor_infos(graph)`` laid over the enclosing ``scope``, reading a value's type only when a node
    asks for it: most values of a graph feed no gather/scatter node, and reading a type from protobuf costs
    more than indexing the names."""

    # tensor_infos' order: a later source replaces an earlier one when it gives a TensorInfo (``richer``:
    # one without a shape keeps the earlier shape).
    _SOURCES = ("input", "value_info", "output", "initializer", "sparse_initializer")

    def __init__(self, graph: onnx.GraphProto, scope: Mapping[str, TensorInfo]) -> None:
        self._graph = graph
        self._scope = scope
        self._cache: dict[str, TensorInfo | None] = {}
        self._index: dict[str, list[tuple[str, Any]]] | None = None

    def _sources(self) -> dict[str, list[tuple[str, Any]]]:
        if self._index is None:
            index: dict[str, list[tuple[str, Any]]] = {}
            for source in self._SOURCES:
                # The protos themselves: indexing a large repeated field again later costs far more.
                for proto in getattr(self._graph, source):
                    name = proto.values.name if source == "sparse_initializer" else proto.name
                    if name or source in ("initializer", "sparse_initializer"):
                        index.setdefault(name, []).append((source, proto))
            self._index = index
        return self._index

    @staticmethod
    def _read(source: str, proto: Any) -> TensorInfo | None:
        if source == "initializer":
            return TensorInfo(tuple(int(d) for d in proto.dims), int(proto.data_type))
        if source == "sparse_initializer":
            return TensorInfo(tuple(int(d) for d in proto.dims), int(proto.values.data_type))
        return tensor_info(proto)

    def _local(self, name: str) -> TensorInfo | None:
        try:
            return self._cache[name]
        except KeyError:
            pass
        found: TensorInfo | None = None
        index = self._index if self._index is not None else self._sources()
        for source, proto in index.get(name, ()):
            # a value_info, input or output: tensor_info directly (one call less per value of a large graph)
            read = tensor_info(proto) if source in _DECLARED else self._read(source, proto)
            if read is not None:
                found = read if found is None else richer(found, read)
        self._cache[name] = found
        return found

    def __getitem__(self, name: str) -> TensorInfo:
        found = self._local(name)
        return found if found is not None else self._scope[name]

    def get(self, name: str, default: Any = None) -> Any:
        # Mapping.get goes through __getitem__ and KeyError; translate_model calls this per input.
        found = self._cache.get(name, _UNREAD)
        if found is _UNREAD:
            found = self._local(name)
        return found if found is not None else self._scope.get(name, default)

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys(self._scope)
        names.update(dict.fromkeys(n for n in self._sources() if self._local(n) is not None))
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _RunInfos(_GraphInfos):
    """The top-level graph's types with the shapes a run gave (``value_shapes``) in place of the inferred
    ones: the element type stays the inferred one, the dims are the run's."""

    def __init__(self, graph: onnx.GraphProto, value_shapes: Mapping[str, Sequence[int]]) -> None:
        super().__init__(graph, {})
        self._run = value_shapes

    def _local(self, name: str) -> TensorInfo | None:
        found = super()._local(name)
        shape = self._run.get(name)
        if shape is not None and found is not None and found.elem_type:
            found = self._cache[name] = TensorInfo(tuple(int(d) for d in shape), found.elem_type)
        return found
