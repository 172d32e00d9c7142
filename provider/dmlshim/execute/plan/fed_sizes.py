"""Gathers whose output size the feeds' shapes set, sized against the memory limit before any run.

A gather's output can dwarf its inputs: a 1000 x 1000 float table gathered by 10^6 fed indices is 4 GB
where the feeds are 8 MB. The partitioned steps size each gather before running it, but onnxruntime
allocates first wherever it computes the gather itself: the whole-model check (and its lean session), the
custom-op engine's session (onnxruntime allocates a custom kernel's output), the cpu engine. So the
session sizes such a gather from the feeds' shapes before handing the run to any engine, and refuses it
with the partitioned steps' own error (:func:`dmlshim.limits.check_tensor`).

Which gathers: the top-level ``Gather``, ``GatherElements`` and ``GatherND`` whose data and indices shapes
follow from the feeds' shapes alone, and the scatters (``ScatterElements``, ``ScatterND``, ``Scatter``)
whose data shape does (their output is a copy of the data: a string scatter of a 4M-element fed table ran
at 638 MB peak under a 50 MB limit in the cpu and custom-op engines, where the partitioned engine refused
it at its own step; a float one of 64 MB likewise ran): each is fed (its shape is the feed's), or each of
its dimensions, in onnx's inference of the model without its weights (no data propagation, the pass the
model check ran), is a size or a symbolic name a graph input declares (the feeds of the inputs declaring
it tell its size when they agree on it, as :class:`dmlshim.execute.proofs.symbol_shapes.FeedShapes` reads
them). A gather or scatter reading a value whose shape a feed's values set (``Gather(t, Expand(0, s))``,
a ``Loop``'s scan) is sized from that shape (:mod:`.valued_shapes`); a size only the values tell (indices
from ``NonZero``) is sized where the gather runs, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...graph import display_names
from ...limits import check_tensor, gather_scatter_output_shape, memory_limit
from ...model.last_inference import infer_shapes
from ...model.weightless import without_weights
from ..proofs.symbol_shapes import input_symbols, value_shape
from .checks import declared_values, downstream_of
from .computed_values import ComputedValues, guard_holds
from .fed_values import VALUE_INPUTS, VALUED_OPS, FedValued, valued_nodes
from .small_values import small_value
from .valued_shapes import ShapeStep, carried_steps, loop_scans

__all__ = ["FedGather", "FedSizes"]

logger = logging.getLogger(__name__)

SCATTERS = frozenset({"Scatter", "ScatterElements", "ScatterND"})
"""Their output is their data's shape: sized from the data alone (the indices may be anything)."""
SIZED_OPS = frozenset({"Gather", "GatherElements", "GatherND"}) | SCATTERS
_NESTING = frozenset({"If", "Loop", "Scan"})
"""Ops whose subgraphs may hold nodes sized from computed values (:mod:`.computed_values`)."""

Dims = tuple[int | str, ...]


def _numpy_type(elem_type: int) -> Any:
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type) if elem_type else None
    except (KeyError, TypeError, ValueError):
        return None


def _static(part: str | Dims) -> bool:
    return not isinstance(part, str) and all(isinstance(d, int) for d in part)


@dataclass(frozen=True)
class FedGather:
    """A gather sized from the feeds: its name, op, attributes, output, output element type, and for
    its data and indices either a fed input's name (its shape is the feed's) or its dims."""

    name: str
    op_type: str
    attributes: Mapping[str, Any]
    output: str
    elem_type: int
    inputs: tuple[str | Dims, str | Dims]


@dataclass(frozen=True)
class FedSizes:
    """The gathers of a model sized from each run's feeds (:meth:`check`)."""

    gathers: tuple[FedGather, ...] = ()
    symbols: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    defaults: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """The shapes of the initializers listed as graph inputs, for a run that feeds none over them."""
    declaring: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    """Every graph input and axis declaring each symbol: onnxruntime does not hold feeds to one size for
    a symbol two inputs declare, and a gather sized from a symbol the feeds disagree on is sized where it
    runs."""
    valued: tuple[FedValued, ...] = ()
    """The nodes sized from fed shape-like values (Expand, ConstantOfShape, Tile, Range: see
    :mod:`.fed_values`)."""
    computed: ComputedValues = field(default_factory=ComputedValues)
    """The shape-like values those nodes read that the graph computes from the feeds
    (:mod:`.computed_values`)."""
    carried: tuple[ShapeStep, ...] = ()
    """The elementwise nodes carrying on the shape of a value sized from the feeds' values
    (:mod:`.valued_shapes`)."""
    valued_gathers: tuple[FedGather, ...] = ()
    """The gathers reading such a value (or a carried one): sized with the values, on every run."""

    @classmethod
    def of(cls, model: onnx.ModelProto) -> FedSizes:
        """The gathers of ``model`` whose output size follows from the feeds' shapes (none when there
        are none, or onnx cannot infer the model)."""
        graph = model.graph
        names = display_names(graph.node)
        nodes = [
            (node, name)
            for node, name in zip(graph.node, names, strict=True)
            if node.op_type in SIZED_OPS and node.domain in ("", "ai.onnx")
            if len(node.input) >= 2 and all(node.input[:2])
        ]
        if not nodes and not any(n.op_type in VALUED_OPS or n.op_type in _NESTING for n in graph.node):
            return cls()
        initializers = {t.name: t for t in graph.initializer}
        fed = {v.name for v in graph.input}  # an initializer listed as an input may be fed over
        symbols = input_symbols(graph)
        declaring: dict[str, list[tuple[str, int]]] = {}
        for value in graph.input:
            for axis, d in enumerate(value.type.tensor_type.shape.dim):
                if d.dim_param and not d.HasField("dim_value"):
                    declaring.setdefault(d.dim_param, []).append((value.name, axis))
        unchecked = _declared_downstream(graph)
        types: dict[str, onnx.TypeProto] = {}
        try:
            inferred = infer_shapes(without_weights(model))
        except Exception as exc:  # onnx cannot infer the model: sized where each gather runs
            logger.debug("gathers sized where they run: no inference (%s)", exc)
            inferred = None
        if inferred is not None:
            for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
                types.setdefault(vi.name, vi.type)

        def type_of(name: str) -> onnx.TypeProto | None:
            # an initializer no inference typed: its own type, made when a gather or sized node asks
            tp = types.get(name)
            if tp is None and name in initializers:
                tensor = initializers[name]
                tp = types[name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
            return tp

        def dims_of(name: str) -> str | Dims | None:
            if name in fed:
                return name
            if name in unchecked:
                return None  # a shape the model declares: onnxruntime runs it whatever the run's shape
            tp = type_of(name)
            if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
                return None
            dims: list[int | str] = []
            for d in tp.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.dim_param in symbols:
                    dims.append(d.dim_param)
                else:
                    return None
            return tuple(dims)

        def elem_type(name: str) -> int:
            tp = type_of(name)
            return int(tp.tensor_type.elem_type) if tp is not None and tp.HasField("tensor_type") else 0

        defaults = {n: tuple(int(d) for d in t.dims) for n, t in initializers.items() if n in fed}
        shared = {k: tuple(v) for k, v in declaring.items() if len(v) > 1}
        targets = {
            node.input[p]
            for node in graph.node
            if node.op_type in VALUED_OPS
            for p in VALUE_INPUTS[node.op_type]
            # an initializer listed as an input is read at its default when the run does not feed it
            if p < len(node.input) and (node.input[p] not in fed or node.input[p] in initializers)
        }
        targets |= {  # a Loop's trip count and first condition size its scan outputs (:mod:`.valued_shapes`)
            name for node in graph.node if node.op_type == "Loop" for name in node.input[:2] if name
        }
        opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        nested = any(n.op_type in _NESTING for n in graph.node)  # sized nodes in branches, bodies
        computed = ComputedValues.of(graph, fed, targets, opset) if targets or nested else ComputedValues()
        known = fed | computed.names | set(computed.constants)
        branch = computed.branch_nodes
        valued = tuple(  # a node reading constants alone is sized when the session is built
            v
            for v in (
                *valued_nodes(graph.node, names, known, dims_of, elem_type),
                *valued_nodes(
                    [b.node for b in branch],
                    [b.name for b in branch],
                    known,
                    dims_of,
                    elem_type,
                    [b.guard for b in branch],
                ),
            )
            if any(n in fed or n in computed.names for n in v.values)
        )
        valued += tuple(v for v in loop_scans(model, names, known) if v.values[0] in fed | computed.names)
        sized = {v.output for v in valued if not v.guard or v.op_type == "Loop"}
        carried = carried_steps(graph.node, names, sized, dims_of, elem_type)
        sized |= {c.output for c in carried}

        gathers, valued_gathers = [], []
        for node, name in nodes:
            scatter = node.op_type in SCATTERS
            parts = [p if p in sized else dims_of(p) for p in node.input[: 1 if scatter else 2]]
            data, indices = parts[0], () if scatter else parts[1]
            if data is None or indices is None or (_static(data) and _static(indices)):
                continue  # a size no feed sets is checked when the session is built, or where it runs
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            gather = FedGather(
                name, node.op_type, attributes, node.output[0], elem_type(node.input[0]), (data, indices)
            )
            read = node.input[: 1 if scatter else 2]
            (valued_gathers if any(p in sized for p in read) else gathers).append(gather)
        return cls(
            tuple(gathers), symbols, defaults, shared, valued, computed, carried, tuple(valued_gathers)
        )

    def check(self, feeds: Mapping[str, Any], *, numpy_values: bool = True) -> None:
        """Refuse a run one of whose gathers' output would pass the memory limit (``numpy_values``: the
        engine holds values as numpy arrays, which refuse some empty shapes: :mod:`.fed_values`).

        Raises:
            TooLargeError: naming the gather, its op, its output and the bytes it would need.
        """
        for gather in self.gathers:
            self._check_gather(gather, feeds, {})
        self.check_values(feeds, numpy_values=numpy_values)

    def check_values(self, feeds: Mapping[str, Any], *, numpy_values: bool = True) -> None:
        """Refuse a run one of whose nodes sized from the feeds' *values* (a fed or computed shape, repeats
        or bound: :mod:`.fed_values`) would pass the memory limit. A run repeating the dtypes and shapes of
        an accepted one (the steady lane's) needs this check alone: its gathers' sizes follow from shapes."""
        if not self.valued:
            return
        computing = self.computed.steps or self.computed.constants
        values = {**feeds, **self.computed.values(feeds)} if computing and self.valued else feeds
        shapes: dict[str, tuple[int, ...]] = {}  # the sized values' shapes, for the nodes reading them
        for node in self.valued:
            if node.guard and not guard_holds(node.guard, lambda n: small_value(values.get(n))):
                continue  # inside a branch or body the run does not take (or not known to)
            shape = node.check(values, lambda part: self._shape(part, feeds), numpy_values=numpy_values)
            if shape is not None and (not node.guard or node.op_type == "Loop"):
                shapes[node.output] = shape
        if not shapes:
            return
        limit = memory_limit()  # read once for the run's carried steps and gathers
        for step in self.carried:
            shape = step.shape(lambda part: self._shape(part, feeds, shapes), limit)
            if shape is not None:
                shapes[step.output] = shape
        for gather in self.valued_gathers:
            self._check_gather(gather, feeds, shapes, limit)

    def _check_gather(
        self,
        gather: FedGather,
        feeds: Mapping[str, Any],
        shapes: Mapping[str, tuple[int, ...]],
        limit: int | None = None,
    ) -> None:
        """Refuse ``gather`` when its output would pass the memory limit (TooLargeError naming it); its
        parts' shapes from the feeds and the values already sized (``shapes``)."""
        parts = [self._shape(part, feeds, shapes) for part in gather.inputs]
        if parts[0] is None or parts[1] is None:
            return
        shape = gather_scatter_output_shape(gather.op_type, gather.attributes, parts)
        if shape is None:
            return
        fed = gather.inputs[0]
        value = feeds.get(fed) if isinstance(fed, str) else None
        dtype = value.dtype if isinstance(value, np.ndarray) else _numpy_type(gather.elem_type)
        if dtype is None:
            return
        check_tensor(
            shape,
            dtype,
            tensor=gather.output,
            node=gather.name,
            op_type=gather.op_type,
            what="output",
            limit=limit,
        )

    def _shape(
        self,
        part: str | Dims,
        feeds: Mapping[str, Any],
        shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> tuple[int, ...] | None:
        if isinstance(part, str):
            if shapes and part in shapes:  # a value sized from this run's values
                return shapes[part]
            return value_shape(feeds.get(part)) if part in feeds else self.defaults.get(part)
        shape: list[int] = []
        for d in part:
            if isinstance(d, int):
                shape.append(d)
                continue
            feed, axis = self.symbols[d]
            dims = value_shape(feeds.get(feed))
            if dims is None or axis >= len(dims):
                return None
            if not self._agreed(d, int(dims[axis]), feeds):
                return None
            shape.append(int(dims[axis]))
        return tuple(shape)

    def _agreed(self, symbol: str, size: int, feeds: Mapping[str, Any]) -> bool:
        """Whether every fed input declaring ``symbol`` has ``size`` there."""
        for feed, axis in self.declaring.get(symbol, ()):
            dims = value_shape(feeds.get(feed)) if feed in feeds else None
            if dims is not None and axis < len(dims) and int(dims[axis]) != size:
                return False
        return True


def _declared_downstream(graph: onnx.GraphProto) -> frozenset[str]:
    """The values of ``graph`` whose shape in onnx's inference may come from a shape the model declares for
    a value a node computes (``value_info``, an output): those shapes do not size a run."""
    declared = declared_values(graph, nested=False)
    computed = {name for node in graph.node for name in node.output if name in declared}
    return frozenset(computed | downstream_of(graph, declared))
