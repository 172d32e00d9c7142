"""Index constraints: which graph inputs reach the indices of which gather/scatter nodes, and the range
their values must stay in.

Graph inputs are traced forward to the ``indices`` input of every gather/scatter node (in the main graph
and in control-flow bodies) through ops that only move or copy values (Reshape, Unsqueeze, Concat,
Transpose, Expand, the data input of a gather, the values of TopK and Unique, ...) and through Add/Sub
with an integer constant (an offset). A negative-index normalisation ``Where(idx < 0, idx + n, idx)``
(jax2onnx writes one around every index; Cast on the way and either branch order too) counts as one use
of ``idx``, not two; Mod and a Clip with both bounds make any value valid, so tracing stops there (a
Clip with one bound, ``torch.clamp(min=0)``, is traced through). Model-local functions are
inlined first. The one start of a dynamic Slice (``Slice(x, i, i + 1, axis)``, jax2onnx's ``x[i]``)
counts as an index into the sliced dimension. Each such input is then drawn so that every index lands
inside the data dimension it addresses:

* Gather, GatherElements, Scatter, ScatterElements: ``data.shape[axis]``;
* GatherND: the dims ``data.shape[b:b+k]`` (``b`` = batch_dims, ``k`` = the last indices dim), the smallest
  of them when the input is not the indices tensor itself;
* ScatterND: the dims ``data.shape[:k]``.

For GatherND/ScatterND, when the input's values are known to sit in some components of the index tuples
(ids unsqueezed into a last axis of 1 and concatenated with other parts along it, as tf2onnx builds them),
only the dims of those components bound it (:mod:`dmlshim.inputs.trace`).

onnxruntime's com.microsoft GatherND (no batch_dims) reads its indices as ai.onnx GatherND with
``batch_dims`` 0 does, and an out-of-range index fails it the same way, so its indices are constrained
alike. com.microsoft EmbedLayerNormalization (onnxruntime's transformer optimizer fuses BERT's embeddings
into it) looks up rows of its word, segment and position tables with ``input_ids``, ``segment_ids`` and
``position_ids``; onnxruntime CPU refuses an id outside ``[0, rows)`` ("input index out of range"), so
those are constrained like a Gather's indices on axis 0.

Scatter without a reduction must not write one place twice (ONNX leaves it undefined and DirectML gives no
guaranteed winner), so such indices are drawn without repetition (see :mod:`dmlshim.inputs.values`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..graph import constant_node_value, is_gather_scatter, subgraphs, walk_nodes
from ..model.data_prop import infer_with_data_prop
from ..model.weightless import without_weights
from ..translate.static_if import settle_static_ifs
from .symbols import resolve_input_shapes
from .trace import Shapes, Traced, attr, trace

__all__ = ["DEFAULT_DIM", "IndexConstraint", "InputSpec", "light_copy", "plan_for_shapes", "plan_inputs"]

logger = logging.getLogger(__name__)

DEFAULT_DIM = 2
"""Size given to a symbolic or unknown dimension that the caller did not fix."""

_SCATTER_OPS = frozenset({"Scatter", "ScatterElements", "ScatterND"})
_INDEX_ELEM_TYPES = frozenset(
    {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
     TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
)  # fmt: skip


@dataclass(frozen=True)
class IndexConstraint:
    """What one gather/scatter node requires of a graph input that reaches its indices.

    Attributes:
        node: the node name (``owner/body/name`` inside subgraphs).
        op_type: the node's op type.
        low: smallest allowed value of the *graph input* (offsets on the way already applied).
        high: one past the largest allowed value.
        unique: the indices must not repeat (scatter without reduction).
        direct: the graph input is the indices tensor itself (same shape and layout).
        structure: how repetition is judged when ``direct``: ``"lines"`` along ``axis`` (ScatterElements)
            or ``"tuples"`` over the last dimension (ScatterND); ``"values"`` otherwise.
        axis: the scatter axis for ``"lines"``.
        tuple_dims: the data dims an index tuple addresses, for ``"tuples"``.
        offset: what the path adds to the graph input's value before it is an index.
        exact: the input's value (plus ``offset``) is the index itself, not one digit of a flattened
            multi-index (where counting from the end is not the same element).
    """

    node: str
    op_type: str
    low: int
    high: int
    unique: bool = False
    direct: bool = False
    structure: str = "values"
    axis: int = 0
    tuple_dims: tuple[int, ...] = ()
    offset: int = 0
    exact: bool = True


@dataclass(frozen=True)
class InputSpec:
    """How one graph input is generated.

    Attributes:
        name: the graph input name.
        shape: the concrete shape.
        elem_type: the ONNX element type.
        constraints: index constraints from the gather/scatter nodes the input feeds (empty: free values).
    """

    name: str
    shape: tuple[int, ...]
    elem_type: int
    constraints: tuple[IndexConstraint, ...] = ()

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))

    @property
    def bounds(self) -> tuple[int, int] | None:
        """The intersection of every constraint's ``[low, high)``, or None when unconstrained."""
        if not self.constraints:
            return None
        return max(c.low for c in self.constraints), min(c.high for c in self.constraints)


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def _with_static_inputs(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for vi in fixed.graph.input:
        if vi.name not in shapes:
            continue
        tt = vi.type.tensor_type
        tt.ClearField("shape")
        tt.shape.SetInParent()
        for d in shapes[vi.name]:
            tt.shape.dim.add().dim_value = d
    return fixed


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        inferred = infer_with_data_prop(model)
    except Exception as exc:  # onnx raises several unrelated types here
        logger.warning("shape inference failed (%s): index ranges may be conservative", exc)
        return model
    try:
        # an If decided by sizes or ranks (TorchScript's ``if x.dim() == 0``): its outputs take the
        # shapes of the branch that runs, so the dims its values index are known
        return settle_static_ifs(inferred, infer_with_data_prop)
    except Exception as exc:  # onnx raises several unrelated types here
        logger.debug("If outputs left as ONNX infers them (%s)", exc)
        return inferred


def _shape_table(graph: onnx.GraphProto) -> dict[str, tuple[int | None, ...]]:
    table: dict[str, tuple[int | None, ...]] = {}

    def add(vi: onnx.ValueInfoProto) -> None:
        if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
            return
        table[vi.name] = tuple(
            int(d.dim_value) if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim
        )

    def visit(g: onnx.GraphProto) -> None:
        for vi in [*g.input, *g.value_info, *g.output]:
            add(vi)
        for t in g.initializer:
            table[t.name] = tuple(int(d) for d in t.dims)
        for node in g.node:
            for _, sub in subgraphs(node):
                visit(sub)

    visit(graph)
    return table


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}

    def visit(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                continue  # a weight left in the model's files (never a shape): not read
            found[t.name] = numpy_helper.to_array(t)
        for node in g.node:
            value = constant_node_value(node)
            if value is not None:
                found[node.output[0]] = value
            for _, sub in subgraphs(node):
                visit(sub)

    visit(graph)
    return found


def _reads_indices(node: onnx.NodeProto) -> bool:
    """A node whose second input indexes its first: the six ai.onnx ops and com.microsoft GatherND."""
    return is_gather_scatter(node) or (node.domain == "com.microsoft" and node.op_type == "GatherND")


#: com.microsoft EmbedLayerNormalization's lookups, (ids input, table input) positions: input_ids into
#: word_embedding, segment_ids into segment_embedding, position_ids into position_embedding.
_EMBED_LOOKUPS = ((0, 2), (1, 4), (8, 3))


def _embed_lookups(
    node: onnx.NodeProto, shapes: Mapping[str, tuple[int | None, ...]]
) -> list[tuple[str, _Requirement | None]]:
    """The ids inputs of an EmbedLayerNormalization node with each one's requirement (the table's rows)."""
    found: list[tuple[str, _Requirement | None]] = []
    for ids, table in _EMBED_LOOKUPS:
        if len(node.input) <= max(ids, table) or not node.input[ids] or not node.input[table]:
            continue
        rows = shapes.get(node.input[table])
        found.append((node.input[ids], _Requirement((rows[0],), False, "values") if rows else None))
    return found


@dataclass(frozen=True)
class _Requirement:
    """What a node asks of its indices: the data dims they address (None where unknown; one dim for
    Gather/GatherElements/Scatter/ScatterElements, the tuple's dims for GatherND/ScatterND)."""

    dims: tuple[int | None, ...]
    unique: bool
    structure: str
    axis: int = 0


def _node_requirement(
    node: onnx.NodeProto, shapes: Mapping[str, tuple[int | None, ...]]
) -> _Requirement | None:
    """The requirement of a node's indices; None if the data's rank (or the axis) is unknown."""
    data = shapes.get(node.input[0]) if node.input else None
    indices = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if data is None or not data:
        return None
    op = node.op_type
    reduction = str(attr(node, "reduction", "none"))
    unique = op in _SCATTER_OPS and reduction == "none"
    r = len(data)
    if op in ("Gather", "GatherElements", "Scatter", "ScatterElements"):
        axis = int(attr(node, "axis", 0))  # type: ignore[call-overload]
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis < r:
            return None
        return _Requirement((data[axis],), unique, "lines" if op != "Gather" else "values", axis)
    k = indices[-1] if indices else None
    b = int(attr(node, "batch_dims", 0)) if op == "GatherND" else 0  # type: ignore[call-overload]
    addressed = data[b : b + k] if k is not None else data[b:]
    return _Requirement(tuple(addressed), unique, "tuples") if addressed else None


def _is_dynamic_slice(node: onnx.NodeProto, shapes: Mapping[str, tuple[int | None, ...]]) -> bool:
    """A Slice (opset 10+) with one start, such as jax2onnx writes for ``x[i]`` with a traced ``i``
    (``Slice(x, i, i + 1, axis)``): an out-of-range start gives an empty slice that a later Squeeze
    refuses, so the start is an index into the sliced dimension."""
    return (
        node.op_type == "Slice"
        and node.domain in ("", "ai.onnx")
        and len(node.input) >= 3
        and shapes.get(node.input[1]) == (1,)
    )


def _slice_requirement(
    node: onnx.NodeProto, shapes: Mapping[str, tuple[int | None, ...]], constants: Mapping[str, np.ndarray]
) -> _Requirement | None:
    """The sliced dimension, as a Gather's requirement; None when the axis or the data's rank is unknown."""
    data = shapes.get(node.input[0])
    if not data:
        return None
    axis = 0
    if len(node.input) > 3 and node.input[3]:
        axes = constants.get(node.input[3])
        if axes is None or axes.size != 1:
            return None
        axis = int(axes.reshape(-1)[0])
    axis = axis + len(data) if axis < 0 else axis
    if not 0 <= axis < len(data):
        return None
    return _Requirement((data[axis],), False, "values", axis)


def _bound(requirement: _Requirement, traced: Traced, shapes: Shapes) -> int | None:
    """The size the traced input's values must stay under: the smallest data dim its values address
    (only the index-tuple components they sit in, when known); None when one of those is unknown."""
    dims = requirement.dims
    where = traced.component
    if requirement.structure == "tuples" and where is not None:
        width = 1 if where.single else (shapes.get(traced.source) or (None,))[-1]
        if width is not None and where.start + width <= len(dims):
            dims = dims[where.start : where.start + width]
    if not dims or any(d is None for d in dims):
        return None
    return min(int(d) for d in dims if d is not None)


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model for shape inference: large initializers become typed graph inputs.

    Their values never decide a shape or an index bound (only small constants do), and leaving them out
    keeps repeated shape inference cheap on models with real weights.
    """
    return without_weights(model)


def plan_for_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], *, light: onnx.ModelProto | None = None
) -> tuple[InputSpec, ...]:
    """The index constraints of every graph input of ``model`` when the inputs have these shapes.

    Args:
        model: the model.
        shapes: every graph input's concrete shape.
        light: ``light_copy(model)``, when the caller plans several shape choices.
    """
    base = light if light is not None else light_copy(model)
    if base.functions:
        # onnxruntime inlines model-local functions before it places nodes; their indices count as well.
        from onnx import inliner

        base = inliner.inline_local_functions(base)
    inferred = _infer(_with_static_inputs(base, shapes))
    table = _shape_table(inferred.graph)
    constants = _constants(inferred.graph)
    producers: dict[str, onnx.NodeProto] = {}
    for _, node in walk_nodes(inferred.graph):
        for out in node.output:
            if out:
                producers[out] = node
    names = set(shapes)
    found: dict[str, list[IndexConstraint]] = {n: [] for n in shapes}
    graph = _Graph(names, producers, constants, table)
    for node_name, node in walk_nodes(inferred.graph):
        for read in _index_reads(node, table, constants):
            _add_constraints(found, node_name, node, read, graph)
    return tuple(
        InputSpec(vi.name, shapes[vi.name], vi.type.tensor_type.elem_type, tuple(found[vi.name]))
        for vi in _graph_inputs(model)
    )


def _index_reads(
    node: onnx.NodeProto, table: Mapping[str, tuple[int | None, ...]], constants: Mapping[str, np.ndarray]
) -> list[tuple[str, _Requirement | None, bool]]:
    """The inputs of ``node`` that index a tensor: (input name, requirement, whether a dynamic slice)."""
    if _is_dynamic_slice(node, table):
        requirement = _slice_requirement(node, table, constants)
        return [] if requirement is None else [(node.input[1], requirement, True)]
    if node.domain == "com.microsoft" and node.op_type == "EmbedLayerNormalization":
        return [(name, requirement, False) for name, requirement in _embed_lookups(node, table)]
    if not _reads_indices(node) or len(node.input) < 2:
        return []
    return [(node.input[1], _node_requirement(node, table), False)]


@dataclass(frozen=True)
class _Graph:
    """What tracing reads: the graph inputs, each value's producer, the constants and the shapes."""

    names: set[str]
    producers: Mapping[str, onnx.NodeProto]
    constants: Mapping[str, np.ndarray]
    table: Shapes


def _add_constraints(
    found: dict[str, list[IndexConstraint]],
    node_name: str,
    node: onnx.NodeProto,
    read: tuple[str, _Requirement | None, bool],
    graph: _Graph,
) -> None:
    """Append to ``found`` what ``node`` asks of every graph input reaching the indices input of ``read``
    (input name, requirement, whether a dynamic slice's start)."""
    indices, requirement, sliced = read
    table = graph.table
    for traced in trace(indices, graph.names, graph.producers, graph.constants, table):
        source, offset = traced.source, traced.offset
        bound = _bound(requirement, traced, table) if requirement is not None else None
        if sliced and bound is None:
            continue  # a slice start into a dimension of unknown size: left free, as before
        if requirement is None or bound is None:
            logger.warning(
                "input %r feeds the indices of %s %r whose data shape is unknown: drawing zeros",
                source,
                node.op_type,
                node_name,
            )
            found[source].append(IndexConstraint(node_name, node.op_type, -offset, 1 - offset))
            continue
        direct = traced.direct
        high = bound // traced.scale - offset
        if traced.cap is not None:
            high = min(high, traced.cap - offset)
        found[source].append(
            IndexConstraint(
                node=node_name,
                op_type=node.op_type,
                low=-offset,
                high=high,
                unique=requirement.unique,
                direct=direct,
                structure=requirement.structure if direct else "values",
                axis=requirement.axis,
                tuple_dims=tuple(int(d) for d in requirement.dims if d is not None) if direct else (),
                offset=offset,
                exact=traced.scale == 1 and traced.cap is None,
            )
        )


def plan_inputs(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    default_dim: int = DEFAULT_DIM,
) -> tuple[InputSpec, ...]:
    """Decide the shape, type and index constraints of every graph input (free symbols = ``default_dim``).

    Args:
        model: the model.
        input_shapes: see :func:`dmlshim.inputs.symbols.resolve_input_shapes`.
        default_dim: see :func:`dmlshim.inputs.symbols.resolve_input_shapes`.

    Returns:
        One spec per graph input, in graph order.

    Raises:
        BadInputError: see :func:`dmlshim.inputs.symbols.resolve_input_shapes`.
    """
    return plan_for_shapes(model, resolve_input_shapes(model, input_shapes, default_dim))
