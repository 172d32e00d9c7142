"""Graph analysis for the partitioned engine: which nodes are emulated, and CPU partitions between them.

The top-level graph is cut into an ordered list of steps. An *emulated* step is one gather/scatter node
that executes from its DirectML descriptor; a *CPU segment* is a set of ordinary nodes (and fallbacks, and
whole control-flow nodes) that run together in one onnxruntime session. Segments are made as large as the
data dependencies allow: every CPU node that can run is taken into the current segment before the next
emulated node, so a chain ``Add -> Gather -> Mul -> Relu -> ScatterND -> Add`` gives three segments, and
independent branches share segments.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import onnx

from ...errors import BadModelError
from ...graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs, walk_nodes

# Where onnxruntime's DirectML provider places nodes is decided in one place, shared with inspect.
from ...translate.placement import (  # noqa: F401 (re-exported)
    CONTROL_FLOW_OPS,
    CPU_OUTPUT_OPS,
    DML_CPU_INPUTS,
    SMALL_INITIALIZER_ELEMENTS,
    cpu_preferred_nodes,
)


def outer_scope_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (implicit inputs of control flow)."""
    found: set[str] = set()
    for _, g in subgraphs(node):
        found |= _graph_free_names(g)
    return found


def _graph_free_names(graph: onnx.GraphProto) -> set[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: set[str] = set()
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                free.add(name)
        for name in outer_scope_inputs(node):
            if name not in defined:
                free.add(name)
        defined.update(o for o in node.output if o)
    free |= {o.name for o in graph.output if o.name not in defined}
    return free


def node_reads(node: onnx.NodeProto) -> tuple[str, ...]:
    """Every value a node reads: its non-empty inputs plus what its subgraphs read from outside."""
    explicit = [n for n in node.input if n]
    implicit = sorted(outer_scope_inputs(node) - set(explicit)) if node.attribute else []
    return (*explicit, *implicit)


@dataclass(frozen=True)
class NestedNode:
    """A gather/scatter node inside a control-flow subgraph.

    Attributes:
        path: ``<top node>/<attribute>/<node>`` (deeper nesting adds segments), as ``dmlshim inspect``
            names it.
        node: the node.
        owner: the display name of the top-level control-flow node that holds it.
        owner_op: that node's op type.
    """

    path: str
    node: onnx.NodeProto
    owner: str
    owner_op: str


def nested_gather_scatter(nodes: Sequence[onnx.NodeProto], names: Sequence[str]) -> list[NestedNode]:
    """Every gather/scatter node inside the subgraphs of the given top-level nodes, in graph order."""
    found: list[NestedNode] = []
    for node, name in zip(nodes, names, strict=False):
        for attr_name, g in subgraphs(node):
            for path, inner in walk_nodes(g, subgraph_prefix(name, attr_name)):
                if is_gather_scatter(inner):
                    found.append(NestedNode(path, inner, name, node.op_type))
    return found


@dataclass(frozen=True)
class CpuSegment:
    """Nodes that run together in one onnxruntime session.

    Attributes:
        index: position among the segments (0-based).
        nodes: indices into the top-level graph's node list, in a valid execution order.
        inputs: values the segment reads from outside (graph inputs, emulated outputs, earlier segments'
            outputs); initializers are not listed here but in ``initializers``.
        initializers: initializer (or folded constant) names the segment's nodes read.
        outputs: values the segment produces that later steps read or that are graph outputs.
    """

    index: int
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]
    initializers: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class EmulatedNode:
    """One gather/scatter node executed from its DirectML descriptor (index into the graph's nodes)."""

    node: int


Step = CpuSegment | EmulatedNode


@dataclass(frozen=True)
class Partition:
    """The execution order of the top-level graph.

    Attributes:
        steps: CPU segments and emulated nodes, in an order that respects every data dependency.
        consumers: for each value, the indices of the steps that read it.
    """

    steps: tuple[Step, ...]
    consumers: Mapping[str, tuple[int, ...]]

    @property
    def segments(self) -> tuple[CpuSegment, ...]:
        return tuple(s for s in self.steps if isinstance(s, CpuSegment))


def partition_graph(
    graph: onnx.GraphProto,
    emulated: Collection[int],
    *,
    available: Collection[str] = (),
    constants: Collection[str] = (),
) -> Partition:
    """Cut the top-level graph into CPU segments and emulated nodes.

    Args:
        graph: the top-level graph.
        emulated: indices of the nodes that run as emulated steps; every other node is a CPU node.
        available: values present before any step runs (graph inputs). Initializers are added.
        constants: values with a known constant value that segments embed as initializers (initializers
            and folded Constant nodes); nodes producing them are skipped.

    Raises:
        BadModelError: a node reads a value nothing produces, or the graph has a cycle.
    """
    nodes = list(graph.node)
    emulated = set(emulated)
    const_names = set(constants) | {t.name for t in graph.initializer}
    graph_inputs = {v.name for v in graph.input}
    ready_values = set(available) | graph_inputs | const_names

    reads = [node_reads(n) for n in nodes]
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out and out not in ready_values:
                producer[out] = i
    skipped = {
        i for i, node in enumerate(nodes) if node.output and all(o in const_names for o in node.output if o)
    }

    waiting = [0] * len(nodes)
    dependants: dict[int, list[int]] = {}
    for i, needs in enumerate(reads):
        if i in skipped:
            continue
        for name in set(needs):
            if name in ready_values:
                continue
            src = producer.get(name)
            if src is None:
                raise BadModelError(
                    f"node {node_path('', nodes[i], i)!r} reads {name!r}, which no node, "
                    "graph input or initializer provides",
                    node=node_path("", nodes[i], i),
                    op_type=nodes[i].op_type,
                    tensor=name,
                )
            waiting[i] += 1
            dependants.setdefault(src, []).append(i)

    cpu_ready: list[int] = []
    emu_ready: list[int] = []
    for i in range(len(nodes)):
        if i not in skipped and waiting[i] == 0:
            heapq.heappush(emu_ready if i in emulated else cpu_ready, i)

    def finish(i: int) -> None:
        for j in dependants.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(emu_ready if j in emulated else cpu_ready, j)

    order: list[list[int] | int] = []
    done = 0
    while cpu_ready or emu_ready:
        if cpu_ready:
            group: list[int] = []
            while cpu_ready:
                i = heapq.heappop(cpu_ready)
                group.append(i)
                finish(i)
            order.append(group)
            done += len(group)
        # Every emulated node that can run goes before the next segment, so the CPU work after a set of
        # independent gathers lands in one segment instead of one per gather.
        while emu_ready:
            i = heapq.heappop(emu_ready)
            order.append(i)
            finish(i)
            done += 1
    if done != len(nodes) - len(skipped):
        stuck = [node_path("", nodes[i], i) for i in range(len(nodes)) if waiting[i] > 0]
        raise BadModelError(f"the graph has a cycle through nodes {stuck[:5]}", value=stuck)

    step_of: dict[str, int] = {}
    for k, item in enumerate(order):
        for i in item if isinstance(item, list) else [item]:
            for out in nodes[i].output:
                if out:
                    step_of[out] = k
    consumers: dict[str, list[int]] = {}
    for k, item in enumerate(order):
        for i in item if isinstance(item, list) else [item]:
            for name in reads[i]:
                if not consumers.get(name) or consumers[name][-1] != k:
                    consumers.setdefault(name, []).append(k)
    graph_outputs = {o.name for o in graph.output}

    steps: list[Step] = []
    seg_count = 0
    for k, item in enumerate(order):
        if not isinstance(item, list):
            steps.append(EmulatedNode(item))
            continue
        produced: list[str] = []
        for i in item:
            produced.extend(o for o in nodes[i].output if o)
        produced_set = set(produced)
        inputs: list[str] = []
        inits: list[str] = []
        seen: set[str] = set()
        for i in item:
            for name in reads[i]:
                if name in seen or name in produced_set:
                    continue
                seen.add(name)
                # A graph input with an initializer is a default the caller may override: feed it.
                (inits if name in const_names and name not in graph_inputs else inputs).append(name)
        outputs = [
            name for name in produced if name in graph_outputs or any(c != k for c in consumers.get(name, ()))
        ]
        steps.append(CpuSegment(seg_count, tuple(item), tuple(inputs), tuple(inits), tuple(outputs)))
        seg_count += 1
    return Partition(tuple(steps), {k: tuple(v) for k, v in consumers.items()})
