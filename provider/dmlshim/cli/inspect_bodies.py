"""The shapes a run gives to the gather/scatter nodes inside If, Loop and Scan bodies (``inspect --inputs``).

onnxruntime hands out no value of a subgraph, so the model is instrumented before the run: every graph
that holds a gather/scatter node (or holds a control-flow node whose bodies do) builds a *record*, a 1-D
int64 tensor of entries ``[id, rank, d0, ..., d(rank-1)]``, one per value those nodes read (``Shape`` and
``Concat`` nodes, no tensor copied out). A record starts with its graph's marker entry ``[id, 0]``, so each
execution of a body can be told apart:

* an If gets one more output: the record of the branch that ran (each branch gives its own);
* a Loop or Scan gets one more scan output: each iteration's record, led by its length and padded to a
  fixed length (scan outputs keep one shape), sized for values of rank up to 16: a longer record is
  reported as cut, never guessed. A Loop whose body holds another Loop (records of any length) gets
  instead one more loop-carried value, initially empty, to which each iteration appends its record
  (onnxruntime lets a carried value change its size from one iteration to the next);
* the top-level graph hands out each control-flow node's record as an extra graph output.

:func:`parse_records` reads the records back into the input shapes of every execution of every body
node, with the iterations (of each enclosing Loop/Scan, 1-based) at which it ran. Only the ai.onnx If,
Loop (any opset) and Scan (opset 9 and later) are instrumented; other graph attributes keep static shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..graph import default_opset, is_gather_scatter, node_path, subgraph_prefix, subgraphs, value_names

__all__ = ["BodyRecords", "Execution", "instrument_bodies", "parse_records"]

logger = logging.getLogger(__name__)

_PREFIX = "dmlshim.rec."
_CONTROL = ("If", "Loop", "Scan")
_MIN_ROW = 64  # the least length of a Scan iteration's record
_UNKNOWN_RANK = 16  # the rank assumed when sizing a row for a value (a longer record is reported as cut)


@dataclass(frozen=True)
class Execution:
    """One execution of a body: the iterations of its enclosing Loops/Scans (outermost first) and the
    shapes the run gave to the values recorded in it."""

    iterations: tuple[int, ...]
    shapes: Mapping[str, tuple[int, ...]]


@dataclass
class BodyRecords:
    """What the instrumentation added (filled by :func:`instrument_bodies`).

    Attributes:
        outputs: the extra top-level outputs holding the records.
        meaning: entry id -> ``("graph", prefix, kind)`` (a body's marker; kind ``If``, ``Loop`` or
            ``Scan``), ``("value", prefix, name)`` or ``("rows", prefix, row_length)`` (a Loop's or
            Scan's rows).
        nodes: the body gather/scatter nodes whose inputs are recorded, by path name: (graph prefix,
            input names).
        graphs: the bodies instrumented, by prefix: the owner node's path name, the attribute and the
            prefix of the graph holding the owner.
    """

    outputs: list[str] = field(default_factory=list)
    meaning: dict[int, tuple[str, str, object]] = field(default_factory=dict)
    nodes: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    graphs: dict[str, tuple[str, str, str]] = field(default_factory=dict)


def _holds_gather_scatter(graph: onnx.GraphProto) -> bool:
    return any(
        is_gather_scatter(n) or any(_holds_gather_scatter(g) for _, g in subgraphs(n)) for n in graph.node
    )


def _opset(model: onnx.ModelProto) -> int:
    return default_opset(model)  # the last entry, as onnxruntime


class _Builder:
    def __init__(self, model: onnx.ModelProto, records: BodyRecords) -> None:
        self.records = records
        self.opset = _opset(model)
        self.count = 0
        self._taken = value_names(model.graph)  # the model's own names are never a record's

    def name(self) -> str:
        self.count += 1
        while f"{_PREFIX}{self.count}" in self._taken:
            self.count += 1
        return f"{_PREFIX}{self.count}"

    def ident(self, meaning: tuple[str, str, object]) -> int:
        key = len(self.records.meaning) + 1
        self.records.meaning[key] = meaning
        return key

    def const(self, graph: onnx.GraphProto, values: Sequence[int]) -> str:
        out = self.name()
        tensor = numpy_helper.from_array(np.asarray(values, dtype=np.int64), out)
        graph.node.append(helper.make_node("Constant", [], [out], value=tensor, name=out))
        return out

    def node(self, graph: onnx.GraphProto, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.name()
        graph.node.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def entry(self, graph: onnx.GraphProto, ident: int, value: str) -> str:
        """``[ident, rank, dims...]`` of ``value``."""
        shape = self.node(graph, "Shape", [value])
        rank = self.node(graph, "Shape", [shape])
        return self.node(graph, "Concat", [self.const(graph, [ident]), rank, shape], axis=0)

    def concat(self, graph: onnx.GraphProto, parts: Sequence[str]) -> str:
        return self.node(graph, "Concat", parts, axis=0) if len(parts) > 1 else parts[0]

    # -- one graph ------------------------------------------------------------------------------------

    def graph_entries(self, graph: onnx.GraphProto, prefix: str, top: bool) -> tuple[list[str], int]:
        """The entries ``graph`` records (its body gather/scatter nodes' inputs, its control-flow nodes'
        records), appended to it; and an upper bound of their length when no Loop is nested (else -1)."""
        entries: list[str] = []
        bound = 0
        recorded: dict[str, int] = {}
        names = [node_path(prefix, n, i) for i, n in enumerate(graph.node)]
        for node, name in zip(list(graph.node), names, strict=True):
            if not top and is_gather_scatter(node):
                inputs = tuple(i for i in node.input if i)
                self.records.nodes[name] = (prefix, inputs)
                for value in inputs:
                    if value not in recorded:
                        recorded[value] = self.ident(("value", prefix, value))
                        entries.append(self.entry(graph, recorded[value], value))
                        bound += 2 + _UNKNOWN_RANK
            if node.op_type in _CONTROL and node.domain in ("", "ai.onnx"):
                if not any(_holds_gather_scatter(g) for _, g in subgraphs(node)):
                    continue
                made = self.control(graph, node, name, prefix)
                if made is not None:
                    out, inner = made
                    entries.append(out)
                    bound = -1 if inner < 0 or bound < 0 else bound + inner
        return entries, bound

    def body_record(self, graph: onnx.GraphProto, prefix: str, kind: str) -> tuple[str, int]:
        marker = self.const(graph, [self.ident(("graph", prefix, kind)), 0])
        entries, bound = self.graph_entries(graph, prefix, top=False)
        return self.concat(graph, [marker, *entries]), (bound + 2 if bound >= 0 else -1)

    def control(
        self, graph: onnx.GraphProto, node: onnx.NodeProto, name: str, holder: str
    ) -> tuple[str, int] | None:
        if node.op_type == "If":
            return self.if_node(node, name, holder)
        if node.op_type == "Loop":
            return self.loop_node(graph, node, name, holder)
        if self.opset >= 9:
            return self.scan_node(graph, node, name, holder)
        return None

    def if_node(self, node: onnx.NodeProto, name: str, holder: str) -> tuple[str, int]:
        out = self.name()
        bounds = []
        for attr in node.attribute:
            if attr.name in ("then_branch", "else_branch") and attr.type == onnx.AttributeProto.GRAPH:
                prefix = subgraph_prefix(name, attr.name)
                self.records.graphs[prefix] = (name, attr.name, holder)
                record, bound = self.body_record(attr.g, prefix, "If")
                attr.g.output.append(helper.make_tensor_value_info(record, TensorProto.INT64, [None]))
                bounds.append(bound)
        node.output.append(out)
        return out, (-1 if any(b < 0 for b in bounds) else max(bounds, default=0))

    def loop_node(
        self, graph: onnx.GraphProto, node: onnx.NodeProto, name: str, holder: str
    ) -> tuple[str, int] | None:
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            return None
        carried = len(node.input) - 2
        if carried < 0 or len(body.input) != carried + 2:
            return None
        prefix = subgraph_prefix(name, "body")
        self.records.graphs[prefix] = (name, "body", holder)
        record, bound = self.body_record(body, prefix, "Loop")
        if bound >= 0:  # a bounded record: one row per iteration, a scan output (linear in iterations)
            return self.rows(graph, node, body, prefix, record, bound, len(body.output) - 1), -1
        # Nested loops: records of any length, appended to a carried value (onnxruntime lets it grow).
        state = self.name()
        after = self.node(body, "Concat", [state, record], axis=0)
        body.input.append(helper.make_tensor_value_info(state, TensorProto.INT64, [None]))
        body.output.insert(1 + carried, helper.make_tensor_value_info(after, TensorProto.INT64, [None]))
        node.input.append(self.const(graph, []))
        outputs = list(node.output) + [""] * max(0, carried - len(node.output))
        out = self.name()
        outputs.insert(carried, out)
        del node.output[:]
        node.output.extend(outputs)
        return out, -1

    def scan_node(
        self, graph: onnx.GraphProto, node: onnx.NodeProto, name: str, holder: str
    ) -> tuple[str, int] | None:
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            return None
        prefix = subgraph_prefix(name, "body")
        self.records.graphs[prefix] = (name, "body", holder)
        record, bound = self.body_record(body, prefix, "Scan")
        for attr in node.attribute:
            if attr.name in ("scan_output_axes", "scan_output_directions"):
                attr.ints.append(0)
        return self.rows(graph, node, body, prefix, record, bound, len(body.output)), -1

    def rows(
        self,
        graph: onnx.GraphProto,
        node: onnx.NodeProto,
        body: onnx.GraphProto,
        prefix: str,
        record: str,
        bound: int,
        node_outputs: int,
    ) -> str:
        """Each iteration's record as a row ``[length, record..., 0...]`` of a fixed length, a new scan
        output of ``node`` (which has ``node_outputs`` outputs before it); the entry of the rows in the
        holding graph: ``[id, 2, iterations, row length, rows...]``."""
        row = max(_MIN_ROW, bound + 1) if bound >= 0 else 16 * _MIN_ROW
        length = self.node(body, "Reshape", [self.node(body, "Size", [record]), self.const(body, [1])])
        padded = self.node(body, "Concat", [length, record, self.const(body, [0] * row)], axis=0)
        if self.opset >= 10:
            cut = self.node(body, "Slice", [padded, self.const(body, [0]), self.const(body, [row])])
        else:
            cut = self.node(body, "Slice", [padded], starts=[0], ends=[row], axes=[0])
        body.output.append(helper.make_tensor_value_info(cut, TensorProto.INT64, [row]))
        rows = self.name()
        outputs = list(node.output) + [""] * max(0, node_outputs - len(node.output))
        del node.output[:]
        node.output.extend([*outputs[:node_outputs], rows])
        flat = self.node(graph, "Reshape", [rows, self.const(graph, [-1])])
        ident = self.ident(("rows", prefix, row))
        return self.node(graph, "Concat", [self.entry(graph, ident, rows), flat], axis=0)


def instrument_bodies(model: onnx.ModelProto) -> BodyRecords:
    """Instrument ``model`` in place (see the module doc); the records' top-level outputs are listed in
    the result but not added to the graph's outputs."""
    records = BodyRecords()
    builder = _Builder(model, records)
    entries, _ = builder.graph_entries(model.graph, "", top=True)
    records.outputs = entries
    return records


class _Incomplete(Exception):
    """A record that does not read as the instrumentation wrote it."""


def parse_records(
    records: BodyRecords, values: Iterable[np.ndarray]
) -> tuple[dict[str, list[Execution]], set[str]]:
    """Every execution of every instrumented body, by body prefix, from the records the run gave; and the
    bodies whose records were cut short (a Scan row too short), whose executions are left out."""
    executions: dict[str, list[Execution]] = {}
    cut: set[str] = set()
    for value in values:
        try:
            _Reader(records, executions, cut).read(np.asarray(value, dtype=np.int64).reshape(-1), ())
        except _Incomplete as exc:
            logger.warning("a control-flow record of the run could not be read: %s", exc)
    return executions, cut


class _Reader:
    def __init__(self, records: BodyRecords, executions: dict[str, list[Execution]], cut: set[str]) -> None:
        self.records = records
        self.executions = executions
        self.cut = cut
        self.counts: dict[tuple[str, tuple[int, ...]], int] = {}

    def read(self, flat: np.ndarray, iterations: tuple[int, ...]) -> None:
        """Read entries; ``iterations`` are those of the graph holding the record."""
        current: dict[str, tuple[dict[str, tuple[int, ...]], tuple[int, ...]]] = {}
        pos = 0
        while pos < len(flat):
            if pos + 2 > len(flat):
                raise _Incomplete(f"entry cut at {pos}")
            ident, rank = int(flat[pos]), int(flat[pos + 1])
            dims = tuple(int(d) for d in flat[pos + 2 : pos + 2 + rank])
            if rank < 0 or len(dims) != rank or ident not in self.records.meaning:
                raise _Incomplete(f"entry {ident} of rank {rank} at {pos}")
            pos += 2 + rank
            kind, prefix, extra = self.records.meaning[ident]
            if kind == "graph":
                outer = self._outer(prefix, current, iterations)
                if extra in ("Loop", "Scan"):
                    key = (prefix, outer)
                    self.counts[key] = self.counts.get(key, 0) + 1
                    own = (*outer, self.counts[key])
                else:
                    own = outer
                shapes: dict[str, tuple[int, ...]] = {}
                current[prefix] = (shapes, own)
                self.executions.setdefault(prefix, []).append(Execution(own, shapes))
            elif kind == "value":
                if prefix not in current:
                    raise _Incomplete(f"value {extra!r} before its body's marker")
                current[prefix][0][str(extra)] = dims
            else:  # a Loop's or Scan's rows
                n, row = dims if len(dims) == 2 else (0, 0)
                data = flat[pos : pos + n * row]
                pos += n * row
                outer = self._outer(prefix, current, iterations)
                for k in range(n):
                    line = data[k * row : (k + 1) * row]
                    length = int(line[0]) if row else 0
                    if length > row - 1:
                        self.cut.add(prefix)
                        continue
                    self.read(line[1 : 1 + length], outer)

    def _outer(
        self,
        prefix: str,
        current: Mapping[str, tuple[dict[str, tuple[int, ...]], tuple[int, ...]]],
        iterations: tuple[int, ...],
    ) -> tuple[int, ...]:
        """The iterations of the graph that holds the body ``prefix``'s owner."""
        holder = self.records.graphs[prefix][2]
        found = current.get(holder)
        return found[1] if found is not None else iterations


def node_executions(
    records: BodyRecords, executions: Mapping[str, Sequence[Execution]], cut: set[str]
) -> dict[str, list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]]:
    """For every recorded body node that ran: ``(iterations, input shapes)`` of each execution (nodes of
    a body whose records were cut short are left out)."""
    out: dict[str, list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]] = {}
    for name, (prefix, inputs) in records.nodes.items():
        if prefix in cut or _cut_above(prefix, cut):
            continue
        found = []
        for ex in executions.get(prefix, ()):
            if all(i in ex.shapes for i in inputs):
                found.append((ex.iterations, tuple(ex.shapes[i] for i in inputs)))
        if found:
            out[name] = found
    return out


def _cut_above(prefix: str, cut: set[str]) -> bool:
    return any(prefix.startswith(c) for c in cut)
