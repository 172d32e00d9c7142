"""Values whose size a feed's *values* set (a fed shape, repeats or bounds), sized before any run.

``Expand(x, s)``, ``ConstantOfShape(s)``, ``Tile(x, r)``, ``Range(start, limit, delta)`` and
``OneHot(i, depth, v)`` at the top level allocate what their shape-like inputs say: with ``s`` a graph
input, a feed of ``[20000, 20000]`` made onnxruntime allocate 1.6 GB (3.2 GB with the custom-op engine)
under ``DMLSHIM_MEMORY_LIMIT=100000000``, in every engine, since nothing sized it before onnxruntime ran
it (a fed OneHot depth of 100000 for 1000 indices: 400 MB). Such a node whose shape-like inputs are
graph inputs (fed, small integer tensors) and whose data shape follows from the feeds (fed, or static) is
sized from the run's feeds and refused before the run reaches any engine
(:meth:`dmlshim.execute.plan.fed_sizes.FedSizes.check`), naming the node, op, output and size.
So is such a node whose shape-like inputs the graph computes from the feeds by simple top-level shape
arithmetic (``ConstantOfShape(Concat(Shape(x), c))``: :mod:`.computed_values`). Anything else is left to
where it runs, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ...errors import BadInputError
from ...limits import check_tensor, tensor_nbytes

__all__ = ["VALUED_OPS", "VALUE_INPUTS", "FedValued", "valued_nodes"]

_NUMPY_BYTES = 1 << 63
"""numpy refuses an array whose non-zero dimensions times its item size reach this, even an empty one."""

_MAX_ELEMENTS = 64
"""Shape-like feeds read for the size: a shape, repeats or a bound is a few numbers."""

Dims = tuple[int | str, ...]


@dataclass(frozen=True)
class FedValued:
    """A node sized from its fed shape-like inputs: name, op, output, element type (0: the data's), the
    data part (a fed input's name, static dims, or None where it has none) and the fed value names."""

    name: str
    op_type: str
    output: str
    elem_type: int
    data: str | Dims | None
    values: tuple[str, ...]
    axis: int = -1
    """OneHot's axis (where the depth goes); for Reshape, its ``allowzero``."""
    guard: tuple[tuple[str, bool], ...] = ()
    """For a node inside ``If`` branches or ``Loop``/``Scan`` bodies: the conditions (a computed bool value,
    the value it must have) under which it runs."""

    def check(
        self,
        feeds: Mapping[str, Any],
        shape_of: Callable[[str | Dims], tuple[int, ...] | None],
        *,
        numpy_values: bool = True,
    ) -> tuple[int, ...] | None:
        """Refuse the run when this node's output would pass the memory limit (TooLargeError), or, with
        ``numpy_values`` (an engine holding values as numpy arrays), when numpy cannot hold it
        (BadInputError: an empty shape whose other dimensions multiply past 2**63 bytes).

        Returns:
            The output's shape when this run's values tell it (None otherwise), for the nodes reading it
            (:mod:`.valued_shapes`)."""
        floats = self.op_type == "Range"  # a Range of floats allocates what its float bounds say
        numbers = [_small_ints(feeds.get(n), floats=floats) for n in self.values]
        if any(v is None for v in numbers):
            return None
        data_shape = shape_of(self.data) if self.data is not None else ()
        if data_shape is None:
            return None
        shape = _output_shape(self.op_type, data_shape, numbers, self.axis)  # type: ignore[arg-type]
        if shape is None:
            return None
        data = feeds.get(self.data) if isinstance(self.data, str) and self.op_type != "OneHot" else None
        dtype: Any = data.dtype if isinstance(data, np.ndarray) else self.elem_type
        if not dtype:
            return shape
        if self.op_type != "Reshape":  # a Reshape holds its input's bytes: only numpy's rule is asked
            check_tensor(
                shape, dtype, tensor=self.output, node=self.name, op_type=self.op_type, what="output"
            )
        held = tensor_nbytes([d for d in shape if d], dtype) if numpy_values else None
        if held is not None and held >= _NUMPY_BYTES:
            raise BadInputError(
                f"output {self.output!r} of shape {list(shape)} is empty, but its other dimensions multiply "
                f"past {_NUMPY_BYTES} bytes: numpy cannot hold such an array, and every kernel and custom op "
                "of dmlshim reads its values as one (onnxruntime-extensions aborted the process on it)",
                rule="a value's non-zero dimensions, times its element size, stay below 2**63 bytes",
                value=list(shape),
                node=self.name,
                op_type=self.op_type,
                tensor=self.output,
            )
        return shape


def _small_ints(value: Any, *, floats: bool = False) -> np.ndarray | None:
    if value is not None and not isinstance(value, np.ndarray) and hasattr(value, "numpy"):
        shape = value.shape() if callable(getattr(value, "shape", None)) else None
        if shape is None or math.prod(shape) > _MAX_ELEMENTS:
            return None
        value = value.numpy()
    kinds = "iuf" if floats else "iu"
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds or value.size > _MAX_ELEMENTS:
        return None
    return value


def _output_shape(
    op: str, data: tuple[int, ...], values: list[np.ndarray], axis: int = -1
) -> tuple[int, ...] | None:
    """The output shape onnxruntime allocates, or None where the inputs are invalid (its error stands)."""
    if op == "OneHot":
        depth = int(values[0].reshape(-1)[0]) if values[0].size == 1 else -1
        where = axis if axis >= 0 else len(data) + 1 + axis
        if depth < 1 or not 0 <= where <= len(data):
            return None
        return (*data[:where], depth, *data[where:])
    if op == "Loop":  # a scan output: one slice of ``data`` per iteration (the trip count)
        trips = int(values[0].reshape(-1)[0]) if values[0].size == 1 else -1
        return (trips, *data) if trips >= 0 else None
    if op == "Range":
        if any(v.size != 1 for v in values):
            return None
        if any(v.dtype.kind == "f" for v in values):
            # onnxruntime's count: ceil((limit - start) / delta), the difference in the element type
            first, last, step = (v.reshape(-1)[0] for v in values)
            with np.errstate(all="ignore"):
                span, delta_f = float(last - first), float(step)
            if not delta_f or not math.isfinite(span) or not math.isfinite(span / delta_f):
                return None
            return (max(math.ceil(span / delta_f), 0),)
        start, limit, delta = (int(v.reshape(-1)[0]) for v in values)
        if not delta:
            return None
        return (max(math.ceil((limit - start) / delta), 0),)
    dims = [int(d) for d in values[0].reshape(-1)]
    if op == "Reshape":
        return _reshaped(data, dims, allowzero=bool(axis == 1))
    if any(d < 0 for d in dims):
        return None
    if op == "ConstantOfShape":
        return tuple(dims)
    if op == "Tile":
        return tuple(a * b for a, b in zip(data, dims, strict=True)) if len(dims) == len(data) else None
    # Expand: the two shapes broadcast (a dimension of 1 takes the other's)
    rank = max(len(data), len(dims))
    a = (1,) * (rank - len(data)) + data
    b = (1,) * (rank - len(dims)) + tuple(dims)
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def _reshaped(data: tuple[int, ...], dims: list[int], *, allowzero: bool) -> tuple[int, ...] | None:
    """Reshape's output shape (0 copies the input's dimension unless ``allowzero``; one -1 is inferred)."""
    out = [data[k] if d == 0 and not allowzero and k < len(data) else d for k, d in enumerate(dims)]
    if sum(d == -1 for d in out) > 1 or any(d < -1 for d in out):
        return None
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if not known:
            return None
        out[out.index(-1)] = math.prod(data) // known
    return tuple(out) if math.prod(out) == math.prod(data) else None


VALUE_INPUTS = {
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "OneHot": (1,),
    "Reshape": (1,),
}
VALUED_OPS = frozenset(VALUE_INPUTS)


def valued_nodes(
    nodes: Sequence[onnx.NodeProto],
    names: Sequence[str],
    fed: set[str],
    dims_of: Callable[[str], str | Dims | None],
    elem_type: Callable[[str], int],
    guards: Sequence[tuple[tuple[str, bool], ...]] | None = None,
) -> tuple[FedValued, ...]:
    """The ``nodes`` (top-level, or in subgraphs under ``guards``; ``names``: their display
    names) sized by :class:`FedValued`: every shape-like input known (``fed``), and the data (Expand, Tile)
    fed or of static dims."""
    found = []
    for k, (node, name) in enumerate(zip(nodes, names, strict=True)):
        positions = VALUE_INPUTS.get(node.op_type)
        if positions is None or node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if len(node.input) <= max(positions) or not all(node.input[p] in fed for p in positions):
            continue
        data: str | Dims | None = None
        key = "allowzero" if node.op_type == "Reshape" else "axis"
        axis = next((int(a.i) for a in node.attribute if a.name == key), -1)
        if node.op_type in ("Expand", "Tile", "OneHot", "Reshape"):
            data = dims_of(node.input[0])
            if data is None or (node.op_type == "OneHot" and len(node.input) < 3):
                continue
            kind = elem_type(node.input[2] if node.op_type == "OneHot" else node.input[0])
        elif node.op_type == "Range":
            kind = elem_type(node.input[0])
        else:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            kind = int(value.data_type) if value is not None else onnx.TensorProto.FLOAT
        if not kind:
            continue
        values = tuple(node.input[p] for p in positions)
        guard = guards[k] if guards is not None else ()
        found.append(FedValued(name, node.op_type, node.output[0], kind, data, values, axis, guard))
    return tuple(found)
