"""Random inputs for a model: the right shapes and types, with indices that are valid for the nodes they feed.

Graph inputs are traced forward to the ``indices`` input of every gather/scatter node (in the main graph
and in control-flow bodies) through ops that only move or copy values (Reshape, Unsqueeze, Concat,
Transpose, Expand, the data input of a gather, ...) and through Add/Sub with an integer constant (an
offset). Each such input is then drawn so that every index lands inside the data dimension it addresses:

* Gather, GatherElements, Scatter, ScatterElements: ``data.shape[axis]``;
* GatherND: the dims ``data.shape[b:b+k]`` (``b`` = batch_dims, ``k`` = the last indices dim), the smallest
  of them when the input is not the indices tensor itself;
* ScatterND: the dims ``data.shape[:k]``.

Scatter without a reduction must not write one place twice (ONNX leaves it undefined and DirectML gives no
guaranteed winner), so such indices are drawn without repetition: per line along the axis
(ScatterElements) or as distinct tuples (ScatterND) when the graph input *is* the indices tensor, and as
all-distinct values otherwise.

Symbolic dimensions come from a mapping (an input name -> its full shape, or a ``dim_param`` name -> its
size) or default to 2.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import BadInputError, BadModelError
from .graph import is_gather_scatter, subgraphs, walk_nodes
from .limits import check_tensor
from .modelcheck import check_well_formed

if TYPE_CHECKING:
    from .execute.session import LoadedModel

__all__ = [
    "DEFAULT_DIM",
    "IndexConstraint",
    "InputSpec",
    "generate_inputs",
    "plan_inputs",
    "resolve_input_shapes",
]

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


def resolve_input_shapes(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    default_dim: int = DEFAULT_DIM,
) -> dict[str, tuple[int, ...]]:
    """Concrete shapes for every graph input (inputs that are also initializers excluded).

    Args:
        model: the model.
        input_shapes: an input name -> its full shape, or a ``dim_param`` name -> its size (an int or a
            one-element sequence).
        default_dim: the size of any dimension still unknown.

    Raises:
        BadInputError: a given shape disagrees with the rank or a fixed dimension of the declared shape,
            or an input is not a tensor.
    """
    given = dict(input_shapes or {})
    inputs = _graph_inputs(model)
    known = {vi.name for vi in inputs} | {
        d.dim_param for vi in inputs for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")
    }
    unknown = sorted(set(given) - known)
    if unknown:
        raise BadInputError(
            f"input shapes given for {', '.join(map(repr, unknown))}, which is neither a graph input nor a "
            f"symbolic dimension (known: {', '.join(sorted(known)) or 'none'})",
            value=unknown,
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in inputs:
        if vi.type.WhichOneof("value") != "tensor_type":
            raise BadInputError(
                f"graph input {vi.name!r} is not a tensor: cannot generate it", tensor=vi.name
            )
        tt = vi.type.tensor_type
        declared = list(tt.shape.dim) if tt.HasField("shape") else None
        if vi.name in given:
            value = given[vi.name]
            shape = (int(value),) if isinstance(value, int) else tuple(int(d) for d in value)
            if declared is not None:
                if len(declared) != len(shape):
                    raise BadInputError(
                        f"shape {list(shape)} given for input {vi.name!r} has rank {len(shape)}, "
                        f"the model declares rank {len(declared)}",
                        tensor=vi.name,
                        value=list(shape),
                    )
                for i, d in enumerate(declared):
                    if d.HasField("dim_value") and d.dim_value != shape[i]:
                        raise BadInputError(
                            f"shape {list(shape)} given for input {vi.name!r} differs from the declared "
                            f"dimension {i} = {d.dim_value}",
                            tensor=vi.name,
                            value=list(shape),
                        )
            shapes[vi.name] = shape
            continue
        if declared is None:
            logger.warning("input %r has no declared shape: generating a scalar", vi.name)
            shapes[vi.name] = ()
            continue
        dims: list[int] = []
        for d in declared:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param in given:
                value = given[d.dim_param]
                dims.append(int(value) if isinstance(value, int) else int(next(iter(value))))
            else:
                dims.append(default_dim)
        shapes[vi.name] = tuple(dims)
    return shapes


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
    if op not in _VALUE_PRESERVING:
        return
    positions = _VALUE_PRESERVING[op] or tuple(range(len(node.input)))
    keeps = direct and op in _LAYOUT_PRESERVING
    for pos in positions:
        if pos < len(node.input) and node.input[pos]:
            yield from _trace(node.input[pos], graph_inputs, producers, constants, offset, keeps, depth + 1)


def plan_inputs(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    default_dim: int = DEFAULT_DIM,
) -> tuple[InputSpec, ...]:
    """Decide the shape, type and index constraints of every graph input.

    Args:
        model: the model.
        input_shapes: see :func:`resolve_input_shapes`.
        default_dim: see :func:`resolve_input_shapes`.

    Returns:
        One spec per graph input, in graph order.

    Raises:
        BadInputError: see :func:`resolve_input_shapes`.
    """
    shapes = resolve_input_shapes(model, input_shapes, default_dim)
    inferred = _infer(_with_static_inputs(model, shapes))
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
        if not is_gather_scatter(node) or len(node.input) < 2:
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
    specs = []
    for vi in _graph_inputs(model):
        specs.append(
            InputSpec(vi.name, shapes[vi.name], vi.type.tensor_type.elem_type, tuple(found[vi.name]))
        )
    return tuple(specs)


def _draw_free(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    dtype = spec.dtype
    if dtype == np.bool_:
        return rng.random(spec.shape) < 0.5
    if dtype.kind == "f":
        return rng.standard_normal(spec.shape).astype(dtype)
    if dtype.kind in "iu":
        # Small non-negative values: safe for integer inputs used as sizes, counts or positions.
        return rng.integers(0, 8, size=spec.shape).astype(dtype)
    raise BadInputError(
        f"cannot generate input {spec.name!r} of type {onnx.TensorProto.DataType.Name(spec.elem_type)}",
        tensor=spec.name,
    )


def _draw_indices(spec: InputSpec, rng: np.random.Generator, negative: bool) -> np.ndarray:
    assert spec.bounds is not None  # only called for constrained inputs
    low, high = spec.bounds
    dtype = spec.dtype
    if dtype.kind not in "iu":
        raise BadInputError(
            f"input {spec.name!r} feeds indices but has non-integer type {dtype}", tensor=spec.name
        )
    if dtype.kind == "u":
        low = max(low, 0)
    if high <= low:
        raise BadInputError(
            f"input {spec.name!r}: no value is a valid index for every node it feeds "
            f"({', '.join(c.node for c in spec.constraints)})",
            tensor=spec.name,
            value=[low, high],
        )
    shape = spec.shape
    size = math.prod(shape)
    unique = any(c.unique for c in spec.constraints)
    only = spec.constraints[0] if len(spec.constraints) == 1 else None
    values: np.ndarray
    if not unique:
        values = rng.integers(low, high, size=shape)
        if negative and all(c.offset == 0 for c in spec.constraints) and dtype.kind == "i":
            # x and x - bound address the same element when the dim equals the bound.
            flip = rng.random(shape) < 0.5
            values = np.where(flip, values - high, values)
    elif only is not None and only.direct and only.structure == "lines" and shape:
        axis = only.axis if only.axis < len(shape) else len(shape) - 1
        moved = list(shape)
        n = moved.pop(axis)
        if n > high - low:
            logger.warning(
                "input %r: %d indices per line but only %d targets: repeats", spec.name, n, high - low
            )
            values = rng.integers(low, high, size=shape)
        else:
            lines = [rng.permutation(high - low)[:n] + low for _ in range(math.prod(moved))]
            stacked = np.asarray(lines, dtype=np.int64).reshape((*moved, n))
            values = np.moveaxis(stacked, -1, axis)
    elif only is not None and only.direct and only.structure == "tuples" and shape and only.tuple_dims:
        k = shape[-1]
        count = size // k if k else 0
        total = math.prod(only.tuple_dims)
        if count > total:
            logger.warning("input %r: %d tuples but only %d targets: repeats", spec.name, count, total)
            flat = rng.integers(0, total, size=count)
        else:
            flat = rng.permutation(total)[:count]
        values = np.stack(np.unravel_index(flat, only.tuple_dims), axis=-1).reshape(shape)
    elif size <= high - low:
        values = (rng.permutation(high - low)[:size] + low).reshape(shape)
    else:
        logger.warning(
            "input %r: %d scatter indices but only %d distinct values in range: repeats",
            spec.name,
            size,
            high - low,
        )
        values = rng.integers(low, high, size=shape)
    return np.asarray(values).astype(dtype)


def generate_inputs(
    model: onnx.ModelProto | LoadedModel,
    *,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    seed: int = 0,
    default_dim: int = DEFAULT_DIM,
    negative_indices: bool = False,
) -> dict[str, np.ndarray]:
    """Random feeds for every graph input of a model.

    Args:
        model: a ``ModelProto`` (checked for well-formedness here), or a model read by
            :func:`dmlshim.execute.session.load_model` (which has checked it already).
        input_shapes: see :func:`resolve_input_shapes`.
        seed: the seed of the numpy generator; the same seed gives the same feeds.
        default_dim: see :func:`resolve_input_shapes`.
        negative_indices: also draw negative indices (counting from the end) where that keeps them valid
            and repetition does not matter.

    Returns:
        A name -> array mapping in graph-input order.

    Raises:
        BadModelError: the model is not an ONNX model.
        BadInputError: an input cannot be generated (non-tensor, unsupported type, impossible range).
    """
    from .execute.session import LoadedModel

    if isinstance(model, LoadedModel):
        model = model.proto
    elif isinstance(model, onnx.ModelProto):
        check_well_formed(model)
    else:
        raise BadModelError(f"expected an onnx.ModelProto, got {type(model).__name__}")
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in plan_inputs(model, input_shapes, default_dim):
        check_tensor(spec.shape, spec.dtype, tensor=spec.name, what="generated input")
        if spec.constraints:
            feeds[spec.name] = _draw_indices(spec, rng, negative_indices)
            logger.debug("input %r: indices in %s for %s", spec.name, spec.bounds,
                         [c.node for c in spec.constraints])  # fmt: skip
        else:
            feeds[spec.name] = _draw_free(spec, rng)
    return feeds
