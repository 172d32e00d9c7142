"""Sizes that follow from the values sized in :mod:`.fed_values`: the nodes reading them, and Loop scans.

A node sized from a feed's values may fit while what reads it does not: ``Gather(table, Expand(0, s))``
with ``s`` fed ``[10000000]`` makes 80 MB of indices but a 2.5 GB gather of a 1000 x 64 table, and a
``Loop`` whose trip count is fed concatenates one slice per iteration into each scan output (400000
iterations of 16 int64s: 51 MB, and 1.6 GB once gathered). onnx's inference cannot tell those shapes
(they rest on values), so nothing sized them before onnxruntime allocated them: under
``DMLSHIM_MEMORY_LIMIT=100000000`` the cpu engine ran the first at 2.7 GB peak, the custom-op engine at
5.3 GB, and the partitioned engine refused it only after its whole-model check had allocated 2.7 GB
(issue 35, round 55).

Here the shapes are carried on from each run's values, before any engine runs:

- a top-level ``Loop`` whose trip count is fed or computed from the feeds (:mod:`.computed_values`), whose
  body passes its condition through unchanged (``Identity``, or the body's condition input itself: the
  trip count is then the number of iterations) and whose first condition is absent or known to be true,
  sizes each scan output whose slice shape onnx's inference tells: the trip count times the slice;
- the elementwise nodes after a sized value (``Cast``, ``Identity``, unary math, and the broadcasting
  binary and ``Where`` ops, every input's shape known) keep or broadcast its shape;
- a ``Gather``, ``GatherElements`` or ``GatherND`` reading such a value as its data or indices is sized
  from it (:class:`.fed_sizes.FedSizes`).

Every such value is checked against the memory limit as it is found, naming its node, op and size. A shape
these rules do not follow is sized where it runs, as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import onnx

from ...limits import check_tensor
from ...model.last_inference import infer_shapes
from ...model.weightless import without_declared_shapes
from .fed_values import FedValued

logger = logging.getLogger(__name__)

__all__ = ["ShapeStep", "broadcast_shapes", "carried_steps", "loop_scans"]

Dims = tuple[int | str, ...]

SAME_SHAPE = frozenset(
    {
        "Identity", "Cast", "CastLike", "Abs", "Neg", "Relu", "Sign", "Floor", "Ceil", "Round", "Not",
        "Sqrt", "Exp", "Log", "Reciprocal", "Sigmoid", "Tanh", "Erf", "IsNaN", "IsInf", "BitwiseNot",
    }
)  # fmt: skip
"""Ops whose output has their first input's shape (``CastLike``'s second input is a type, ``Clip``'s
bounds are scalars: only the first counts)."""

BROADCASTING = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Min", "Max", "Sum", "Mean", "And", "Or", "Xor",
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "BitShift", "BitwiseAnd",
        "BitwiseOr", "BitwiseXor", "Where",
    }
)  # fmt: skip
"""Ops whose output is every input's shape broadcast together (numpy's rule, as ONNX's)."""


@dataclass(frozen=True)
class ShapeStep:
    """An elementwise node whose output shape follows from its inputs' (a computed value, a feed or
    static dims): its display name, op, output, output element type (0: unknown) and inputs."""

    name: str
    op_type: str
    output: str
    elem_type: int
    inputs: tuple[str | Dims, ...]

    def shape(
        self, shape_of: Callable[[str | Dims], tuple[int, ...] | None], limit: int | None
    ) -> tuple[int, ...] | None:
        """The output's shape, or None where an input's is unknown or they do not broadcast (onnxruntime
        refuses that run itself); refused (TooLargeError) when it would pass ``limit`` (the memory limit,
        read once per run by the caller; None: no limit)."""
        parts = self.inputs[:1] if self.op_type in SAME_SHAPE or self.op_type == "Clip" else self.inputs
        shapes = [shape_of(p) for p in parts]
        if any(s is None for s in shapes):
            return None
        shape = broadcast_shapes(shapes)  # type: ignore[arg-type]
        if shape is not None and self.elem_type and limit is not None:
            check_tensor(
                shape,
                self.elem_type,
                tensor=self.output,
                node=self.name,
                op_type=self.op_type,
                what="output",
                limit=limit,
            )
        return shape


def broadcast_shapes(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shape ``shapes`` broadcast to (None when they do not)."""
    if len(set(shapes)) == 1:
        return tuple(shapes[0])
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for k, d in enumerate((1,) * (rank - len(shape)) + tuple(shape)):
            if d != out[k] and out[k] != 1 and d != 1:
                return None
            if out[k] == 1:
                out[k] = d
    return tuple(out)


def carried_steps(
    nodes: Sequence[onnx.NodeProto],
    names: Sequence[str],
    sized: Collection[str],
    dims_of: Callable[[str], str | Dims | None],
    elem_type: Callable[[str], int],
) -> tuple[ShapeStep, ...]:
    """The top-level elementwise ``nodes`` (display ``names``) reading a value of ``sized`` (or of an
    earlier step), their other inputs' shapes known (``dims_of``: a feed's name, or dims of sizes and
    symbols the graph inputs declare)."""
    carried = set(sized)
    steps = []
    for node, name in zip(nodes, names, strict=True):
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1 or not node.output[0]:
            continue
        if op not in SAME_SHAPE and op not in BROADCASTING and op != "Clip":
            continue
        read = list(node.input[:1]) if op in SAME_SHAPE or op == "Clip" else list(node.input)
        if not read or not any(n in carried for n in read):
            continue
        parts: list[str | Dims] = []
        for n in read:
            part = n if n in carried else dims_of(n)  # (dims: sizes, or symbols graph inputs declare)
            if not n or part is None:
                break
            parts.append(part)
        else:
            steps.append(ShapeStep(name, op, node.output[0], elem_type(node.output[0]), tuple(parts)))
            carried.add(node.output[0])
    return tuple(steps)


def loop_scans(model: onnx.ModelProto, names: Sequence[str], known: Collection[str]) -> tuple[FedValued, ...]:
    """The scan outputs of the top-level ``Loop`` nodes of ``model`` run a known number of times (see the
    module docstring), sized as ``Loop`` :class:`.fed_values.FedValued` nodes from the trip count
    (``known``: the fed and computed values) and each scan output's slice shape, as onnx's inference
    without the model's declared shapes tells it (onnxruntime runs the body at the shapes its values
    have, whatever a body output declares)."""
    loops = []
    for node, name in zip(model.graph.node, names, strict=True):
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        trips, cond = node.input[0], node.input[1]
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        known_trips = bool(trips) and trips in known and (not cond or cond in known)
        if known_trips and body is not None and _passes_condition(body):
            loops.append((node, name))
    if not loops:
        return ()
    try:
        inferred = infer_shapes(without_declared_shapes(model))
    except Exception as exc:  # onnx's errors share no useful base: the scans are sized where they run
        logger.debug("Loop scans sized where they run: no inference (%s)", exc)
        return ()
    types = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    found = []
    for node, name in loops:
        cond = node.input[1]
        guard = ((cond, True),) if cond else ()
        for output in node.output[len(node.input) - 2 :]:
            tp = types.get(output) if output else None
            slice_dims = _slice_dims(tp)
            if tp is None or slice_dims is None:
                continue
            elem = int(tp.tensor_type.elem_type)
            found.append(FedValued(name, "Loop", output, elem, slice_dims, (node.input[0],), guard=guard))
    return tuple(found)


def _passes_condition(body: onnx.GraphProto) -> bool:
    """Whether ``body`` gives back its condition input unchanged (so a true first condition keeps the loop
    going for the whole trip count)."""
    if len(body.input) < 2 or not body.output:
        return False
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out == cond_in:
        return True
    producer = [n for n in body.node if cond_out in n.output]
    return (
        len(producer) == 1
        and producer[0].op_type == "Identity"
        and producer[0].domain in ("", "ai.onnx")
        and list(producer[0].input) == [cond_in]
    )


def _slice_dims(tp: onnx.TypeProto | None) -> tuple[int, ...] | None:
    """The static dims after the first (the iterations) of a scan output's inferred type, or None."""
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims = tp.tensor_type.shape.dim
    if not dims or not all(d.HasField("dim_value") for d in dims[1:]):
        return None
    out = tuple(int(d.dim_value) for d in dims[1:])
    return out if math.prod(out) >= 0 else None
