"""ONNX shape inference with data propagation, bounded: data is propagated only for small values.

onnx's data propagation (``infer_shapes(..., data_prop=True)``) gives every value a node reads through
``getInputData`` a list of "dimensions": the values of a 0-D or 1-D integer initializer, or, for any 1-D
tensor of static length N (whatever its type, an input or a computed value), N unknown dimensions (onnx
1.18 and later). A node with a data-propagation function (Cast, Size, Squeeze, Unsqueeze, Concat, Slice,
Gather, Add, Sub, Mul; Shape reads only the type) therefore materializes one protobuf dimension, about
80 bytes, per element of every 1-D input, and copies the list to its output: a Gather reading a 1 GiB
flattened embedding table (268M float32 elements) built 21 GB of dimensions. Only the data of shape-like
values is of use (a Reshape, Expand, ConstantOfShape or Resize reads it as a shape: its length is a rank).

So before inferring with data propagation, each input a data-propagating node reads is *cut* when its data
could be large: the node reads a fresh graph input of the same type without its static length instead
(the rank trick needs a static length), and the node's outputs keep the types inference without data
propagation gives them (a "pin"). What may be cut:

- big: a 1-D value whose static length is over :data:`DATA_MAX_ELEMENTS`, or an integer initializer of
  more elements (onnx parses those element by element);
- unknown: a value whose rank, or 1-D length, the inference without data propagation leaves unknown, since
  propagation could reveal a large static length. When a pass reveals it small, it is uncut and the
  model inferred again, until the cuts and the types they declare stop changing (or change only by a
  one-to-one renaming of the dimension names onnx generates, which every later pass would repeat); the
  result is what onnx's own inference gives with data kept for small values only.
"""

from __future__ import annotations

import logging
from collections import ChainMap
from collections.abc import Container, Iterator, Mapping
from functools import cache
from operator import itemgetter
from typing import TypeVar

import onnx

from ..limits import check_bytes, memory_limit
from .data_cuts import BIG as _BIG
from .data_cuts import CUT_DIM as _CUT_DIM
from .data_cuts import MAX_RANK, GraphPath, cut_copy, restore
from .data_cuts import UNKNOWN as _UNKNOWN
from .data_cuts import Site as _Site
from .data_cuts import each as _each
from .data_cuts import graph_paths as _graphs
from .data_cuts import value_names as _value_names
from .data_cuts import versions as _versions
from .last_inference import infer_shapes
from .prop_readers import propagation_unread
from .range_cuts import cuts_settled
from .renamed_cuts import renamed_only as _renamed_only
from .subgraph_names import give_back, unshared

logger = logging.getLogger(__name__)

__all__ = ["DATA_MAX_ELEMENTS", "MAX_RANK", "infer_with_data_prop"]

DATA_MAX_ELEMENTS = 1024
"""Values of at most this many elements keep their data through propagation (a shape tensor's length is
a rank; onnx 1.23 bounds rank-only inference the same way)."""

DATA_BUDGET = 1 << 20
"""At most this many data elements (about 80 bytes each in onnx) over all the inputs kept: past it the
longest ones are cut too (a chain of 20,000 Casts of a 1024-element value would otherwise hold 20M)."""

BYTES_PER_ELEMENT = 80
"""What onnx holds per propagated element (a TensorShapeProto dimension, measured: 21 GB for 268M)."""

GRAPH_COPIES = 3
"""Copies of the weightless graph one inference holds at once (the serialized bytes, onnx's parsed model,
the inferred result): refused before inferring when they would pass the memory limit."""


def _budget() -> int:
    """DATA_BUDGET, lowered so the kept data stays within a quarter of the memory limit."""
    cap = memory_limit()
    return DATA_BUDGET if cap is None else max(0, min(DATA_BUDGET, cap // (4 * BYTES_PER_ELEMENT)))


_MAX_PASSES = 4

_ALL = None
_READS: dict[str, tuple[int, ...] | None] = {
    "Cast": (0,),
    "Size": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Gather": (0, 1),
    "Add": (0, 1),
    "Sub": (0, 1),
    "Mul": (0, 1),
    "Concat": _ALL,
    "Slice": _ALL,
    "Shape": (),
}
"""The inputs whose data each data-propagating op reads (None: every input). An op that gains a
propagation function in a later onnx counts as reading every input."""

_TYPE_READS_VALUES: dict[str, frozenset[int]] = {"Slice": frozenset({1, 2, 3, 4})}
"""Inputs a data-propagating op's type inference reads by value: cut only when big (an unknown one keeps
its value, which a cut would hide from the type inference)."""

_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
}
"""Inputs whose length onnx takes as the output's rank when their values are unknown (onnx before 1.23
materializes that many dimensions, however many)."""

T = TypeVar("T")

_INTS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})


@cache
def _propagates(op: str, domain: str, version: int) -> bool:
    try:
        schema = onnx.defs.get_schema(op, version, domain)
    except Exception:
        return False
    return bool(getattr(schema, "has_data_propagation_function", False))


def _sites(model: onnx.ModelProto, paths: list[GraphPath]) -> list[_Site]:
    versions = _versions(model)
    found: list[_Site] = []
    # What a (domain, op) reads, looked up once per distinct op: the chain of 20,000 Gathers asks once.
    # None: the op propagates no data and has no shape input.
    ops: dict[tuple[str, str], tuple[bool, Container[int] | None, frozenset[int]] | None] = {}
    for path, graph in _each(model, paths):
        for i, node in enumerate(graph.node):
            op_type = node.op_type
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            key = (domain, op_type)
            try:
                how = ops[key]
            except KeyError:
                how = ops[key] = _reading(op_type, domain, versions.get(domain, 0))
            if how is None:
                continue
            shape_op, reads, by_value = how
            inputs = node.input
            if shape_op:
                for k in _SHAPE_INPUTS[op_type]:
                    if k < len(inputs) and inputs[k]:
                        found.append(_Site(path, i, k, inputs[k], True, True))
                continue
            for k, name in enumerate(inputs):
                if name and (reads is None or k in reads):
                    found.append(_Site(path, i, k, name, k in by_value, False))
    return found


def _reading(
    op_type: str, domain: str, version: int
) -> tuple[bool, Container[int] | None, frozenset[int]] | None:
    """How :func:`_sites` reads a node of this op: (a shape-input op, the inputs data inference reads,
    those its type inference reads by value), or None when it reads none."""
    if domain == "" and op_type in _SHAPE_INPUTS:
        return True, None, frozenset()
    if not _propagates(op_type, domain, version):
        return None
    reads = _READS.get(op_type, _ALL) if domain == "" else _ALL
    by_value = _TYPE_READS_VALUES.get(op_type, frozenset()) if domain == "" else frozenset()
    return False, reads, by_value


Scoped = dict[GraphPath, Mapping[str, T]]
"""Per graph (by path), what the graph sees by name: its own values over those of the graphs enclosing
it. Sibling bodies (an If's two branches) may each declare a value of one name with another type or
other data: a flat name lookup would give one branch the other's."""


def _scoped(own: Mapping[GraphPath, Mapping[str, T]]) -> Scoped[T]:
    out: Scoped[T] = {}
    for path, values in own.items():
        if not path:
            out[path] = values  # the top-level graph (the only one of most models): its own mapping
        else:
            out[path] = ChainMap(values, *(own[path[:k]] for k in range(len(path) - 1, -1, -1)))
    return out


class _GraphTypes(Mapping[str, onnx.TypeProto]):
    """Every value's type as one graph declares it: its inputs', ``value_info``'s and outputs' over its
    initializers' (a tensor type of the initializer's element type and dims). An initializer's type is made
    when first asked for: a plan reads a few values of a graph whose hundreds of initializers would each
    cost a new TypeProto (a tenth of the data-propagation pass on a transformer export)."""

    __slots__ = ("_declared", "_graph", "_initializers", "_made")

    def __init__(self, graph: onnx.GraphProto) -> None:
        self._graph = graph
        self._declared: dict[str, onnx.TypeProto] = {}
        for values in (graph.input, graph.value_info, graph.output):
            self._declared.update(
                {v.name: tp for v in values if (tp := v.type).WhichOneof("value") is not None}
            )
        self._initializers: dict[str, onnx.TensorProto] | None = None
        self._made: dict[str, onnx.TypeProto] = {}

    def _inits(self) -> dict[str, onnx.TensorProto]:
        if self._initializers is None:
            self._initializers = {t.name: t for t in self._graph.initializer}  # the last of a name wins
        return self._initializers

    def __getitem__(self, name: str) -> onnx.TypeProto:
        found = self._declared.get(name)
        if found is not None:
            return found
        found = self._made.get(name)
        if found is not None:
            return found
        init = self._inits()[name]  # KeyError: no value of that name
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = init.data_type
        tp.tensor_type.shape.SetInParent()
        for d in init.dims:
            tp.tensor_type.shape.dim.add().dim_value = d
        self._made[name] = tp
        return tp

    def get(self, name: str, default: onnx.TypeProto | None = None) -> onnx.TypeProto | None:  # type: ignore[override]
        # (Mapping's own get is Python code around a KeyError: a plan asks once per read site)
        found = self._declared.get(name)
        if found is not None:
            return found
        if name in self._made or name in self._inits():
            return self[name]
        return default

    def __contains__(self, name: object) -> bool:
        return name in self._declared or name in self._inits()

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._inits(), *self._declared]))

    def __len__(self) -> int:
        return len(self._inits().keys() | self._declared.keys())


def _graph_types(graph: onnx.GraphProto) -> Mapping[str, onnx.TypeProto]:
    return _GraphTypes(graph)


def _types(model: onnx.ModelProto, paths: list[GraphPath]) -> Scoped[onnx.TypeProto]:
    """Every value's type as each graph sees it (its own declarations over its enclosing graphs')."""
    return _scoped({path: _graph_types(graph) for path, graph in _each(model, paths)})


def _initializers(model: onnx.ModelProto, paths: list[GraphPath]) -> Scoped[onnx.TensorProto]:
    return _scoped({path: {t.name: t for t in g.initializer} for path, g in _each(model, paths)})


def _verdict(site: _Site, tp: onnx.TypeProto | None, init: onnx.TensorProto | None) -> str | None:
    """Whether (and why) the site's input must be cut, from what is known of its type."""
    if site.shape_input:
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        dims = tp.tensor_type.shape.dim
        return (
            _BIG
            if len(dims) == 1 and dims[0].HasField("dim_value") and dims[0].dim_value > MAX_RANK
            else None
        )
    if init is not None and init.data_type in _INTS and len(init.dims) <= 1:
        count = 1
        for d in init.dims:
            count *= int(d)
        return _BIG if count > DATA_MAX_ELEMENTS else None
    if tp is None or not tp.HasField("tensor_type"):
        return None  # untyped: no rank trick, and no type to declare for a cut
    if not tp.tensor_type.HasField("shape"):
        return None if site.by_value else _UNKNOWN
    dims = tp.tensor_type.shape.dim
    if len(dims) != 1:
        return None  # onnx materializes nothing for a rank other than 1
    if dims[0].HasField("dim_value"):
        return _BIG if dims[0].dim_value > DATA_MAX_ELEMENTS else None
    return None if site.by_value else _UNKNOWN


def _cut_type(tp: onnx.TypeProto, kind: str) -> onnx.TypeProto:
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    if kind == _BIG and out.tensor_type.HasField("shape"):
        for d in out.tensor_type.shape.dim:
            d.Clear()
            d.dim_param = _CUT_DIM  # rank kept, length unknown (no rank trick), and no symbol generated
    return out


def _length(tp: onnx.TypeProto | None, init: onnx.TensorProto | None) -> int:
    """The data elements onnx would hold for a kept input (0 when it holds none)."""
    if init is not None and init.data_type in _INTS and len(init.dims) <= 1:
        return int(init.dims[0]) if init.dims else 1
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return 0
    dims = tp.tensor_type.shape.dim
    return int(dims[0].dim_value) if len(dims) == 1 and dims[0].HasField("dim_value") else 0


def _plan(
    sites: list[_Site],
    types: Scoped[onnx.TypeProto],
    inits: Scoped[onnx.TensorProto],
    contents: dict[GraphPath, dict[str, bytes]] | None = None,
) -> dict[_Site, tuple[str, bytes]]:
    """The cuts: site -> (kind, the fresh input's serialized type). ``contents``: ``types``' values
    serialized, by path then name, filled in here (and read again by the pins of :func:`cut_copy`)."""
    plan: dict[_Site, tuple[str, bytes]] = {}
    kept: list[tuple[int, int, _Site]] = []
    made: dict[tuple[GraphPath, str, str], bytes] = {}

    by_content: dict[tuple[bytes, str], bytes] = {}  # values of one type share their cut type
    # each value's serialized type, once (its verdict's key, its cut's, its consumer's pin key)
    if contents is None:
        contents = {}

    def content_of(path: GraphPath, name: str, tp: onnx.TypeProto) -> bytes:
        own = contents.get(path)
        if own is None:
            own = contents[path] = {}
        found = own.get(name)
        if found is None:
            found = own[name] = tp.SerializeToString()
        return found

    def cut(path: GraphPath, name: str, kind: str) -> bytes:
        found = made.get((path, name, kind))
        if found is None:
            tp = types[path].get(name)
            if tp is None:
                found = b""
            else:
                content = (content_of(path, name, tp), kind)
                found = by_content.get(content)
                if found is None:
                    found = by_content[content] = _cut_type(tp, kind).SerializeToString(deterministic=True)
            made[path, name, kind] = found
        return found

    # A verdict depends on the value (as the site's graph sees it) and on how it is read only: a value read
    # by many nodes of one graph is judged once.
    judged: dict[tuple[GraphPath, str, bool, bool], tuple[str | None, int]] = {}
    # ... and, for a value that is no initializer, from its type alone: values of one type judged once.
    by_type: dict[tuple[bytes, bool, bool], tuple[str | None, int]] = {}
    for order, site in enumerate(sites):
        key = (site.path, site.value, site.by_value, site.shape_input)
        found = judged.get(key)
        if found is None:
            tp = types[site.path].get(site.value)
            init = inits[site.path].get(site.value)
            typed = None
            if tp is not None and init is None:
                typed = (content_of(site.path, site.value, tp), site.by_value, site.shape_input)
            found = by_type.get(typed) if typed else None
            if found is None:
                kind = _verdict(site, tp, init)
                length = _length(tp, init) if kind is None and not site.shape_input else 0
                found = (kind, length)
                if typed:
                    by_type[typed] = found
            judged[key] = found
        kind, length = found
        if kind is None:
            if length:  # a kept read of no data counts for nothing against the budget
                kept.append((length, order, site))
        else:
            plan[site] = (kind, cut(site.path, site.value, kind))
    total = sum(n for n, _, _ in kept)
    budget = _budget()
    if total <= budget:
        return plan  # within the budget: nothing more is cut, so the kept reads need no order
    # longest first, in site order among equals (``kept`` is in site order, and the sort is stable)
    for n, _, site in sorted(kept, key=itemgetter(0), reverse=True):
        if total <= budget or n == 0:
            break
        total -= n
        plan[site] = (_BIG, cut(site.path, site.value, _BIG))
    return plan


def _infer(
    model: onnx.ModelProto,
    check_type: bool,
    strict_mode: bool,
    data_prop: bool,
    serialized: bytes | None = None,
) -> onnx.ModelProto:
    return infer_shapes(
        model, check_type=check_type, strict_mode=strict_mode, data_prop=data_prop, serialized=serialized
    )


def infer_with_data_prop(
    model: onnx.ModelProto,
    *,
    check_type: bool = False,
    strict_mode: bool = False,
    serialized: bytes | None = None,
) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, data_prop=True)`` with data kept for small values only
    (see the module docstring): no step allocates in proportion to a large value's element count.
    ``serialized``: ``model.SerializeToString()`` when the caller made it already: the size check, the
    search for ops and every inference of ``model`` itself read it instead of serializing ``model`` again
    (a serialization each, protobuf's ``ByteSize()`` included).

    Raises:
        TooLargeError: the weightless graph's copies inference holds would pass the memory limit.
        What ``infer_shapes`` raises.
    """
    data = serialized if serialized is not None else model.SerializeToString()
    size = len(data)  # model.ByteSize(), which serializes the model again
    check_bytes(
        GRAPH_COPIES * size,
        what=f"shape inference ({GRAPH_COPIES} copies of the {size}-byte graph without weights)",
    )
    if not strict_mode and propagation_unread(model, data):
        # No node's inference reads propagated data: onnx's pass without it is the same model, and costs
        # no data (and it is the pass the model check just made: remembered, see last_inference).
        return _infer(model, check_type, strict_mode, False, data)
    shared = unshared(model)
    if shared is not None:  # subgraphs sharing value names: onnx would mix their data (subgraph_names)
        copy, back = shared
        return give_back(infer_with_data_prop(copy, check_type=check_type, strict_mode=strict_mode), back)
    paths = [path for path, _ in _graphs(model.graph)]
    sites = _sites(model, paths)
    if not sites:
        return _infer(model, check_type, strict_mode, True, data)
    inits = _initializers(model, paths)
    # the model's value names, walked once for all the cut copies below (each pass copies ``model``)
    names = cache(lambda: _value_names(model, paths))
    declared = _types(model, paths)
    declared_bytes: dict[GraphPath, dict[str, bytes]] = {}  # ``declared`` serialized, as it is asked
    shape_sites = [s for s in sites if s.shape_input]
    # inputs, initializers and declared shape tensors that would already blow up inference without data
    first = {s: c for s, c in _plan(shape_sites, declared, inits, declared_bytes).items() if c[0] == _BIG}
    graph_level = {v.name for v in model.graph.input}.union(*(inits[p].keys() for p in paths))
    if all(s.value in graph_level for s in sites if not s.shape_input):
        plan = _plan(sites, declared, inits, declared_bytes)  # every read value is typed before inference
        if not plan:
            return _infer(model, check_type, strict_mode, True, data)
        types, type_bytes = declared, declared_bytes
    else:
        if first:
            copy, renamed = cut_copy(model, paths, first, declared, inits, declared_bytes, names=names())
            base = _infer(copy, check_type, strict_mode, False)
            restore(base, paths, first, renamed)
        else:
            base = _infer(model, check_type, strict_mode, False, data)
        types, type_bytes = _types(base, paths), {}
        plan = _plan(sites, types, inits, type_bytes)
        if not plan or (not first and cuts_settled(model, paths, sites, plan, types, inits)):
            # (cuts no pass can reveal: the loop below would end on this same uncut pass, range_cuts)
            return _infer(model, check_type, strict_mode, True, data)
    inferred = model
    for attempt in range(_MAX_PASSES):
        pinned: set[tuple[GraphPath, str]] = set()
        copy, renamed = cut_copy(model, paths, plan, types, inits, type_bytes, pinned, names())
        pins = {(path, name): types[path].get(name) for path, name in pinned}
        inferred = _infer(copy, check_type, strict_mode, True)
        restore(inferred, paths, plan, renamed)
        types, type_bytes = _types(inferred, paths), {}
        again = _plan(sites, types, inits, type_bytes)
        if again == plan and all(types[path].get(name) == tp for (path, name), tp in pins.items()):
            break
        if again and _renamed_only(plan, again, model, paths):
            # The same cuts, their types differing only in the names onnx generated for unknown dimensions:
            # every later pass would repeat this one under another naming (see _renamed_only), so the
            # loop would end with these same "unknown" cuts, whose answer is the uncut pass below.
            plan = again
            break
        logger.debug("data propagation: %d cut input(s), pass %d changed them", len(again), attempt + 1)
        plan = again
        if not plan:
            break
    if all(kind == _UNKNOWN for kind, _ in plan.values()):
        # Nothing large was read, nor revealed: onnx's own pass gives the same types with the symbols it
        # names (the cut inputs' declared symbols would shift its unk__N numbering).
        return _infer(model, check_type, strict_mode, True, data)
    return inferred
