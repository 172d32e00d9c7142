"""Index constraints: which graph inputs reach the indices of which gather/scatter nodes, and the range
their values must stay in.

Graph inputs are traced forward to the ``indices`` input of every gather/scatter node (in the main graph
and in control-flow bodies) through ops that only move or copy values (Reshape, Unsqueeze, Concat,
Transpose, Expand, the data input of a gather, ...) and through Add/Sub with an integer constant (an
offset). A negative-index normalisation ``Where(idx < 0, idx + n, idx)`` (jax2onnx writes one around every
index; Cast on the way and either branch order too) counts as one use of ``idx``, not two; Mod and Clip
make any value valid, so tracing stops there. Model-local functions are inlined first. Each such input
is then drawn so that every index lands inside the data dimension it addresses:

* Gather, GatherElements, Scatter, ScatterElements: ``data.shape[axis]``;
* GatherND: the dims ``data.shape[b:b+k]`` (``b`` = batch_dims, ``k`` = the last indices dim), the smallest
  of them when the input is not the indices tensor itself;
* ScatterND: the dims ``data.shape[:k]``.

onnxruntime's com.microsoft GatherND (no batch_dims) reads its indices as ai.onnx GatherND with
``batch_dims`` 0 does, and an out-of-range index fails it the same way, so its indices are constrained
alike.

Scatter without a reduction must not write one place twice (ONNX leaves it undefined and DirectML gives no
guaranteed winner), so such indices are drawn without repetition (see :mod:`dmlshim.inputs.values`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..graph import is_gather_scatter, subgraphs, walk_nodes
from ..weightless import without_weights
from .symbols import resolve_input_shapes

__all__ = ["DEFAULT_DIM", "IndexConstraint", "InputSpec", "light_copy", "plan_for_shapes", "plan_inputs"]

logger = logging.getLogger(__name__)

DEFAULT_DIM = 2
"""Size given to a symbolic or unknown dimension that the caller did not fix."""

# Ops whose output values are a subset (or a copy) of the values of the listed inputs.
_VALUE_PRESERVING: Mapping[str, tuple[int, ...]] = {
    "Identity": (0,),
    "Cast": (0,),
    "Reshape": (0,),
    "Unsqueeze": (0,),
    "Squeeze": (0,),
    "Flatten": (0,),
    "Transpose": (0,),
    "Expand": (0,),
    "Slice": (0,),
    "Split": (0,),
    "Tile": (0,),
    "Concat": (),  # every input
    "Gather": (0,),
    "GatherElements": (0,),
    "GatherND": (0,),
    "Where": (1, 2),
    "Scatter": (0, 2),
    "ScatterElements": (0, 2),
    "ScatterND": (0, 2),
}
# The subset of the above that keeps shape and layout (the graph input *is* the indices tensor).
_LAYOUT_PRESERVING = frozenset({"Identity", "Cast"})

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
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # onnx raises several unrelated types here
        logger.warning("shape inference failed (%s): index ranges may be conservative", exc)
        return model


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
            found[t.name] = numpy_helper.to_array(t)
        for node in g.node:
            if node.op_type == "Constant" and node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        found[node.output[0]] = numpy_helper.to_array(attr.t)
                    elif attr.name in ("value_int", "value_ints"):
                        found[node.output[0]] = np.asarray(helper.get_attribute_value(attr), dtype=np.int64)
            for _, sub in subgraphs(node):
                visit(sub)

    visit(graph)
    return found


def _int_scalar(value: np.ndarray | None) -> int | None:
    """The single integer a constant holds (every element equal), else None."""
    if value is None or value.size == 0 or value.dtype.kind not in "iu":
        return None
    first = value.reshape(-1)[0]
    return int(first) if bool(np.all(value == first)) else None


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _reads_indices(node: onnx.NodeProto) -> bool:
    """A node whose second input indexes its first: the six ai.onnx ops and com.microsoft GatherND."""
    return is_gather_scatter(node) or (node.domain == "com.microsoft" and node.op_type == "GatherND")


def _node_requirement(
    node: onnx.NodeProto, shapes: Mapping[str, tuple[int | None, ...]]
) -> tuple[int, bool, str, int, tuple[int, ...]] | None:
    """(bound, unique, structure, axis, tuple_dims) of a node's indices; None if data's shape is unknown."""
    data = shapes.get(node.input[0]) if node.input else None
    indices = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if data is None or not data:
        return None
    op = node.op_type
    reduction = str(_attr(node, "reduction", "none"))
    unique = op in _SCATTER_OPS and reduction == "none"
    r = len(data)
    if op in ("Gather", "GatherElements", "Scatter", "ScatterElements"):
        axis = int(_attr(node, "axis", 0))  # type: ignore[call-overload]
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis < r or data[axis] is None:
            return None
        return int(data[axis]), unique, "lines" if op != "Gather" else "values", axis, ()
    k = indices[-1] if indices else None
    b = int(_attr(node, "batch_dims", 0)) if op == "GatherND" else 0  # type: ignore[call-overload]
    addressed = data[b : b + k] if k is not None else data[b:]
    if not addressed or any(d is None for d in addressed):
        return None
    dims = tuple(int(d) for d in addressed if d is not None)
    return min(dims), unique, "tuples", 0, dims


_PASS_THROUGH = frozenset({"Identity", "Cast", "CastLike"})
_NEGATIVE_TESTS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})


def _strip(name: str, producers: Mapping[str, onnx.NodeProto]) -> str:
    """``name`` with Identity/Cast producers skipped (the value they copy)."""
    for _ in range(64):
        node = producers.get(name)
        if node is None or node.op_type not in _PASS_THROUGH or not node.input:
            return name
        name = node.input[0]
    return name


def _normalised_branch(node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto]) -> str | None:
    """The plain branch of a negative-index normalisation ``Where(c, x + n, x)`` (or ``Where(c, x,
    x + n)``, or ``x - n``): the two branches are one value ``x`` and ``x`` plus or minus something, and
    the condition compares ``x``. None for any other Where (both branches are then real uses)."""
    cond, first, second = node.input
    tested = producers.get(_strip(cond, producers))
    if tested is None or tested.op_type not in _NEGATIVE_TESTS:
        return None
    compared = {_strip(i, producers) for i in tested.input}
    for shifted, plain in ((first, second), (second, first)):
        base = _strip(plain, producers)
        add = producers.get(_strip(shifted, producers))
        if add is None or add.op_type not in ("Add", "Sub") or len(add.input) != 2:
            continue
        operands = [_strip(i, producers) for i in add.input]
        if base in operands and (add.op_type == "Add" or operands[0] == base) and base in compared:
            return plain
    return None


def _trace(
    name: str,
    graph_inputs: set[str],
    producers: Mapping[str, onnx.NodeProto],
    constants: Mapping[str, np.ndarray],
    offset: int = 0,
    direct: bool = True,
    depth: int = 0,
) -> Iterator[tuple[str, int, bool]]:
    """Yield (graph input, offset, direct) for every graph input whose values reach ``name``."""
    if depth > 64:
        return
    if name in graph_inputs:
        yield name, offset, direct
        return
    node = producers.get(name)
    if node is None:
        return
    op = node.op_type
    if op in ("Add", "Sub") and len(node.input) == 2:
        left, right = node.input
        c_right = _int_scalar(constants.get(right))
        c_left = _int_scalar(constants.get(left))
        if c_right is not None:
            delta = c_right if op == "Add" else -c_right
            yield from _trace(left, graph_inputs, producers, constants, offset + delta, False, depth + 1)
        elif c_left is not None and op == "Add":
            yield from _trace(right, graph_inputs, producers, constants, offset + c_left, False, depth + 1)
        return
    if op == "Where" and len(node.input) == 3:
        plain = _normalised_branch(node, producers)
        if plain is not None:
            # Where(idx < 0, idx + n, idx): a negative index wrapped; the index is idx itself.
            yield from _trace(plain, graph_inputs, producers, constants, offset, direct, depth + 1)
            return
    if op not in _VALUE_PRESERVING:
        return
    positions = _VALUE_PRESERVING[op] or tuple(range(len(node.input)))
    keeps = direct and op in _LAYOUT_PRESERVING
    for pos in positions:
        if pos < len(node.input) and node.input[pos]:
            yield from _trace(node.input[pos], graph_inputs, producers, constants, offset, keeps, depth + 1)


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
    for node_name, node in walk_nodes(inferred.graph):
        if not _reads_indices(node) or len(node.input) < 2:
            continue
        requirement = _node_requirement(node, table)
        for source, offset, direct in _trace(node.input[1], names, producers, constants):
            if requirement is None:
                logger.warning(
                    "input %r feeds the indices of %s %r whose data shape is unknown: drawing zeros",
                    source,
                    node.op_type,
                    node_name,
                )
                found[source].append(IndexConstraint(node_name, node.op_type, -offset, 1 - offset))
                continue
            bound, unique, structure, axis, dims = requirement
            found[source].append(
                IndexConstraint(
                    node=node_name,
                    op_type=node.op_type,
                    low=-offset,
                    high=bound - offset,
                    unique=unique,
                    direct=direct,
                    structure=structure if direct else "values",
                    axis=axis,
                    tuple_dims=dims,
                    offset=offset,
                )
            )
    return tuple(
        InputSpec(vi.name, shapes[vi.name], vi.type.tensor_type.elem_type, tuple(found[vi.name]))
        for vi in _graph_inputs(model)
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
