"""Shape-like values *computed* from the feeds, for :mod:`.fed_values` to size their nodes before any run.

A shape made from a feed inside the graph escaped the memory limit: ``ConstantOfShape(Concat(Shape(x),
c))`` with ``x`` fed ``[20000]`` and ``c = [20000]``, ``Expand(y, Mul(Shape(x), k))`` or
``ConstantOfShape(Concat(Unsqueeze(n), Unsqueeze(n)))`` with ``n`` a fed scalar made onnxruntime
allocate 1.6 GB under ``DMLSHIM_MEMORY_LIMIT=100000000`` in every engine and the drop-in (the measured
peaks are in docs/safety.md). The top-level shape arithmetic feeding an Expand, ConstantOfShape, Tile,
Range, OneHot or Reshape is followed here: ``Shape`` or ``Size`` of a feed, ``Gather``, ``Slice``,
``Concat``, ``Unsqueeze``, ``Squeeze``, ``Cast`` (among integers, bool, float32, float64), ``Add``, ``Sub``,
``Mul``, ``Div`` (truncating, as onnxruntime's integer division), ``Reshape`` and ``Identity``, and (round 52,
:mod:`.computed_ops`) ``Where``, the comparisons and ``Not``/``And``/``Or``/``Xor``, ``Mod``, ``Max``,
``Min``, ``Abs``, ``Neg``, ``Sign``, ``Floor``/``Ceil``/``Round``, ``ReduceProd``/``Sum``/``Max``/``Min`` and
(round 55b: torch's ``F.pad`` pads) ``ConstantOfShape`` and ``Transpose``,
of small integer, bool, float32 and float64 tensors (at most 4096 elements: feeds, initializers,
``Constant`` nodes; a step whose result would be larger is not computed), evaluated with numpy on each
run's feeds. So are the branches of an ``If`` whose condition is known that way: the branch the condition
takes is followed (its own names kept apart from the outer ones), the sized nodes inside it are sized
(:attr:`ComputedValues.branch_nodes`), and the ``If``'s outputs take that branch's values; likewise the
body of a ``Loop`` whose trip count and first condition are known, or of a ``Scan`` whose first scan input
is, when it runs at least once (its nodes of outer values alone). A value anything else makes (a float16,
a ``Loop``'s counter, a ``Scan``'s slice),
an invalid input (onnxruntime's error stands) or a larger value is left unknown, and its node is sized
where it runs, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...graph import node_path, subgraph_prefix, subgraphs
from ..proofs.symbol_shapes import value_shape
from . import computed_ops
from .fed_values import VALUED_OPS, _reshaped
from .small_values import KINDS as _KINDS
from .small_values import MAX_ELEMENTS as _MAX_ELEMENTS
from .small_values import constant as _constant
from .small_values import constants as _constants
from .small_values import count as _count
from .small_values import held, small_value
from .small_values import tensor_array as _array

__all__ = ["BranchNode", "ComputedValues", "Guard", "guard_holds", "held", "small_value"]

logger = logging.getLogger(__name__)

_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
_OPS = frozenset(
    {"Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Div", "Reshape", "Identity"}
    | set(_ARITH)
    | computed_ops.OPS
)
_MAX_DEPTH = 32
"""Subgraphs nested deeper than this are not followed (a hostile model nests If in If a thousand times)."""

Guard = tuple[tuple[str, bool], ...]
"""The ``If`` conditions (value name, branch taken when it holds) under which a step or node runs."""


def guard_holds(guard: Guard, value: Callable[[str], Any]) -> bool:
    """Whether every condition of ``guard`` is known (``value``: a name's value, or None) and selects its
    branch."""
    for name, flag in guard:
        cond = value(name)
        if not isinstance(cond, np.ndarray) or cond.dtype.kind != "b" or cond.size != 1:
            return False
        if bool(cond.reshape(-1)[0]) != flag:
            return False
    return True


@dataclass(frozen=True)
class _Step:
    op_type: str
    inputs: tuple[str, ...]
    output: str
    attributes: Mapping[str, Any]
    opset: int
    guard: Guard = ()


@dataclass(frozen=True)
class BranchNode:
    """A node sized from computed values inside the branch of an ``If`` (its inputs renamed to the
    branch's scope), with its display name and the conditions under which the branch runs."""

    node: onnx.NodeProto
    name: str
    guard: Guard


@dataclass(frozen=True)
class ComputedValues:
    """The steps computing small integer values from the feeds (:meth:`values`)."""

    steps: tuple[_Step, ...] = ()
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Small integer initializers (those listed as inputs: defaults a feed overrides) and Constants."""
    branch_nodes: tuple[BranchNode, ...] = ()
    """The Expand, ConstantOfShape, Tile, Range, OneHot and Reshape nodes inside ``If`` branches whose
    condition is computed from the feeds (their inputs renamed to the names :meth:`values` gives)."""

    @property
    def names(self) -> frozenset[str]:
        """The values computed from the feeds."""
        return frozenset(s.output for s in self.steps)

    @classmethod
    def of(cls, graph: onnx.GraphProto, fed: set[str], targets: set[str], opset: int) -> ComputedValues:
        """The steps of ``graph`` the values ``targets`` need (and the sized nodes inside the branches of
        its top-level ``If`` nodes), from ``fed`` (graph inputs) and small integer constants."""
        walk = _Walk(opset, dict(_constants(graph.initializer, "")), set(fed))
        walk.known |= set(walk.tensors)
        # A branch's names are told apart from the outer ones by NUL separators: a model naming a value
        # with a NUL could make two names one, so its subgraphs are not followed.
        nested = any(n.op_type in ("If", "Loop", "Scan") for n in graph.node)
        walk.subgraphs = nested and not _has_nul(graph)
        walk.nodes(graph.node, {}, (), "", "")
        needed: set[str] = set()
        todo = [t for t in targets if t in walk.steps]
        todo += [n for b in walk.branch for n in (*b.node.input, *(c for c, _ in b.guard)) if n in walk.steps]
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            step = walk.steps[name]
            todo.extend(n for n in step.inputs if n in walk.steps)
            todo.extend(n for n, _ in step.guard if n in walk.steps)
        kept = tuple(s for s in walk.steps.values() if s.output in needed)
        # Only the constants something reads are made arrays (and copied into each run's values): a
        # model's hundreds of small float weights are not. A target that is itself a constant (the 0 and
        # 1 of ``Range(0, n, 1)`` with ``n`` fed) is kept even when nothing is computed: the node is
        # sized from the feed and those constants together.
        read = {n for s in kept for n in (*s.inputs, *(c for c, _ in s.guard))} | set(targets)
        read |= {n for b in walk.branch for n in b.node.input}
        constants = {n: v for n, v in walk.constants.items() if n in read}
        for name in read & set(walk.tensors):
            value = _array(walk.tensors[name])
            if value is not None:
                constants[name] = value
        if not kept and not walk.branch and not constants:
            return cls()
        return cls(kept, constants, tuple(walk.branch))

    def values(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The values the steps compute from ``feeds`` (those known; none raises), and the constants
        no feed overrides."""
        out: dict[str, np.ndarray] = {k: v for k, v in self.constants.items() if k not in feeds}

        def small(name: str) -> np.ndarray | None:
            if name in out:
                return out[name]
            if name in feeds:
                return small_value(feeds[name])
            return self.constants.get(name)

        with np.errstate(all="ignore"):
            for step in self.steps:
                if step.guard and not guard_holds(step.guard, small):
                    continue  # a branch not taken (or not known to be): nothing of it runs
                try:
                    value = _evaluate(step, small, feeds)
                except (ValueError, TypeError, IndexError, OverflowError, np.exceptions.AxisError) as exc:
                    logger.debug("%s %r left unknown: %s", step.op_type, step.output, exc)
                    value = None
                value = None if value is None else np.asarray(value)  # numpy makes 0-d results scalars
                if value is not None and held(value.dtype) and value.size <= _MAX_ELEMENTS:
                    out[step.output] = value
        return out


class _Walk:
    """Collects the steps of a graph and of the branches of its ``If`` nodes, in order."""

    def __init__(self, opset: int, tensors: dict[str, onnx.TensorProto], known: set[str]) -> None:
        self.opset = opset
        self.tensors = tensors
        """Small initializers of a followed type, by (scoped) name: made arrays only when read."""
        self.constants: dict[str, np.ndarray] = {}
        """``Constant`` nodes' values."""
        self.known = known
        self.subgraphs = True
        """Whether ``If`` branches and ``Loop`` bodies are followed."""
        self.steps: dict[str, _Step] = {}
        self.branch: list[BranchNode] = []

    def nodes(self, nodes: Any, rename: dict[str, str], guard: Guard, scope: str, prefix: str) -> None:
        """Walk ``nodes`` with the names of their scope (``rename``: a branch's own names to unique ones)."""
        if len(guard) > _MAX_DEPTH:
            return  # subgraphs nested this deep are not followed (nor recursed into)
        # the top-level graph renames nothing (no scope: ``rename`` stays empty, the helpers copy it)
        plain = not scope and not rename
        for index, node in enumerate(nodes):
            if plain:
                inputs, outputs = tuple(node.input), tuple(node.output)
            else:
                inputs = tuple(rename.get(n, n) for n in node.input)
                for name in node.output:
                    if scope and name:
                        rename[name] = scope + name
                outputs = tuple(rename.get(n, n) for n in node.output)
            if node.domain not in ("", "ai.onnx") or not outputs or not outputs[0]:
                continue
            if node.op_type in ("If", "Loop", "Scan") and not self.subgraphs:
                continue
            if node.op_type == "Scan":
                self._scan(node, inputs, outputs, rename, guard, node_path(prefix, node, index))
                continue
            if node.op_type == "If" and inputs and inputs[0] in self.known:
                self._branches(node, inputs[0], outputs, rename, guard, node_path(prefix, node, index))
                continue
            if node.op_type == "Loop":
                self._loop(node, inputs, outputs, rename, guard, node_path(prefix, node, index))
                continue
            if scope and node.op_type in VALUED_OPS:
                renamed = onnx.NodeProto()
                renamed.CopyFrom(node)
                del renamed.input[:], renamed.output[:]
                renamed.input.extend(inputs)
                renamed.output.extend(node.output)  # the name errors give
                self.branch.append(BranchNode(renamed, node_path(prefix, node, index), guard))
            if node.op_type == "Constant":
                value = _constant(node)
                if value is not None:
                    self.constants[outputs[0]] = value
                    self.known.add(outputs[0])
                continue
            used = [n for n in inputs if n]
            if node.op_type not in _OPS or not used or not all(n in self.known for n in used):
                continue
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            self.steps[outputs[0]] = _Step(node.op_type, inputs, outputs[0], attributes, self.opset, guard)
            self.known.add(outputs[0])

    def _branches(
        self,
        node: onnx.NodeProto,
        cond: str,
        outputs: tuple[str, ...],
        rename: dict[str, str],
        guard: Guard,
        path: str,
    ) -> None:
        """Both branches of the ``If`` ``node``, each under its condition; the ``If``'s outputs select."""
        made: dict[bool, list[str]] = {}
        for attr in node.attribute:
            if attr.name not in ("then_branch", "else_branch") or not attr.HasField("g"):
                continue
            flag = attr.name == "then_branch"
            inner = f"{outputs[0]}\x00{attr.name}\x00"  # outputs[0] holds the scope already
            sub = dict(rename)
            for tensor in attr.g.initializer:  # a branch's own constants shadow outer names
                sub[tensor.name] = inner + tensor.name
            for name, tensor in _constants(attr.g.initializer, inner):
                self.tensors[name] = tensor
                self.known.add(name)
            self.nodes(attr.g.node, sub, (*guard, (cond, flag)), inner, subgraph_prefix(path, attr.name))
            made[flag] = [sub.get(o.name, o.name) for o in attr.g.output]
        if len(made) != 2 or len(made[True]) != len(outputs) or len(made[False]) != len(outputs):
            return
        for out, then, other in zip(outputs, made[True], made[False], strict=True):
            if out and then in self.known and other in self.known:
                self.steps[out] = _Step("If", (cond, then, other), out, {}, self.opset, guard)
                self.known.add(out)

    def _loop(
        self,
        node: onnx.NodeProto,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        rename: dict[str, str],
        guard: Guard,
        path: str,
    ) -> None:
        """A ``Loop`` whose trip count and first condition are known: its body runs at least once when the
        count is positive and the condition holds, so the sized nodes of the body whose shapes rest on
        outer values alone (the same on every iteration) are sized under that condition. Whatever rests on
        the iteration's own values (the counter, the carried values) stays unknown."""
        body = next((a.g for a in node.attribute if a.name == "body" and a.HasField("g")), None)
        count, cond = (*inputs, "", "")[:2]
        if body is None or not (count or cond) or any(n and n not in self.known for n in (count, cond)):
            return
        self._body(body, _Step("LoopRuns", (count, cond), "", {}, self.opset, guard), outputs, rename, path)

    def _scan(
        self,
        node: onnx.NodeProto,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        rename: dict[str, str],
        guard: Guard,
        path: str,
    ) -> None:
        """A ``Scan`` (opset 9 on) whose first scan input is known: its body runs once per slice, so at
        least once when that input's scan axis is not empty."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        body, count = attrs.get("body"), int(attrs.get("num_scan_inputs", 0))
        if self.opset < 9 or not isinstance(body, onnx.GraphProto) or not 0 < count <= len(inputs):
            return
        first = inputs[len(inputs) - count]
        if not first or first not in self.known:
            return
        axes = list(attrs.get("scan_input_axes") or [0])
        axis = int(axes[0])
        runs = _Step("ScanRuns", (first,), "", {"axis": axis}, self.opset, guard)
        self._body(body, runs, outputs, rename, path)

    def _body(
        self,
        body: onnx.GraphProto,
        runs: _Step,
        outputs: tuple[str, ...],
        rename: dict[str, str],
        path: str,
    ) -> None:
        """The nodes of a ``Loop`` or ``Scan`` body under the condition ``runs`` computes (that it runs at
        least once); the iteration's own values (the body's inputs) are unknown."""
        inner = f"{outputs[0]}\x00body\x00"  # outputs[0] holds the scope already
        flag = inner + "runs"
        self.steps[flag] = _Step(runs.op_type, runs.inputs, flag, runs.attributes, self.opset, runs.guard)
        self.known.add(flag)
        guard = (*runs.guard, (flag, True))
        sub = dict(rename)
        for name in (*(v.name for v in body.input), *(t.name for t in body.initializer)):
            sub[name] = inner + name  # the iteration's values are unknown; the body's constants its own
        for name, tensor in _constants(body.initializer, inner):
            self.tensors[name] = tensor
            self.known.add(name)
        self.nodes(body.node, sub, guard, inner, subgraph_prefix(path, "body"))


def _has_nul(graph: onnx.GraphProto, depth: int = 0) -> bool:
    """Whether a name in ``graph`` or in a graph nested in it holds a NUL character (or the nesting is
    deeper than :data:`_MAX_DEPTH`: not looked into, so not followed)."""
    if depth > _MAX_DEPTH:
        return True
    # every name of the graph joined, then searched once: a generator per node cost a detector's session
    # build 6% of its Python
    names = [v.name for v in (*graph.input, *graph.output)] + [t.name for t in graph.initializer]
    nested: list[onnx.GraphProto] = []
    for node in graph.node:
        names += node.input
        names += node.output
        for _, sub in subgraphs(node):
            nested.append(sub)
    if "\x00" in "".join(names):
        return True
    return any(_has_nul(sub, depth + 1) for sub in nested)


def _evaluate(step: _Step, small: Any, feeds: Mapping[str, Any]) -> np.ndarray | None:
    op, attrs = step.op_type, step.attributes
    if op in ("Shape", "Size"):
        name = step.inputs[0]
        value = small(name)
        dims = (
            tuple(value.shape)
            if value is not None
            else (value_shape(feeds.get(name)) if name in feeds else None)
        )
        if dims is None:
            return None
        rank = len(dims)
        start, end = (int(attrs.get(k, d)) for k, d in (("start", 0), ("end", rank)))
        start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
        if op == "Size":
            return np.array(_count(dims), np.int64)
        return np.array(dims[start:end], np.int64)
    if op == "ScanRuns":  # whether a Scan's body runs at least once: its scan axis is not empty
        name = step.inputs[0]
        value = small(name)
        dims = (
            tuple(value.shape)
            if value is not None
            else value_shape(feeds.get(name))
            if name in feeds
            else None
        )
        axis = int(attrs.get("axis", 0))
        if dims is None or not -len(dims) <= axis < len(dims):
            return None
        return np.array(int(dims[axis]) > 0)
    if op == "LoopRuns":  # whether a Loop's body runs at least once: a positive count and a true condition
        count, cond = (small(n) if n else None for n in step.inputs)
        if any(n and v is None for n, v in zip(step.inputs, (count, cond), strict=True)):
            return None
        if count is not None and (count.size != 1 or count.dtype.kind not in "iu"):
            return None
        if cond is not None and (cond.size != 1 or cond.dtype.kind != "b"):
            return None
        positive = count is None or int(count.reshape(-1)[0]) > 0
        return np.array(positive and (cond is None or bool(cond.reshape(-1)[0])))
    if op == "If":  # the output of the branch the condition takes
        cond = small(step.inputs[0])
        if cond is None or cond.dtype.kind != "b" or cond.size != 1:
            return None
        return small(step.inputs[1] if bool(cond.reshape(-1)[0]) else step.inputs[2])
    args = [small(n) if n else None for n in step.inputs]
    if any(a is None for n, a in zip(step.inputs, args, strict=True) if n):
        return None
    if computed_ops.result_size(op, attrs, [a for a in args if a is not None]) > _MAX_ELEMENTS:
        return None  # never computed: a broadcast or gather of small values can be large
    if op in computed_ops.OPS:
        return computed_ops.evaluate(op, attrs, step.opset, args)
    if op == "Identity":
        return args[0]
    if op in _ARITH or op == "Div":
        a, b = args[0], args[1]
        if a.dtype != b.dtype or not held(a.dtype) or a.dtype.kind == "b":
            return None
        if a.dtype.kind == "f":  # IEEE arithmetic, element by element, as onnxruntime's
            return np.divide(a, b) if op == "Div" else _ARITH[op](a, b)
        if op != "Div":
            return _ARITH[op](a, b).astype(a.dtype)
        if not np.all(b):
            return None  # onnxruntime's integer division by zero: its own error or result
        q = np.abs(a) // np.abs(b)  # truncation toward zero, as C++'s integer division
        return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
    if op == "Cast":
        to = int(attrs.get("to", 0))
        return computed_ops.cast(args[0], helper.tensor_dtype_to_np_dtype(to)) if to in _KINDS else None
    if op == "Concat":
        if len({a.dtype for a in args}) != 1 or "axis" not in attrs:
            return None
        return np.concatenate(args, axis=int(attrs["axis"]))
    if op == "Gather":
        data, index = args[0], args[1]
        axis = int(attrs.get("axis", 0))
        axis = axis + data.ndim if axis < 0 else axis
        if index.dtype.kind not in "iu" or not 0 <= axis < data.ndim:
            return None
        if index.size:  # a shape's few indices read as a list (a numpy reduction costs more at that size)
            flat = index.reshape(-1).tolist() if index.size <= 64 else [int(index.min()), int(index.max())]
            if min(flat) < -data.shape[axis] or max(flat) >= data.shape[axis]:
                return None
        return np.take(data, index.astype(np.int64), axis=axis)
    if op == "Reshape":
        shape = _reshaped(
            args[0].shape, [int(d) for d in args[1].reshape(-1)], allowzero=bool(attrs.get("allowzero"))
        )
        return args[0].reshape(shape) if shape is not None else None
    if op in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes") if step.opset < 13 else (args[1] if len(args) > 1 else None)
        return computed_ops.squeezed(
            op, args[0], None if axes is None else [int(x) for x in np.reshape(axes, -1)]
        )
    return computed_ops.sliced(step.opset, args)
