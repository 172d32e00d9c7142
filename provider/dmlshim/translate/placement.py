"""Where onnxruntime's DirectML provider would run each gather/scatter node: one model for every command.

Two parts decide ``ort_placement``:

* per node (:func:`node_placement`): the provider's kernel registrations (opset, reduction, element types,
  from the support table) and the nodes it rejects outright (rank above 8, a scalar GatherND output);
* per graph (:func:`cpu_preferred_nodes`, :func:`graph_placements`): onnxruntime's partitioning pass for
  GPU providers moves cheap shape computations (``Shape -> Gather -> ...`` chains whose inputs are all CPU
  tensors) from the DirectML provider to the CPU.

``dmlshim inspect`` and the partitioned engine (``run``, ``validate``) both call these functions, so the
same node gets the same ``ort_placement`` in all three. The module also names where the provider's own
behaviour differs from ONNX for a node it takes (:func:`provider_notes`): those reasons carry codes
starting with ``EP_`` and are reported as warnings.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Collection, Mapping

import onnx

from ..graph import constant_node_shape
from ..model.zero_depth_scatternd import CRASH_NOTE, ORT_CRASHES_CODE, ort_crashes, ort_version
from .plan import CPU_PROVIDER, DML_PROVIDER, NodeTranslation, Reason, Status
from .support_table import find_row, ort_placement

__all__ = [
    "CONTROL_FLOW_OPS",
    "CPU_OUTPUT_OPS",
    "CPU_PREFERRED_MESSAGE",
    "DML_CPU_INPUTS",
    "REASON_CPU_PREFERRED",
    "SMALL_INITIALIZER_ELEMENTS",
    "cpu_preferred_nodes",
    "graph_placements",
    "node_placement",
    "provider_notes",
    "small_constants",
]

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})

CPU_OUTPUT_OPS = frozenset({"Shape", "Size"})
"""Ops whose outputs onnxruntime's DirectML provider leaves in CPU memory (they have no DML kernel)."""

SMALL_INITIALIZER_ELEMENTS = 100
"""onnxruntime treats an initializer of at most this many elements as a CPU-friendly input."""

REASON_CPU_PREFERRED = "EP_CPU_PREFERRED"
"""Reason code of a node the provider could run but onnxruntime moves to the CPU (a shape computation)."""
CPU_PREFERRED_MESSAGE = (
    "onnxruntime's DirectML provider runs this node on the CPU: every input is a CPU tensor (a shape "
    "computation), a small initializer or a graph input"
)

EP_INDEX_TUPLE_EMPTY = Reason(
    "EP_INDEX_TUPLE_EMPTY",
    "a ScatterND whose index tuples have 0 coordinates has no DirectML SCATTER_ND form; it runs on the CPU "
    "provider, whose kernel replaces the whole data tensor with each update",
)

# The provider rejects these outright, so it places the node nowhere.
_EP_REJECT_CODES = frozenset({"RANK_TOO_LARGE", "EP_REJECTS"})

DML_CPU_INPUTS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Expand": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Tile": frozenset({1}),
    "ConstantOfShape": frozenset({0}),
    "Pad": frozenset({1, 2, 3}),
    "TopK": frozenset({1}),
    "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}),
    "OneHot": frozenset({1}),
    "Split": frozenset({1}),
    "CumSum": frozenset({1}),
    "Trilu": frozenset({1}),
    "Range": frozenset({0, 1, 2}),
    "Clip": frozenset({1, 2}),
    "ReduceSum": frozenset({1}),
    "ReduceMean": frozenset({1}),
    "ReduceMax": frozenset({1}),
    "ReduceMin": frozenset({1}),
    "ReduceProd": frozenset({1}),
    "ReduceL1": frozenset({1}),
    "ReduceL2": frozenset({1}),
    "ReduceLogSum": frozenset({1}),
    "ReduceLogSumExp": frozenset({1}),
    "ReduceSumSquare": frozenset({1}),
}
"""Inputs the DirectML provider's kernels read from CPU memory (shapes, axes, counts). A CPU tensor fed
there does not pull the node onto the CPU. An approximation of its kernel registrations; ops not listed
take every input in GPU memory."""

_NO_CPU_PREFERENCE_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
        onnx.TensorProto.FLOAT8E4M3FN,
        onnx.TensorProto.FLOAT8E4M3FNUZ,
        onnx.TensorProto.FLOAT8E5M2,
        onnx.TensorProto.FLOAT8E5M2FNUZ,
    }
)


@functools.lru_cache(maxsize=1024)
def _row_placement(
    op_type: str, since: int, reduction: str, elem_types: tuple[int, ...]
) -> tuple[str | None, tuple[Reason, ...]]:
    """``ort_placement`` of the support row of (op_type, since): a few distinct answers per model."""
    row = find_row(op_type, since)
    if row is None:
        return None, ()
    return ort_placement(row, reduction, elem_types)


def node_placement(
    op_type: str,
    since: int,
    reduction: str,
    elem_types: tuple[int, ...],
    status: Status,
    codes: Collection[str],
) -> tuple[str | None, tuple[Reason, ...]]:
    """Where the provider places one node, judged from the node alone, and why when not on DirectML.

    Args:
        op_type: the ONNX op.
        since: the schema's since_version.
        reduction: the reduction attribute ("none" without one).
        elem_types: the element type of each input (0 = unknown).
        status: the translation's status.
        codes: the translation's reason codes.

    Returns:
        (placement, reasons): None when the provider rejects the node or the node is malformed.
    """
    if _EP_REJECT_CODES.intersection(codes) or (status is Status.ERROR and "SHAPE_UNKNOWN" not in codes):
        return None, ()
    placement, reasons = _row_placement(op_type, since, reduction, elem_types)
    if placement == DML_PROVIDER and "INDEX_TUPLE_EMPTY" in codes:
        return CPU_PROVIDER, (EP_INDEX_TUPLE_EMPTY,)
    return placement, reasons


def provider_notes(
    op_type: str, codes: Collection[str], shapes: Mapping[str, tuple[int | str | None, ...]]
) -> tuple[Reason, ...]:
    """Where the provider, having taken a node, does not compute ONNX's answer (facts §5).

    Args:
        op_type: the ONNX op.
        codes: the translation's reason codes.
        shapes: the input shapes by role (``data``, ``indices``), where known.
    """
    notes: list[Reason] = []
    indices = shapes.get("indices")
    if op_type == "ScatterND" and indices is not None and 0 in indices:
        notes.append(
            Reason(
                "EP_OUTPUT_UNWRITTEN",
                "onnxruntime's DirectML provider creates no operator for a ScatterND with empty indices and "
                "leaves its output unwritten (ONNX: the output is a copy of data); dmlshim returns the copy",
                list(indices),
            )
        )
    if op_type == "ScatterND" and "INDEX_TUPLE_EMPTY" in set(codes or ()) and ort_crashes():
        notes.append(
            Reason(
                ORT_CRASHES_CODE,
                CRASH_NOTE.format(version=ort_version()),
                list(indices) if indices is not None else None,
            )
        )
    if codes and ({"STRIDED_WINDOW", "INDICES_SMALLER_THAN_DATA"} & set(codes)):
        notes.append(
            Reason(
                "EP_DESCRIPTOR_FAILS",
                f"indices are smaller than data on non-axis dimensions: onnxruntime's DirectML provider "
                f"places this {op_type} on DmlExecutionProvider but builds a descriptor DirectML rejects "
                '("The parameter is incorrect"), so session creation fails there',
                {k: list(v) for k, v in shapes.items() if k in ("data", "indices")},
            )
        )
    return tuple(notes)


def small_constants(graph: onnx.GraphProto) -> set[str]:
    """Initializers and Constant-node outputs with at most SMALL_INITIALIZER_ELEMENTS elements."""
    small = {t.name for t in graph.initializer if math.prod(t.dims) <= SMALL_INITIALIZER_ELEMENTS}
    for node in graph.node:
        if node.op_type != "Constant":
            continue  # constant_node_shape answers None for any other op (one call less per node)
        shape = constant_node_shape(node)
        if shape is not None and math.prod(shape) <= SMALL_INITIALIZER_ELEMENTS:
            small.add(node.output[0])
    return small


def cpu_preferred_nodes(
    graph: onnx.GraphProto,
    on_cpu: Collection[int],
    elem_types: Mapping[str, int] | Callable[[str], int],
    small_constants: Collection[str],
) -> set[int]:
    """The nodes onnxruntime moves from the DirectML provider to the CPU as cheap shape computations.

    This follows onnxruntime's partitioning pass for GPU providers: starting from the consumers of
    tensors already in CPU memory (outputs of nodes the provider does not take, such as ``Shape``), a node
    the provider could run is placed on the CPU instead when every input is a CPU tensor (one the
    provider's kernel does not itself read from CPU memory), a small initializer or a graph input, and
    none is a 16-bit or 8-bit float. Such nodes (typically ``Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape`` chains) never reach DirectML.

    Args:
        graph: the top-level graph (nodes in topological order).
        on_cpu: indices of nodes the DirectML provider does not take (e.g. gather/scatter nodes placed on
            the CPU; control-flow nodes are added here).
        elem_types: element type of each value where known (a mapping, or a function returning 0 when
            unknown).
        small_constants: initializers and folded constants with at most SMALL_INITIALIZER_ELEMENTS
            elements.

    Returns:
        Indices of the nodes moved to the CPU (never those in ``on_cpu``).
    """
    type_of: Callable[[str], int]
    if callable(elem_types):
        type_of = elem_types
    else:
        mapping = elem_types
        type_of = lambda name: mapping.get(name, 0)  # noqa: E731
    nodes = graph.node
    cpu_nodes = set(on_cpu)
    starts: list[int] = []
    for i, node in enumerate(nodes):
        if node.domain in ("", "ai.onnx"):
            if node.op_type in CONTROL_FLOW_OPS:
                cpu_nodes.add(i)
            elif node.op_type in CPU_OUTPUT_OPS:
                starts.append(i)
    if not starts:
        return set()  # nothing starts in CPU memory, so nothing moves (and no consumer index is needed)
    graph_inputs = {v.name for v in graph.input}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            if name:
                consumers.setdefault(name, []).append(i)
    cpu_values: set[str] = set()
    heap: list[int] = []

    def mark_outputs(i: int) -> None:
        for out in nodes[i].output:
            if out:
                cpu_values.add(out)
                for j in consumers.get(out, ()):
                    heapq.heappush(heap, j)

    for i in starts:
        mark_outputs(i)
    moved: set[int] = set()
    visited: set[int] = set()
    while heap:
        i = heapq.heappop(heap)
        if i in visited:
            continue
        visited.add(i)
        if i in cpu_nodes:
            # A node the provider does not take runs on the CPU anyway; what it produces is a CPU tensor.
            mark_outputs(i)
            continue
        ok = True
        cpu_inputs = DML_CPU_INPUTS.get(nodes[i].op_type, frozenset())
        for k, name in enumerate(nodes[i].input):
            if not name:
                continue
            if type_of(name) in _NO_CPU_PREFERENCE_TYPES:
                ok = False
                break
            if name in small_constants or name in graph_inputs:
                continue
            if name not in cpu_values or k in cpu_inputs:
                ok = False
                break
        if ok:
            moved.add(i)
            mark_outputs(i)
    return moved


def graph_placements(
    graph: onnx.GraphProto,
    translations: Mapping[int, NodeTranslation],
    elem_types: Mapping[str, int] | Callable[[str], int],
    small: Collection[str] | None = None,
) -> set[int]:
    """The gather/scatter nodes of a top-level graph that onnxruntime moves to the CPU.

    Args:
        graph: the top-level graph.
        translations: node index -> translation, for every gather/scatter node of ``graph``.
        elem_types: element types of the graph's values (see :func:`cpu_preferred_nodes`).
        small: the small constants (default: :func:`small_constants` of ``graph``).

    Returns:
        The indices (keys of ``translations``) whose ``ort_placement`` is DmlExecutionProvider by the node
        alone but CPUExecutionProvider in the graph.
    """
    on_cpu = {i for i, t in translations.items() if t.ort_placement != DML_PROVIDER}
    if small is None:
        small = small_constants(graph)
    moved = cpu_preferred_nodes(graph, on_cpu, elem_types, small)
    return {i for i in moved if i in translations}
