"""The top-level nodes onnxruntime's level-1 graph optimizations remove before it places nodes.

With graph optimizations on (``ORT_ENABLE_BASIC`` and above, onnxruntime's default included), two of
onnxruntime's level-1 transformers remove gather/scatter nodes before partitioning, the same for every
provider, so no provider runs them:

* ``ConstantFolding`` (``onnxruntime/core/optimizer/constant_folding.cc``) walks the graph in
  topological order and computes with its CPU kernels, turning the outputs into initializers: a ``Shape``
  whose input's shape is static (every dimension a number), and any other ai.onnx node (no subgraph
  attribute, not a random op, not DequantizeLinear) every input of which is a constant initializer: an
  initializer that is not also a graph input a caller may override (IR version 4 and later), a Constant
  node's output (onnxruntime turns Constant nodes into initializers when it loads the graph) or a folded
  node's output. After a
  ``Shape`` it removes the chain that fed only it (``RemoveNodesWithOneOutputBottomUp``: its producer when
  the Shape is its only consumer and it gives no graph output, then the producers left unread so).
* ``ReshapeFusion`` (``reshape_fusion.cc``) replaces the ``Concat`` giving a ``Reshape`` its shape by a
  constant when each of its inputs is a constant, a ``Shape -> Gather(i) -> Unsqueeze(axes=0)`` of the
  reshaped tensor (or of one of the same shape) at position ``i`` (becoming 0, "copy the dimension"), or
  a one-element value (becoming -1, at most one in all), and removes the chains that fed only the Concat
  by the same bottom-up rule.

:func:`optimized_away` follows those rules on the graph as given, with the shapes dmlshim's inference
gives (onnx's, with data propagation), repeating both until nothing changes, as onnxruntime's
transformer manager repeats a level; :mod:`.ort_folded_shapes` adds the shapes onnxruntime learns
from the values it folds and marks inspect's translations.
"""

from __future__ import annotations

import copy
import enum
import functools
import math
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import constant_node_shape, constant_node_value
from .ort_fold_kernels import INDEXED, index_out_of_range, no_cpu_kernel
from .ort_fusion_match import shape_dim_input
from .ort_rewrites import eliminate_identities, viewer_order
from .plan import Reason, TensorInfo

__all__ = ["OPTIMIZED_AWAY_CODE", "FoldCause", "merged_twins", "optimized_away", "optimized_away_reason"]

OPTIMIZED_AWAY_CODE = "EP_OPTIMIZED_AWAY"
"""Reason code of a node onnxruntime's graph optimizations remove before placing nodes on providers."""

NONDETERMINISTIC_OPS = frozenset(
    {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial"}
)
"""ai.onnx ops onnxruntime's ``IsOperationDeterministic`` says no to: never folded."""

_RUN_WARNINGS = frozenset({"EP_OUTPUT_UNWRITTEN", "EP_DESCRIPTOR_FAILS"})  # about a node the provider runs
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})  # the ai.onnx ops with graph attributes
_CSE_VALUE_LIMIT = 8  # constants of at most this many elements are compared by value in CSE
_MAX_PASSES = 10  # onnxruntime's transformer manager repeats a level's transformers at most this often
_ONNX = ("", "ai.onnx")
# since_version of the schemas ReshapeFusion matches (IsSupportedOptypeVersionAndDomain): its source's
# lists, with the later schemas the onnxruntime of the floor (1.24) matches too (Shape-15: the oracle test)
_FUSION_VERSIONS = {
    "Reshape": (5, 13, 14, 19, 21),
    "Concat": (1, 4, 11, 13),
    "Unsqueeze": (1, 11, 13, 21),
    "Gather": (1, 11, 13),
    "Shape": (1, 13, 15, 19, 21),
}


class FoldCause(enum.Enum):
    """Why onnxruntime's level-1 optimizations remove a node."""

    CONSTANT_INPUTS = "constant folding: every input is a constant"
    STATIC_SHAPE = "constant folding: a Shape of a static shape"
    ONLY_READ_BY_FOLDED = "constant folding: only read by a Shape it folded"
    RESHAPE_FUSION = "the reshape fusion: only read by the shape computation of a Reshape it makes a constant"


def _graphs(attr: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _read_names(graph: onnx.GraphProto) -> Iterator[str]:
    """Every value name the nodes of ``graph`` (and of their subgraphs) read."""
    for node in graph.node:
        yield from (n for n in node.input if n)
        for attr in node.attribute:
            for g in _graphs(attr):
                yield from _read_names(g)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


@functools.lru_cache(maxsize=256)
def _since(op_type: str, opset: int) -> int:
    try:
        return int(onnx.defs.get_schema(op_type, opset, "").since_version)
    except onnx.defs.SchemaError:
        return 0


class _Graph:
    """The top-level graph as onnxruntime's transformers see it: producers, consumer edges, constants."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        ir_version: int,
        opset: int,
        info: Callable[[str], TensorInfo | None],
        outer: _Graph | None = None,
        top_level: bool = True,
    ) -> None:
        self.nodes = graph.node
        # onnxruntime's constant sharing and CSE's comparison of small initializers by value: in the
        # top-level graph only (not in bodies, nor in a branch inlined from one; 1.24 and 1.32)
        self.top_level = top_level
        self.outer = outer  # the enclosing graph of a subgraph: its constants are this one's too
        self.opset = opset
        self.info = info
        inputs = {v.name for v in graph.input}
        self.initializers = {t.name: t for t in graph.initializer if ir_version < 4 or t.name not in inputs}
        self.constant = set(self.initializers)
        self.constant.update(
            t.values.name for t in graph.sparse_initializer if ir_version < 4 or t.values.name not in inputs
        )
        self.constant_nodes: dict[str, onnx.NodeProto] = {}
        self._values: dict[tuple[str, int], np.ndarray | None] = {}  # shared by fresh copies
        # each node's fields read from protobuf once (a large graph's walks read these lists)
        nodes = self.nodes
        self.ops = [n.op_type for n in nodes]
        self.onnx = [n.domain in _ONNX for n in nodes]
        raw_inputs = [list(n.input) for n in nodes]
        self.outs = [list(n.output) for n in nodes]
        for i, op in enumerate(self.ops):
            if op == "Constant" and self.onnx[i]:
                self.constant.update(o for o in self.outs[i] if o)
                self.constant_nodes.update((o, nodes[i]) for o in self.outs[i] if o)
        self.subgraph = [
            op in _CONTROL_FLOW if self.onnx[i] else _has_subgraph(nodes[i]) for i, op in enumerate(self.ops)
        ]
        self.bodies = {  # the names subgraphs read from this scope: implicit inputs, edges too
            i: {n for a in nodes[i].attribute for g in _graphs(a) for n in _read_names(g)}
            for i, sub in enumerate(self.subgraph)
            if sub
        }
        self.graph_outputs = {v.name for v in graph.output}
        # an Identity removed; one whose producer writes its graph output instead
        self.eliminated, self.renamed = eliminate_identities(
            self.ops, self.onnx, self.outs, raw_inputs, self.graph_outputs, self.bodies
        )
        self.value_class: dict[str, str] = {}
        self.canon = self._shared_constants() if top_level else {}
        if outer is not None:  # outer-scope constants (initializers, folded values), not shared here
            self.constant.update(n for n in outer.constant if n not in self.constant)
        self.rep = self._common_subexpressions(raw_inputs)
        canon = self.canon
        self.inputs = [[canon.get(n, n) for n in names] for names in raw_inputs] if canon else raw_inputs
        self.producer: dict[str, int] = {}
        rep = self.rep
        for i, outs in enumerate(self.outs):
            if rep[i] == i and not (self.ops[i] == "Constant" and self.onnx[i]) and not self.eliminated[i]:
                for o in outs:
                    if o:
                        self.producer[o] = i
        self.edges: dict[int, int] = {}  # consumer edges of a node's outputs (one per input slot)
        producer, edges = self.producer, self.edges
        for i, names in enumerate(self.inputs):
            if rep[i] != i or self.eliminated[i]:
                continue  # merged into its twin (its edges went with it), or an Identity removed
            if i in self.bodies:
                names = names + sorted({canon.get(n, n) for n in self.bodies[i]})
            for name in names:
                if name:
                    p = producer.get(name)
                    if p is not None:
                        edges[p] = edges.get(p, 0) + 1
        self.outputs = {self.canon.get(v.name, v.name) for v in graph.output}
        self.folded: set[str] = set()  # outputs constant folding or the fusion made initializers
        self.fused: dict[str, list[int]] = {}  # a fused Concat's output -> the shape the fusion gives it
        self.removed: dict[int, FoldCause] = {}
        self._start = (frozenset(self.constant), dict(self.edges))

    def fresh(self, info: Callable[[str], TensorInfo | None]) -> _Graph:
        """This graph before any removal, with other shapes (its structure, twins and constants kept)."""
        out = copy.copy(self)
        out.info = info
        constant, edges = self._start
        out.constant, out.edges = set(constant), dict(edges)
        out.folded, out.fused, out.removed = set(), {}, {}
        return out

    def _shared_constants(self) -> dict[str, str]:
        """onnxruntime's ``ConstantSharing``: one-element constants of the same type and value share one
        name (the first), so the nodes reading them may be twins."""
        canon: dict[str, str] = {}
        first: dict[tuple[object, ...], str] = {}
        for name in sorted(self.constant, key=lambda n: n):
            value = self.value(name, limit=_CSE_VALUE_LIMIT)
            if value is None or value.dtype == object:
                continue
            key = (value.dtype.str, value.shape, value.tobytes())
            self.value_class[name] = same = first.setdefault(key, name)
            if value.size == 1:
                canon[name] = same
        return canon

    def _common_subexpressions(self, raw_inputs: list[list[str]]) -> list[int]:
        """onnxruntime's ``CommonSubexpressionElimination``: a node of the same op, inputs and attributes
        as one before it in onnxruntime's graph-viewer order (:func:`.ort_rewrites.viewer_order`) is merged
        into it (its outputs are that one's), repeatedly downstream, unless it writes a graph output.
        Constant initializers of at most 8 elements are the same input when their type, shape and values
        are (onnxruntime 1.24 and 1.32 compare them so; larger ones by name)."""
        rep = list(range(len(self.nodes)))
        # by op and inputs first: attributes are compared (serialized) only between such candidates
        seen: dict[tuple[object, ...], list[tuple[bytes, int]]] = {}
        canon, same = self.canon, self.value_class  # value_class: canon's names for one-element values
        outputs = self.graph_outputs | set(self.renamed.values())
        absent = [
            (op == "Constant" and self.onnx[i]) or self.eliminated[i] or i in self.renamed
            for i, op in enumerate(self.ops)
        ]
        for i in viewer_order(absent, self.outs, raw_inputs, self.bodies):
            op = self.ops[i]
            if op in NONDETERMINISTIC_OPS or op == "Constant" or self.subgraph[i] or self.eliminated[i]:
                continue
            node = self.nodes[i]
            names = raw_inputs[i]
            key = (
                "" if self.onnx[i] else node.domain,
                op,
                tuple([same.get(c, c) for c in [canon.get(n, n) for n in names]])
                if canon or same
                else tuple(names),
                len(self.outs[i]),
            )
            earlier = seen.get(key)
            if earlier is None:
                seen[key] = [(b"", i)]  # attributes read when a candidate comes
                continue
            attrs = b"".join(a.SerializeToString() for a in node.attribute)
            if len(earlier) == 1:  # the first candidate's attributes, not read yet (b"" until now)
                first = earlier[0][1]
                earlier[0] = (b"".join(a.SerializeToString() for a in self.nodes[first].attribute), first)
            j = next((k for a, k in earlier if a == attrs), None)
            if j is None:
                earlier.append((attrs, i))
                continue
            if j != i and not outputs.intersection(self.outs[i]):  # a graph output is never replaced
                rep[i] = j
                for mine, theirs in zip(node.output, self.nodes[j].output, strict=True):
                    if mine:
                        self.canon[mine] = self.canon.get(theirs, theirs)
        return rep

    def input_node(self, i: int, slot: int) -> int | None:
        names = self.inputs[i]
        if slot >= len(names) or not names[slot]:
            return None
        p = self.producer.get(names[slot])
        return None if p is None or p in self.removed else p

    def is_op(self, i: int | None, op_type: str) -> bool:
        if i is None or self.ops[i] != op_type or not self.onnx[i]:
            return False
        return _since(op_type, self.opset) in _FUSION_VERSIONS[op_type]

    def produces_output(self, i: int) -> bool:
        return any(o in self.outputs for o in self.outs[i])

    def remove(self, i: int, cause: FoldCause) -> None:
        self.removed[i] = cause
        for name in self.inputs[i]:
            p = self.producer.get(name) if name else None
            if p is not None and p not in self.removed:
                self.edges[p] -= 1

    def remove_chain(self, start: int, cause: FoldCause) -> None:
        """onnxruntime's ``RemoveNodesWithOneOutputBottomUp`` from ``start``."""
        queue = [start]
        seen: set[int] = set()
        while queue:
            i = queue.pop(0)
            if i in seen or i in self.removed:
                continue
            seen.add(i)
            # the start's one edge is to the node being replaced; any other node must be left unread
            if self.edges.get(i, 0) > (1 if i == start else 0) or self.produces_output(i):
                continue
            queue.extend(p for s in range(len(self.inputs[i])) if (p := self.input_node(i, s)) is not None)
            self.remove(i, cause)

    def value(self, name: str, limit: int = 64) -> np.ndarray | None:
        """The value of a constant initializer or Constant output of at most ``limit`` elements (None:
        unknown, larger, or folded)."""
        key = (name, limit)
        if key not in self._values:
            self._values[key] = self._read_value(name, limit)
        return self._values[key]

    def _read_value(self, name: str, limit: int) -> np.ndarray | None:
        init = self.initializers.get(name)
        if init is None and name not in self.constant_nodes and self.outer is not None:
            return self.outer.value(name, limit)
        if init is not None:
            if math.prod(init.dims) > limit or init.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(init)
        node = self.constant_nodes.get(name)
        shape = constant_node_shape(node) if node is not None else None
        if node is None or shape is None or math.prod(shape) > limit:
            return None
        return constant_node_value(node)

    def int_values(self, name: str) -> list[int] | None:
        """onnxruntime's ``AppendTensorFromInitializer``: an int64/int32 constant's values (a folded
        one's are not read here: None unless it is known to be one element, then [0], never -1)."""
        if self.is_folded(name):
            found = self.info(name)
            dims = found.static_dims if found is not None else None
            return [0] if dims is not None and math.prod(dims) == 1 else None
        if name not in self.constant:
            return None
        value = self.value(name)
        if value is None or value.dtype not in (np.int64, np.int32):
            return None
        return [int(v) for v in value.reshape(-1)]

    def is_folded(self, name: str) -> bool:
        """Whether ``name`` is a value constant folding computed, here or in an enclosing graph."""
        return name in self.folded or (self.outer is not None and self.outer.is_folded(name))

    def one_element(self, name: str) -> bool:
        found = self.info(name)
        dims = found.static_dims if found is not None else None
        return dims is not None and math.prod(dims) == 1


def _fold_pass(g: _Graph) -> bool:
    changed = False
    removed, rep, onnx_domain = g.removed, g.rep, g.onnx
    for i, op in enumerate(g.ops):
        if i in removed or rep[i] != i or op == "Constant" or not onnx_domain[i] or g.eliminated[i]:
            continue
        names = g.inputs[i]
        if op == "Shape":
            found = g.info(names[0]) if names and names[0] else None
            if found is None or found.static_dims is None:
                continue
            cause = FoldCause.STATIC_SHAPE
        elif op in NONDETERMINISTIC_OPS or op == "DequantizeLinear" or g.subgraph[i]:
            continue  # DequantizeLinear: kept for the QDQ fusions (onnxruntime's default; 1.24 and 1.32)
        elif not all(n in g.constant for n in names if n):
            continue
        elif op in INDEXED and index_out_of_range(g, i):
            continue  # onnxruntime's kernel fails at folding: the node stays, unfolded, and its readers
        elif no_cpu_kernel(g, i):
            continue  # constant folding runs CPU kernels only: a node with none stays
        else:
            cause = FoldCause.CONSTANT_INPUTS
        outs = [o for o in g.outs[i] if o]
        g.constant.update(outs)
        g.folded.update(outs)
        for slot in range(len(names)):
            p = g.input_node(i, slot)
            if p is not None:
                g.remove_chain(p, FoldCause.ONLY_READ_BY_FOLDED)
        g.remove(i, cause)
        changed = True
    return changed


def _fusion_pass(g: _Graph) -> bool:
    changed = False
    for i, op in enumerate(g.ops):
        if op != "Reshape" or i in g.removed or g.rep[i] != i or not g.is_op(i, "Reshape"):
            continue
        if len(g.inputs[i]) < 2:
            continue
        concat = g.input_node(i, 1)
        if not g.is_op(concat, "Concat") or g.edges.get(concat, 0) != 1 or g.produces_output(concat):  # type: ignore[arg-type]
            continue
        root = g.inputs[i][0]
        shape_value: list[int] = []
        ok = True
        for slot, name in enumerate(g.inputs[concat]):  # type: ignore[index]
            values = g.int_values(name) if name else None
            if values is not None:
                shape_value += values
            elif shape_dim_input(g, concat, slot, root, len(shape_value)):  # type: ignore[arg-type]
                shape_value.append(0)
            elif name and g.one_element(name):
                shape_value.append(-1)
            else:
                ok = False
                break
        if not ok or shape_value.count(-1) > 1:
            continue
        for slot in range(len(g.inputs[concat])):  # type: ignore[index]
            p = g.input_node(concat, slot)  # type: ignore[arg-type]
            if p is not None:
                g.remove_chain(p, FoldCause.RESHAPE_FUSION)
        out = g.canon.get(g.nodes[concat].output[0], g.nodes[concat].output[0])  # type: ignore[index]
        g.fused[out] = shape_value
        g.constant.add(out)
        g.folded.add(out)
        g.remove(concat, FoldCause.RESHAPE_FUSION)  # type: ignore[arg-type]
        changed = True
    return changed


def optimized_away(
    graph: onnx.GraphProto,
    ir_version: int,
    opset: int,
    info: Callable[[str], TensorInfo | None],
    fused: dict[str, list[int]] | None = None,
) -> dict[int, FoldCause]:
    """The indices of the top-level nodes of ``graph`` onnxruntime's level-1 optimizations remove, with
    why (see the module's description).

    Args:
        graph: the top-level graph as given (its initializers, not an inferred copy's), nodes sorted.
        ir_version: the model's IR version (from 4, an initializer listed as a graph input may be
            overridden, so it is not a constant).
        opset: the model's ai.onnx opset.
        info: the inferred type and shape of a value (None when unknown).
        fused: filled, when given, with the shape the reshape fusion gives each Concat output it replaces.
    """
    return _run(_Graph(graph, ir_version, opset, info), fused)


def _run(g: _Graph, fused: dict[str, list[int]] | None = None) -> dict[int, FoldCause]:
    for _ in range(_MAX_PASSES):
        # onnxruntime folds in topological order, in one pass; the file's order is not one once twins are
        # merged into the first in the graph-viewer order (a later node's output read by an earlier one):
        # folding repeats until nothing more folds, before the reshape fusion sees the graph
        folded = False
        while _fold_pass(g):
            folded = True
        merged = _fusion_pass(g)
        if not (folded or merged):
            break
    if fused is not None:
        fused.update(g.fused)
    # a twin merged by common-subexpression elimination shares its representative's fate
    return {i: g.removed[g.rep[i]] for i in range(len(g.nodes)) if g.rep[i] in g.removed}


def optimized_away_reason(cause: enum.Enum) -> Reason:
    """The ``EP_OPTIMIZED_AWAY`` reason of a node onnxruntime's level-1 optimizations remove."""
    return Reason(
        OPTIMIZED_AWAY_CODE,
        f"onnxruntime's graph optimizations remove this node before placing nodes on providers "
        f"({cause.value}; level basic and above, its default): no provider runs it",
        cause.name,
    )


def merged_twins(
    graph: onnx.GraphProto,
    ir_version: int,
    opset: int,
    info: Callable[[str], TensorInfo | None],
    top_level: bool = True,
) -> dict[int, int]:
    """The top-level nodes onnxruntime's common-subexpression elimination merges into a twin (the same op
    and attributes reading the same values, once one-element constants are shared and earlier twins
    merged; the twin kept is the first in onnxruntime's graph-viewer order, which is not the file's), by
    index, with the twin's index: such a node runs as its twin does."""
    g = _Graph(graph, ir_version, opset, info, top_level=top_level)
    return {i: r for i, r in enumerate(g.rep) if r != i}
