"""Ifs whose condition is known before the run: their outputs take the shapes of the branch that runs.

ONNX shape inference merges the two branches of an If: where their outputs differ in rank, the If's output
has none, and so has every value computed from it. Exporters often test sizes (TorchScript DeBERTa asks
whether the query and key lengths differ), and once the sizes are known (``--input-shape``) the test is
decided: :func:`settle_static_ifs` computes such conditions from constants and static shapes (a small
numpy evaluation of Shape, Size, Slice, Gather, Squeeze, Unsqueeze, Concat, Cast, comparisons, logic and
integer arithmetic), gives the If's outputs the types of the branch that runs, and infers again.
A condition that needs anything else (a graph input's values, a symbolic size) is left to the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph import constant_node_value, subgraphs

__all__ = ["settle_static_ifs"]

logger = logging.getLogger(__name__)

_MAX_PASSES = 8  # each pass settles the Ifs whose condition or chosen branch the previous one typed
_MAX_DEPTH = 64
_MAX_ELEMENTS = 4096

_BINARY: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Equal": np.equal,
    "Greater": np.greater,
    "Less": np.less,
    "GreaterOrEqual": np.greater_equal,
    "LessOrEqual": np.less_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
}


class _Unknown(Exception):
    """The value cannot be computed before the run."""


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Evaluator:
    """Computes small values of one graph from its constants and the static shapes it sees."""

    def __init__(self, graph: onnx.GraphProto, shapes: Callable[[str], tuple[int, ...] | None]) -> None:
        self._producers = {o: n for n in graph.node for o in n.output if o}
        self._initializers = {t.name: t for t in graph.initializer}
        self._shapes = shapes
        self._memo: dict[str, np.ndarray] = {}

    def value(self, name: str, depth: int = 0) -> np.ndarray:
        if name in self._memo:
            return self._memo[name]
        if depth > _MAX_DEPTH:
            raise _Unknown(name)
        tensor = self._initializers.get(name)
        if tensor is not None:
            if tensor.data_location == onnx.TensorProto.EXTERNAL or int(np.prod(tensor.dims)) > _MAX_ELEMENTS:
                raise _Unknown(name)
            found = numpy_helper.to_array(tensor)
        else:
            node = self._producers.get(name)
            if node is None or node.domain not in ("", "ai.onnx") or list(node.output).index(name) != 0:
                raise _Unknown(name)
            found = np.asarray(self._compute(node, depth + 1))
        if found.size > _MAX_ELEMENTS:
            raise _Unknown(name)
        self._memo[name] = found
        return found

    def _static_shape(self, name: str) -> tuple[int, ...]:
        shape = self._shapes(name)
        if shape is None:
            raise _Unknown(name)
        return shape

    def _compute(self, node: onnx.NodeProto, depth: int) -> np.ndarray:
        op = node.op_type

        def arg(i: int) -> np.ndarray:
            if i >= len(node.input) or not node.input[i]:
                raise _Unknown(node.name)
            return self.value(node.input[i], depth)

        def optional(i: int) -> np.ndarray | None:
            return arg(i) if i < len(node.input) and node.input[i] else None

        if op == "Constant":
            value = constant_node_value(node)
            if value is None:
                raise _Unknown(node.name)
            return value
        if op == "Shape":
            dims = np.asarray(self._static_shape(node.input[0]), dtype=np.int64)
            start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)  # type: ignore[call-overload]
            return dims[start : None if end is None else int(end)]  # type: ignore[call-overload]
        if op == "Size":
            return np.asarray(int(np.prod(self._static_shape(node.input[0]), dtype=np.int64)), np.int64)
        if op == "Identity":
            return arg(0)
        if op == "Cast":
            return arg(0).astype(helper.tensor_dtype_to_np_dtype(int(_attr(node, "to", 0))))  # type: ignore[call-overload]
        if op == "Not":
            return np.logical_not(arg(0))
        if op == "Neg":
            return np.negative(arg(0))
        if op in _BINARY:
            return np.asarray(_BINARY[op](arg(0), arg(1)))
        if op in ("Min", "Max"):
            values = [arg(i) for i in range(len(node.input))]
            reduce = np.minimum if op == "Min" else np.maximum
            out = values[0]
            for v in values[1:]:
                out = reduce(out, v)
            return out
        if op == "Squeeze":
            axes = optional(1)
            found = axes if axes is not None else _attr(node, "axes", None)
            data = arg(0)
            if found is None:
                return np.squeeze(data)
            return np.squeeze(data, axis=tuple(int(a) for a in np.asarray(found).reshape(-1)))
        if op == "Unsqueeze":
            axes = optional(1)
            found = axes if axes is not None else _attr(node, "axes", None)
            if found is None:
                raise _Unknown(node.name)
            out = arg(0)
            rank = out.ndim + int(np.asarray(found).size)
            for a in sorted(int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(found).reshape(-1)):
                out = np.expand_dims(out, a)
            return out
        if op == "Gather":
            return np.take(arg(0), arg(1).astype(np.int64), axis=int(_attr(node, "axis", 0)))  # type: ignore[call-overload]
        if op == "Concat":
            return np.concatenate([arg(i) for i in range(len(node.input))], axis=int(_attr(node, "axis", 0)))  # type: ignore[call-overload]
        if op == "Slice":
            data, starts, ends = arg(0), arg(1), arg(2)
            axes, steps = optional(3), optional(4)
            index: list[slice] = [slice(None)] * data.ndim
            axes_list = range(len(starts)) if axes is None else [int(a) for a in axes]
            for k, axis in enumerate(axes_list):
                step = 1 if steps is None else int(steps[k])
                index[axis] = slice(int(starts[k]), int(ends[k]), step)
            return data[tuple(index)]
        raise _Unknown(node.name)


_Sources = dict[str, "onnx.ValueInfoProto | onnx.TensorProto | None"]


def _ranked_sources(graphs: list[onnx.GraphProto]) -> tuple[_Sources, dict[str, onnx.ValueInfoProto]]:
    """What the graphs (innermost first) declare of each value: for its static shape, the last value info
    with a rank or initializer (None when declared without a rank only); for its type, the last value info
    with a rank (initializers left out). Shapes are read only for the few values an If's condition
    reaches, not for every value of the graph."""
    shapes: _Sources = {}
    ranked: dict[str, onnx.ValueInfoProto] = {}
    for graph in reversed(graphs):
        for v in (*graph.input, *graph.value_info, *graph.output):
            tp = v.type
            if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
                shapes.setdefault(v.name, None)
            else:
                shapes[v.name] = ranked[v.name] = v
        for t in graph.initializer:
            shapes[t.name] = t
    return shapes, ranked


class _DeclaredShapes:
    """Static shapes the graphs declare (``sources``: the first of :func:`_ranked_sources`), read when
    first asked for; :meth:`freeze` reads them before an If's outputs are typed, so that every answer is
    the graphs' as they were when this was made."""

    def __init__(self, sources: _Sources) -> None:
        self._sources = sources
        self._read: dict[str, tuple[int, ...] | None] = {}

    def __call__(self, name: str) -> tuple[int, ...] | None:
        try:
            return self._read[name]
        except KeyError:
            pass
        found = self._sources.get(name)
        if found is None:
            shape = None
        elif isinstance(found, onnx.TensorProto):
            shape = tuple(int(d) for d in found.dims)
        else:
            declared = found.type.tensor_type.shape.dim
            dims = [d.dim_value if d.HasField("dim_value") else None for d in declared]
            shape = None if any(d is None for d in dims) else tuple(int(d) for d in dims)  # type: ignore[arg-type]
        self._read[name] = shape
        return shape

    def freeze(self, names: Iterable[str]) -> None:
        for name in names:
            self(name)


class _KnownTypes:
    """The types the graphs hold for their values, ranked ones only (``ranked``: the second of
    :func:`_ranked_sources`)."""

    def __init__(self, ranked: dict[str, onnx.ValueInfoProto]) -> None:
        self._ranked = ranked

    def get(self, name: str) -> onnx.TypeProto | None:
        found = self._ranked.get(name)
        return None if found is None else found.type


def _branch_types(node: onnx.NodeProto, then: bool, outer: _KnownTypes) -> list[onnx.TypeProto] | None:
    """The types of the outputs of the branch that runs. A branch output that is an outer value passed
    through (an ``Identity``, or the outer name itself) has that value's inferred type: legacy TorchScript
    exports declare the traced sizes on such outputs, which can be stale (a rank-1 shape for a 2-d value)."""
    name = "then_branch" if then else "else_branch"
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.GRAPH:
            inner = {n for n in a.g.node for n in n.output} | {i.name for i in a.g.input}
            identity = {n.output[0]: n.input[0] for n in a.g.node if n.op_type == "Identity" and n.input}
            types = []
            for o in a.g.output:
                source = identity.get(o.name, o.name if o.name not in inner else None)
                passed = outer.get(source) if source is not None and source not in inner else None
                types.append(passed if passed is not None else o.type)
            return types
    return None


def _settle(graph: onnx.GraphProto, enclosing: list[onnx.GraphProto], given: set[str]) -> bool:
    """Give the outputs of every decidable If of ``graph`` (and of its subgraphs) the chosen branch's
    types, adding their names to ``given``; True when any was given."""
    changed = False
    evaluator: _Evaluator | None = None  # built at the graph's first If: most graphs have none
    outer, shapes = _KnownTypes({}), _DeclaredShapes({})
    for node in graph.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input:
            if evaluator is None:
                sources, ranked = _ranked_sources([graph, *enclosing])
                shapes = _DeclaredShapes(sources)
                evaluator = _Evaluator(graph, shapes)
                outer = _KnownTypes(ranked)
            try:
                cond = evaluator.value(node.input[0])
            except (_Unknown, ValueError, IndexError, TypeError):
                cond = None
            if cond is not None and cond.size == 1:
                types = _branch_types(node, bool(cond.reshape(-1)[0]), outer)
                if types is not None and len(types) == len(node.output):
                    shapes.freeze(node.output)  # the evaluator reads the graphs as they were
                    changed = _give_types(graph, node, types, given) or changed
        for _, sub in subgraphs(node):
            changed = _settle(sub, [graph, *enclosing], given) or changed
    return changed


def _give_types(
    graph: onnx.GraphProto, node: onnx.NodeProto, types: list[onnx.TypeProto], given: set[str]
) -> bool:
    declared = {v.name: v for v in (*graph.value_info, *graph.output)}
    changed = False
    for name, tp in zip(node.output, types, strict=True):
        if not name or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            continue
        target = declared.get(name)
        if target is not None and target.type.tensor_type.HasField("shape"):
            if not _better(tp.tensor_type.shape, target.type.tensor_type.shape):
                continue  # already as well known
            if target in graph.output:
                continue  # the graph's own declaration stays
            target.type.tensor_type.ClearField("shape")
        if target is None:
            target = graph.value_info.add()
            target.name = name
        target.type.CopyFrom(tp)
        given.add(name)
        changed = True
        logger.debug("If %r: output %r typed from the branch its condition chooses", node.name, name)
    return changed


def _better(new: onnx.TensorShapeProto, old: onnx.TensorShapeProto) -> bool:
    """``new`` (the branch that runs) says more than ``old`` (ONNX's merge of both branches): another
    rank, or a static size where ``old`` has none."""
    if len(new.dim) != len(old.dim):
        return True
    return any(
        n.HasField("dim_value") and not o.HasField("dim_value") for n, o in zip(new.dim, old.dim, strict=True)
    )


def settle_static_ifs(
    model: onnx.ModelProto, infer: Callable[[onnx.ModelProto], onnx.ModelProto]
) -> onnx.ModelProto:
    """``model`` (inferred) with the outputs of Ifs whose condition is known typed as the branch that runs,
    inferred again with ``infer`` after each pass that typed any."""
    given: set[str] = set()
    for _ in range(_MAX_PASSES):
        if not _settle(model.graph, [], given):
            break
        _forget_downstream(model.graph, given)
        model = infer(model)
    return model


def _reads(node: onnx.NodeProto) -> set[str]:
    """The values a node reads, those its subgraphs read from outside included."""
    names = {i for i in node.input if i}
    for _, sub in subgraphs(node):
        for inner in sub.node:
            names |= _reads(inner)
    return names


def _forget_downstream(graph: onnx.GraphProto, given: set[str]) -> None:
    """Drop the inferred types of every value computed from the newly typed If outputs (``given`` stays):
    ONNX's inference keeps a type it finds declared, so the merged shapes inferred before would stand
    against the chosen branch's."""
    downstream = set(given)

    def visit(g: onnx.GraphProto) -> None:
        for node in g.node:
            if _reads(node) & downstream:
                downstream.update(o for o in node.output if o)
                for _, sub in subgraphs(node):
                    downstream.update(o for n in sub.node for o in n.output if o)
            for _, sub in subgraphs(node):
                visit(sub)

    visit(graph)
    forget = downstream - given

    def prune(g: onnx.GraphProto) -> None:
        kept = [v for v in g.value_info if v.name not in forget]
        if len(kept) != len(g.value_info):
            del g.value_info[:]
            g.value_info.extend(kept)
        for node in g.node:
            for _, sub in subgraphs(node):
                prune(sub)

    prune(graph)
