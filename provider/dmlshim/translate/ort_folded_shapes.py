"""Shapes onnxruntime learns from the values its constant folding computes.

onnxruntime runs its shape inference again on the nodes after one it folds, with the folded outputs as
initializers, so a ``Resize`` whose sizes are computed from a static image size gets a static output
shape there, and the ``Shape`` nodes of everything after it fold in turn (Faster/Mask R-CNN exports). onnx's
inference, which dmlshim reads, does not compute those values. :func:`folded_value_model` computes them
with onnx's reference evaluator and gives a copy of the model where they are initializers, for a second
inference; :func:`worth_values` says when that can change anything: every graph input has a static shape
(otherwise the shapes stay symbolic) and some ``Shape`` node is still not folded.
:func:`.ort_apply.apply_optimized_away` marks inspect's translations of the nodes removed.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..model.weightless import without_weights
from .ort_folding import (
    _graphs,
    _read_names,
)
from .plan import TensorInfo

__all__ = ["folded_value_model", "worth_values"]

logger = logging.getLogger(__name__)

_BOUNDED_OPS = frozenset(
    {
        "Shape", "Size", "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
        "Transpose", "Slice", "Split", "Concat", "Neg", "Abs", "Floor", "Ceil", "Round", "Sqrt", "Exp",
        "Log", "Reciprocal", "Sign", "Not", "Relu", "Sigmoid", "ReduceMax", "ReduceMin", "ReduceSum",
        "ReduceProd", "ReduceMean", "ArgMax", "ArgMin",
    }
)  # fmt: skip
"""Ops whose output holds no more elements than their inputs together (Concat: their sum)."""

_CHEAP_OPS = _BOUNDED_OPS | frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Min", "Max", "Sum", "Mean", "Clip", "Equal", "Less",
        "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Gather", "GatherElements",
        "Range", "ConstantOfShape", "Expand", "Tile", "Constant", "Trunc", "BitShift", "IsNaN", "IsInf",
    }
)  # fmt: skip
"""Ops whose reference implementation costs time and memory in proportion to its inputs and output (one
vectorised numpy call): folded values are computed for these alone. Others (Conv, Resize, pools, RNNs,
MatMul, Einsum, TopK, NonZero, Unique, NonMaxSuppression, ...) run Python loops or cost more than their
output holds, and never give a shape computation's value in practice: their values, and those read from
them, are left uncomputed (their readers' shapes stay as onnx's inference gives them)."""

MAX_FOLDED_ELEMENTS = 1 << 20
"""The most elements the folded values may hold in all, with the initializers they read (beyond, the
values that would pass it are not computed)."""

MAX_FOLDED_BYTES = MAX_FOLDED_ELEMENTS * 8
"""The same bound in bytes (also never more than a quarter of ``DMLSHIM_MEMORY_LIMIT``)."""

_NUMERIC = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.BOOL,
    }
)
"""Element types a folded value is computed for (each input and output of the node): the ones onnxruntime
CPU's arithmetic kernels take. Not strings (their size is not their element count); not float16, the
8/16-bit integers or the unsigned ones (onnxruntime CPU lacks most of their arithmetic kernels, Floor of
float16 say, so its constant folding leaves such a node, and the shapes after it, alone); not bfloat16 or
the 8-bit floats (the same, and another rounding in onnx's reference evaluator)."""


def _budget() -> int:
    """The bytes the folded values may take: :data:`MAX_FOLDED_BYTES`, under ``DMLSHIM_MEMORY_LIMIT``."""
    from ..limits import memory_limit

    cap = memory_limit()
    return MAX_FOLDED_BYTES if cap is None else min(MAX_FOLDED_BYTES, cap // 4)


def worth_values(
    graph: onnx.GraphProto, removed: Mapping[int, object], info: Callable[[str], TensorInfo | None]
) -> bool:
    """Whether folded values may give shapes onnx's inference left symbolic (see the module)."""
    inits = {t.name for t in graph.initializer}
    for v in graph.input:
        if v.name in inits:
            continue
        found = info(v.name)
        if found is None or found.static_dims is None:
            return False
    return any(
        n.op_type == "Shape" and n.domain in ("", "ai.onnx") and i not in removed
        for i, n in enumerate(graph.node)
    )


def _shape_constant(node: onnx.NodeProto, dims: tuple[int, ...]) -> onnx.NodeProto:
    """A Constant giving what ``Shape`` (with its start/end) gives for ``dims``."""
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    value = np.array(dims[start:end] if end > start else [], dtype=np.int64)
    return helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value))


def _bound(
    node: onnx.NodeProto, known: Mapping[str, np.ndarray], info: Callable[[str], TensorInfo | None]
) -> int | None:
    """How many elements a node that may make more than it reads gives, from its known inputs (None:
    not known yet)."""
    ins = [known.get(n) if n else None for n in node.input]

    def shape_of(k: int) -> tuple[int, ...] | None:
        if ins[k] is not None:
            return tuple(np.shape(ins[k]))
        found = info(node.input[k])
        return found.static_dims if found is not None else None

    op = node.op_type
    if op == "Range" and len(ins) == 3 and all(v is not None and np.size(v) == 1 for v in ins):
        start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in ins)  # type: ignore[arg-type]
        count = (limit - start) / delta if delta else math.nan
        return max(math.ceil(count), 0) if math.isfinite(count) else None  # inf, nan: not computed
    if op == "ConstantOfShape" and ins and ins[0] is not None:
        dims = [int(d) for d in np.asarray(ins[0]).reshape(-1)]
        return None if any(d < 0 for d in dims) else math.prod(dims)
    if op == "Expand" and len(ins) == 2 and ins[1] is not None:
        data = shape_of(0)
        if data is None:
            return None
        want = [int(d) for d in np.asarray(ins[1]).reshape(-1)]
        if any(d < 0 for d in (*data, *want)):
            return None
        rank = max(len(data), len(want))
        a = [1] * (rank - len(data)) + list(data)
        b = [1] * (rank - len(want)) + want
        return math.prod(max(x, y) for x, y in zip(a, b, strict=True))
    if op == "Tile" and len(ins) == 2 and ins[1] is not None:
        data = shape_of(0)
        reps = [int(d) for d in np.asarray(ins[1]).reshape(-1)]
        if data is None or any(d < 0 for d in (*data, *reps)):
            return None
        return math.prod(data) * math.prod(reps)
    return None


def folded_value_model(
    model: onnx.ModelProto,
    folded: Collection[int],
    removed: Collection[int],
    info: Callable[[str], TensorInfo | None],
    fused: Mapping[str, list[int]],
    known: dict[str, np.ndarray],
) -> onnx.ModelProto | None:
    """A copy of ``model`` whose ``folded`` nodes are replaced by initializers of the values they compute
    (from the other ``removed`` nodes they read, a static ``Shape`` giving its dimensions, a ``Concat`` the
    reshape fusion replaced the shape it gives, in ``fused``), as far as they can be computed now;
    ``known`` (the values of earlier rounds) gains the new ones. None when nothing new is computed (an op
    onnx's reference evaluator lacks, external weights, a size not bounded yet, too large)."""
    graph = model.graph
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}

    def is_known(i: int) -> bool:
        return all(o in known for o in graph.node[i].output if o)

    # only values a node that stays reads can give it a shape (one only a graph output gives is not worth
    # its cost): those, and the removed nodes they are computed from
    kept_reads = {n for i, node in enumerate(graph.node) if i not in removed for n in node.input if n}
    kept_reads.update(
        n for i, node in enumerate(graph.node) if i not in removed for a in node.attribute for g in _graphs(a)
        for n in _read_names(g)
    )  # fmt: skip
    needed = {
        i for i in folded if not is_known(i) and any(o in kept_reads for o in graph.node[i].output if o)
    }
    stack = list(needed)
    while stack:  # the removed nodes the folded ones read, computed along (a fused Concat's real value)
        node = graph.node[stack.pop()]
        if node.op_type == "Shape" or node.output[0] in fused:
            continue  # a static Shape is its dimensions, a fused Concat its shape (below)
        for name in node.input:
            p = producer.get(name) if name else None
            if p is None or p in needed or graph.node[p].op_type == "Constant" or is_known(p):
                continue
            if p not in removed:
                logger.debug("folded values not computed: %r reads %r, which stays", node.name, name)
                return None
            needed.add(p)
            stack.append(p)
    # nothing is computed whose size is not bounded (a ConstantOfShape of a huge constant shape): a value
    # inference leaves without a static shape comes from an op that gives no more than it reads, or one
    # whose size its known inputs give; a node waiting for those waits for a later round, with its readers.
    # Only cheap ops of numeric values are computed, and no more bytes than the budget holds (the values
    # and the constants they read): a node that would pass it is left uncomputed, not the whole round
    sizer = _Sizer(graph, known, info, _budget() - sum(v.nbytes for v in known.values()))
    blocked: set[str] = set()
    nodes = []
    outputs: list[str] = []
    for i, node in enumerate(graph.node):
        if i not in needed:
            continue
        outs = [o for o in node.output if o]
        if any(n in blocked for n in node.input if n):
            blocked.update(outs)
            continue
        if node.output and node.output[0] in fused:
            value = np.array(fused[node.output[0]], dtype=np.int64)
            nodes.append(
                helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value))
            )
            continue
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            found = info(node.input[0])
            if found is None or found.static_dims is None:
                blocked.update(outs)
                continue
            nodes.append(_shape_constant(node, found.static_dims))
        elif not sizer.admit(node, outs):
            blocked.update(outs)
            continue
        else:
            nodes.append(node)
        if i in folded:
            outputs += outs
    if not outputs:
        logger.debug("folded values not computed: none within the bounds")
        return None
    read = {n for node in nodes for n in node.input if n}
    inits = [t for t in graph.initializer if t.name in read]
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in inits):
        return None
    inits += [numpy_helper.from_array(np.asarray(known[n]), n) for n in sorted(read) if n in known]
    consts = [n for n in graph.node if n.op_type == "Constant" and any(o in read for o in n.output)]
    values = _evaluate(model, [*consts, *nodes], inits, outputs)
    if not values:
        return None
    known.update(values)
    if sum(v.nbytes for v in known.values()) > _budget():
        logger.debug("folded values not used: more than %d bytes", _budget())
        return None
    out = onnx.ModelProto()
    out.CopyFrom(without_weights(model))  # shapes are what is inferred: no weight byte copied
    done = {i for i in folded if is_known(i)}
    keep = [n for i, n in enumerate(graph.node) if i not in done]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    values_of = {o for i in done for o in graph.node[i].output if o}
    out.graph.initializer.extend(numpy_helper.from_array(known[n], n) for n in sorted(values_of))
    return out


def _evaluate(
    model: onnx.ModelProto, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], outputs: list[str]
) -> dict[str, np.ndarray]:
    """The values of ``outputs`` onnx's reference evaluator computes from ``nodes`` and ``inits``: all at
    once, or, when that fails (an op it lacks, a malformed attribute, an index out of range), in halves
    down to the nodes it fails on, left out with the ones reading them (onnxruntime leaves such a node
    unfolded too). Its numpy warnings (a division by zero) are not printed: no concern of the user's."""
    from onnx.reference import ReferenceEvaluator

    def run(part: list[onnx.NodeProto], given: list[onnx.TensorProto], names: list[str]) -> list[np.ndarray]:
        sub = helper.make_graph(
            part,
            "folded",
            [],
            [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in names],
            given,
        )
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            evaluator = ReferenceEvaluator(
                helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
            )
            return [np.asarray(v) for v in evaluator.run(None, {})]

    values = {t.name: t for t in inits}
    computed: dict[str, np.ndarray] = {}

    def attempt(part: list[onnx.NodeProto]) -> None:
        # the nodes of ``part`` whose inputs are at hand, at once; when that fails, each half in turn
        # (a failing node among n costs about log2(n) runs, not n)
        ready = set(values) | set(computed)
        runnable = []
        for node in part:
            if all(n in ready for n in node.input if n):
                runnable.append(node)
                ready.update(o for o in node.output if o)
        if not runnable:
            return
        made = [o for node in runnable for o in node.output if o]
        inside = set(made)
        reads = dict.fromkeys(n for node in runnable for n in node.input if n and n not in inside)
        given = [values[n] if n in values else numpy_helper.from_array(computed[n], n) for n in reads]
        try:
            computed.update(zip(made, run(runnable, given, made), strict=True))
            return
        except Exception as exc:  # any failure of the evaluator: this node left out, or halves tried
            if len(runnable) == 1:
                name = runnable[0].name
                logger.debug("folded value of %r not computed: %s: %s", name, type(exc).__name__, exc)
                return
        half = len(runnable) // 2
        attempt(runnable[:half])
        attempt(runnable[half:])

    attempt(nodes)
    return {o: computed[o] for o in outputs if o in computed}


class _Sizer:
    """The bytes a round of folded values takes (its values and the constants they read), against a
    budget: :meth:`admit` says whether a node is computed, and charges it."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        known: Mapping[str, np.ndarray],
        info: Callable[[str], TensorInfo | None],
        budget: int,
    ) -> None:
        self.known, self.info, self.left = known, info, budget
        self.inits = {t.name: t for t in graph.initializer}
        self.consts = {o: n for n in graph.node if n.op_type == "Constant" for o in n.output if o}
        self.sizes: dict[str, int] = {}  # elements of this round's values
        self.charged: set[str] = set()  # constants already counted

    def _elements(self, name: str) -> int | None:
        if name in self.known:
            return int(self.known[name].size)
        if name in self.sizes:
            return self.sizes[name]
        found = self.info(name)
        if found is not None and found.static_dims is not None:
            return math.prod(found.static_dims)
        init = self.inits.get(name)
        return math.prod(init.dims) if init is not None else None

    def _constant_bytes(self, name: str) -> int | None:
        """Bytes of a constant the node reads (0: not a constant, or counted already; None: not numeric)."""
        if name in self.charged or name in self.known or name in self.sizes:
            return 0
        init = self.inits.get(name)
        if init is not None:
            return math.prod(init.dims) * 8 if init.data_type in _NUMERIC else None
        if name in self.consts:
            found = self.info(name)
            if found is None or found.static_dims is None or found.elem_type not in _NUMERIC:
                return None
            return math.prod(found.static_dims) * 8
        return 0

    def admit(self, node: onnx.NodeProto, outs: list[str]) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _CHEAP_OPS:
            logger.debug("folded value of %r (%s) not computed: not a cheap op", node.name, node.op_type)
            return False
        cost = 0
        sizes = {}
        for n in node.input:
            found = self.info(n) if n else None
            if (
                found is not None
                and found.elem_type not in _NUMERIC
                and node.op_type not in ("Cast", "Shape")
            ):
                return False
        for o in outs:
            found = self.info(o)
            if found is None or found.elem_type not in _NUMERIC:
                return False
            if found is not None and found.static_dims is not None:
                size: int | None = math.prod(found.static_dims)
            elif node.op_type in _BOUNDED_OPS:
                each = [self._elements(n) if n else 0 for n in node.input]
                size = None if any(e is None for e in each) else sum(each)  # type: ignore[arg-type]
            else:
                try:
                    size = _bound(node, self.known, self.info)
                except (ValueError, OverflowError, TypeError):  # a NaN or a float where sizes are integers
                    size = None
            if size is None:
                return False
            sizes[o] = size
            cost += size * 8
        reads = {n for n in node.input if n}
        for name in reads:
            more = self._constant_bytes(name)
            if more is None:
                return False
            cost += more
        if cost > self.left:
            logger.debug("folded value of %r not computed: %d bytes, %d left", node.name, cost, self.left)
            return False
        self.left -= cost
        self.sizes.update(sizes)
        self.charged.update(reads)
        return True
