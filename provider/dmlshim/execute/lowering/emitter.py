"""The ONNX nodes lowering writes around a custom node: fresh names, casts, reshapes, ranks, and reshaped
aliases of external initializers.

:mod:`dmlshim.execute.lowering.node` decides what to emit for a node; this module writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..custom_ops.types import type_name

__all__ = [
    "ALIAS_DOC",
    "RESHAPE_INPUT_SINCE",
    "Emitter",
    "Names",
    "Tail",
    "drop_aliased_sources",
    "emit_tail",
    "names_read",
]

RESHAPE_INPUT_SINCE = 5
"""The ai.onnx opset from which Reshape takes the shape as an input (Reshape-1 has an attribute)."""

Tail = list[tuple[str, object]]
"""The steps that bring a custom node's output back to the ONNX node's: (kind, argument)."""


class Names:
    """Fresh value and node names, unique over the whole model (subgraphs share one namespace)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._used: set[str] = set()
        self._collect(model.graph)
        self._guards = 1

    def guard_code(self) -> int:
        """A number no other numpy guard of the model refuses with (:mod:`.numpy_guard`): 2, 3, ..."""
        self._guards += 1
        return self._guards

    def _collect(self, graph: onnx.GraphProto) -> None:
        self._used.update(v.name for v in (*graph.input, *graph.output, *graph.value_info))
        self._used.update(t.name for t in graph.initializer)
        for node in graph.node:
            self._used.update(node.input)
            self._used.update(node.output)
            self._used.add(node.name)
            for attr in node.attribute:
                if attr.HasField("g"):
                    self._collect(attr.g)
                for g in attr.graphs:
                    self._collect(g)

    def fresh(self, stem: str) -> str:
        name = stem
        k = 0
        while name in self._used:
            k += 1
            name = f"{stem}_{k}"
        self._used.add(name)
        return name


ALIAS_DOC = "dmlshim: reshaped alias of "
"""The ``doc_string`` start of an initializer made by :func:`_external_alias` (then the source's name)."""


def drop_aliased_sources(graph: onnx.GraphProto) -> None:
    """Remove the external initializers of ``graph`` (and its subgraphs) that only aliases replaced: no
    node reads them any more (onnxruntime would warn of each unused one)."""
    for node in graph.node:
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                drop_aliased_sources(sub)
    docs = [t.doc_string for t in graph.initializer]
    sources = {d[len(ALIAS_DOC) :] for d in docs if d.startswith(ALIAS_DOC)}
    if not sources:
        return
    used = names_read(graph) | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name not in sources or t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)


def names_read(graph: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                names |= names_read(sub) | {o.name for o in sub.output}
    return names


def _external_alias(
    graph: onnx.GraphProto, value: str, shape: Sequence[int], name: str
) -> onnx.TensorProto | None:
    """``value`` reshaped, as an initializer pointing at the same external bytes, when ``value`` is an
    initializer of ``graph`` in external data that no feed can replace (None otherwise)."""
    if any(v.name == value for v in graph.input):
        return None
    tensor = next((t for t in graph.initializer if t.name == value), None)
    if tensor is None or tensor.data_location != TensorProto.EXTERNAL:
        return None
    total = int(np.prod(list(tensor.dims), dtype=np.int64))
    dims = [int(d) for d in shape]
    if dims.count(-1) == 1:  # the flattening tags mode asks for ([-1]): its size follows from the data
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known <= 0 or total % known:
            return None
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims, dtype=np.int64)) != total:
        return None
    alias = TensorProto(name=name, data_type=tensor.data_type, dims=dims)
    alias.doc_string = ALIAS_DOC + value
    alias.data_location = TensorProto.EXTERNAL
    alias.external_data.extend(tensor.external_data)
    return alias


@dataclass
class Emitter:
    """Builds the replacement nodes of one gather/scatter node inside one graph."""

    graph: onnx.GraphProto
    names: Names
    stem: str
    nodes: list[onnx.NodeProto]
    opset: int

    def _node(self, op: str, inputs: Sequence[str], out: str, **attrs: Any) -> str:
        self.nodes.append(
            helper.make_node(op, list(inputs), [out], name=self.names.fresh(f"{out}_{op.lower()}"), **attrs)
        )
        return out

    def _constant(self, value: np.ndarray, what: str) -> str:
        name = self.names.fresh(f"{self.stem}_{what}")
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def cast(self, value: str, from_type: int, to_type: int, what: str, output: str | None = None) -> str:
        if from_type == to_type:
            return value
        out = output or self.names.fresh(f"{self.stem}_{what}_{type_name(to_type)}")
        return self._node("Cast", [value], out, to=to_type)

    def reshape(self, value: str, shape: Sequence[int], what: str, output: str | None = None) -> str:
        out = output or self.names.fresh(f"{self.stem}_{what}_reshaped")
        if self.opset < RESHAPE_INPUT_SINCE:
            # Reshape-1 (float types only: used for tags mode's float data).
            return self._node("Reshape", [value], out, shape=list(shape))
        alias = _external_alias(self.graph, value, shape, out)
        if alias is not None:
            # onnxruntime folds a Reshape of an initializer into a copy made at session creation; the
            # source's node reads the mapped external data at run time (an edit to the file shows).
            self.graph.initializer.append(alias)
            return out
        shape_name = self._constant(np.asarray(shape, dtype=np.int64), f"{what}_shape")
        return self._node("Reshape", [value, shape_name], out)

    def shape(self, value: str, what: str) -> str:
        return self._node("Shape", [value], self.names.fresh(f"{self.stem}_{what}_shape_of"))

    def scalar(self, value: str, what: str, output: str | None = None) -> str:
        """A ``[1]`` tensor back to rank 0: Gather of element 0 (every opset, every type)."""
        zero = self._constant(np.array(0, dtype=np.int64), f"{what}_element0")
        out = output or self.names.fresh(f"{self.stem}_{what}_scalar")
        return self._node("Gather", [value, zero], out, axis=0)

    def to_output_rank(self, value: str, node: onnx.NodeProto, output: str | None = None) -> str:
        """A Gather's or GatherND's custom-op output (a rank-0 output leaves the bridge as ``[1]``) reshaped
        to the rank ONNX gives the node's output, computed at run time from its inputs' ranks: for inputs
        of unknown rank, whose output may be a scalar."""
        data_rank = self._node(
            "Size", [self.shape(node.input[0], "data")], self.names.fresh(f"{self.stem}_rank_d")
        )
        indices_shape = self.shape(node.input[1], "indices")
        indices_rank = self._node("Size", [indices_shape], self.names.fresh(f"{self.stem}_rank_i"))
        total = self._node("Add", [data_rank, indices_rank], self.names.fresh(f"{self.stem}_rank_sum"))
        if node.op_type == "GatherND":
            batch = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
            last = self._constant(np.array(-1, dtype=np.int64), "last")
            tuple_size = self._node(
                "Gather", [indices_shape, last], self.names.fresh(f"{self.stem}_tuple"), axis=0
            )
            extra = self._constant(np.array(1 + batch, dtype=np.int64), "rank_extra")
            less = self._node("Add", [tuple_size, extra], self.names.fresh(f"{self.stem}_rank_less"))
        else:
            less = self._constant(np.array(1, dtype=np.int64), "rank_less")
        rank = self._node("Sub", [total, less], self.names.fresh(f"{self.stem}_rank"))
        one = self._constant(np.array([1], dtype=np.int64), "rank_as_list")
        end = self._node("Reshape", [rank, one], self.names.fresh(f"{self.stem}_rank_end"))
        zero = self._constant(np.array([0], dtype=np.int64), "rank_start")
        wanted = self._node(
            "Slice", [self.shape(value, "output"), zero, end], self.names.fresh(f"{self.stem}_output_dims")
        )
        out = output or self.names.fresh(f"{self.stem}_output_ranked")
        return self._node("Reshape", [value, wanted], out)

    def concat(self, values: Sequence[str], what: str) -> str:
        return self._node("Concat", values, self.names.fresh(f"{self.stem}_{what}"), axis=0)

    def gather(self, data: str, positions: str, output: str) -> str:
        return self._node("Gather", [data, positions], output, axis=0)


def emit_tail(emit: Emitter, current: str, tail: Tail, out_name: str) -> None:
    """Write ``tail``'s steps from the custom node's output ``current`` to the ONNX output ``out_name``."""
    # Casts back come first in the list's order only after a reshape; the carried type is undone last.
    ordered = [s for s in tail if s[0] in ("scalar", "rank")] + [s for s in tail if s[0] == "reshape"]
    ordered += [s for s in reversed(tail) if s[0] == "cast"]
    for k, (kind, arg) in enumerate(ordered):
        target = out_name if k == len(ordered) - 1 else None
        if kind == "reshape":
            assert isinstance(arg, tuple)
            current = emit.reshape(current, arg, "output", output=target)
        elif kind == "scalar":
            current = emit.scalar(current, "output", output=target)
        elif kind == "rank":
            assert isinstance(arg, onnx.NodeProto)
            current = emit.to_output_rank(current, arg, output=target)
        else:
            assert isinstance(arg, tuple)
            current = emit.cast(current, arg[0], arg[1], "output", output=target or None)
            if target is not None and current != target:
                emit.nodes.append(
                    helper.make_node("Identity", [current], [target], name=emit.names.fresh(target))
                )
