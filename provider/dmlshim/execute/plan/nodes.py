"""Which gather/scatter nodes the partitioned engine emulates, and the slots of its per-run record.

Every top-level gather/scatter node is translated once from the statically inferred shapes: those that
run as DirectML operators (or whose shapes are known only at run time, or that fall back but overwrite
duplicate indices that a run must count) become candidates for emulation; the others get their record
now (placement CPU, with the reasons). Nodes inside control flow are recorded as not emulated, and nodes
onnxruntime's DirectML provider would place on the CPU stay there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from ...graph import is_gather_scatter
from ...translate import NodeTranslation, Status, TensorInfo, translate_node
from ...translate.placement import CPU_PREFERRED_MESSAGE, graph_placements
from ...translate.plan import CPU_PROVIDER
from ...translate.translator import node_since_version
from ..engine import EngineConfig
from ..proofs.scatter_given import overwrites
from ..record import PLACEMENT_CPU, NodeRecord
from .partition import nested_gather_scatter
from .steps import REASON_CPU_PREFERRED, REASON_NOT_EMULATED, reasons_of

_SHAPE_UNKNOWN = "SHAPE_UNKNOWN"

Candidate = tuple[int, NodeTranslation, list[TensorInfo | None]]
"""(since version, static translation, input infos) of a node to emulate."""


@dataclass(frozen=True)
class NodePlan:
    """The plan of the engine's gather/scatter nodes.

    Attributes:
        template: the per-run record's slots (None: filled by the node's step when it runs).
        slot_of: node index -> its slot in ``template``.
        candidates: node index -> what its emulated step needs.
    """

    template: list[NodeRecord | None]
    slot_of: dict[int, int]
    candidates: dict[int, Candidate]


def plan_nodes(
    model: onnx.ModelProto,
    nodes: Sequence[onnx.NodeProto],
    names: Sequence[str],
    opsets: Mapping[str, int],
    infos: Mapping[str, TensorInfo],
    types: dict[str, onnx.TypeProto],
    config: EngineConfig,
    ort_cpu_preference: bool,
    inferred: onnx.ModelProto | None = None,
) -> NodePlan:
    """Translate and place every gather/scatter node of ``nodes`` (see the module docstring). ``types``
    gains the data type of every candidate's output that shape inference left untyped. ``inferred``: the
    model's shape inference, when it succeeded (placing nodes inside control flow then does not run it
    again)."""
    graph = model.graph
    # Slots of the per-run record: top-level gather/scatter nodes, each followed by the nested ones.
    template: list[NodeRecord | None] = []
    slot_of: dict[int, int] = {}
    candidates: dict[int, Candidate] = {}
    translated: dict[int, NodeTranslation] = {}
    for i, node in enumerate(nodes):
        if is_gather_scatter(node):
            since = node_since_version(node, opsets)
            node_infos = [infos.get(n) if n else None for n in node.input]
            t = translate_node(node, since, node_infos, config.feature_level, name=names[i])
            slot_of[i] = len(template)
            template.append(None)
            translated[i] = t
            shape_unknown = t.status is Status.ERROR and _SHAPE_UNKNOWN in t.reason_codes
            # A scatter without reduction that falls back still runs as its own step, so that the
            # writes its duplicate indices overwrite are counted in the run record.
            counted = t.status is Status.FALLBACK and overwrites(node)
            if t.status is Status.DML or shape_unknown or counted:
                candidates[i] = (since, t, node_infos)
            else:
                template[slot_of[i]] = NodeRecord(
                    name=names[i],
                    op_type=node.op_type,
                    placement=PLACEMENT_CPU,
                    status=t.status.value,
                    reasons=reasons_of(t),
                    ort_placement=t.ort_placement,
                )
        for nested in nested_gather_scatter([node], [names[i]]):
            template.append(
                NodeRecord(
                    name=nested.path,
                    op_type=nested.node.op_type,
                    placement=PLACEMENT_CPU,
                    status=REASON_NOT_EMULATED,
                    reasons=(
                        (
                            REASON_NOT_EMULATED,
                            f"inside the {nested.owner_op} node {nested.owner!r}: the partitioned "
                            "engine runs control flow in onnxruntime as a whole, so this node ran on "
                            "onnxruntime's CPU provider (the custom-op engine can emulate nodes inside "
                            "subgraphs)",
                        ),
                    ),
                )
            )

    if any(r is not None and r.status == REASON_NOT_EMULATED for r in template):
        # Inside control flow onnxruntime still places each node: say where, as inspect does.
        # imported here: only models with gather/scatter nodes inside control flow need it
        from ...translate.model_placements import nested_placements

        ep = nested_placements(model, config.feature_level, inferred)
        template = [
            dataclasses.replace(r, ort_placement=ep.get(r.name))
            if r is not None and r.status == REASON_NOT_EMULATED
            else r
            for r in template
        ]
    if ort_cpu_preference and translated:
        elem_types = {n: info.elem_type for n, info in infos.items()}
        moved = graph_placements(graph, translated, elem_types)
        for i in sorted(moved - set(candidates)):
            record = template[slot_of[i]]
            if record is not None:
                template[slot_of[i]] = dataclasses.replace(record, ort_placement=CPU_PROVIDER)
        for i in sorted(moved & set(candidates)):
            _, t, _ = candidates.pop(i)
            template[slot_of[i]] = NodeRecord(
                name=names[i],
                op_type=nodes[i].op_type,
                placement=PLACEMENT_CPU,
                status=t.status.value,
                reasons=(*reasons_of(t), (REASON_CPU_PREFERRED, CPU_PREFERRED_MESSAGE)),
                ort_placement=CPU_PROVIDER,
            )

    for i in candidates:
        # A gather/scatter output has the data input's type; give it at least that (rank unknown) when
        # shape inference could not, so a CPU segment can declare it as an input.
        out, data = nodes[i].output[0], nodes[i].input[0]
        data_info = infos.get(data)
        if out not in types and data_info is not None and data_info.elem_type:
            tp = onnx.TypeProto()
            tp.tensor_type.elem_type = data_info.elem_type
            types[out] = tp
    return NodePlan(template, slot_of, candidates)
