"""What happened to each node in one run: the per-run record every engine returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEMENT_DML = "dml"
"""The node executed from its DirectML descriptor through dmlshim's kernels (or real DirectML)."""
PLACEMENT_CPU = "onnxruntime-cpu"
"""The node ran in onnxruntime's CPU provider (an ordinary op, a fallback, or inside control flow)."""

PATH_CHECK = "whole-model check"
PATH_PARTITIONED = "partitioned"
PATH_CUSTOM_OP = "custom-op session"
PATH_CPU = "onnxruntime cpu"
PATH_DIRECTML = "real directml"

RUN_PATHS: dict[str, str] = {
    PATH_CHECK: "partitioned engine: one onnxruntime run of the whole model; every emulated node's kernel "
    "output (or a proof that onnxruntime's output stands for it) is compared with onnxruntime's bit for bit",
    PATH_PARTITIONED: "partitioned engine: CPU segments in onnxruntime sessions and emulated nodes through "
    "the kernels, in graph order; answers when a kernel disagrees with onnxruntime, or when it is faster",
    PATH_CUSTOM_OP: "custom-op engine: one onnxruntime session of the lowered model, each translated node "
    "a Python custom op running the kernel",
    PATH_CPU: "the whole model in one onnxruntime CPU session, nothing emulated: the cpu engine, and the "
    "partitioned engine when no node of the model is emulated",
    PATH_DIRECTML: "directml engine: the whole model on onnxruntime's DmlExecutionProvider (real DirectML, "
    "in this process on Windows, through the Wine host on Linux)",
}
"""Every way a run can be answered: ``RunRecord.path`` -> what it means (docs/engines.md)."""


@dataclass(frozen=True)
class NodeRecord:
    """One gather/scatter node in one run.

    Attributes:
        name: node name (with its subgraph path, e.g. ``loop/body/scatter``).
        op_type: ONNX op type.
        placement: ``"dml"`` or ``"onnxruntime-cpu"``.
        status: the translation status (``"dml"``, ``"fallback"``, ``"error"``) or ``"not_emulated"``
            for nodes inside control-flow subgraphs the engine leaves to onnxruntime.
        operator: the DML operator type name (``"DML_OPERATOR_GATHER_ND1"``) when placement is dml.
        reasons: ``(code, message)`` pairs saying why a node did not run as a DML descriptor.
        duplicate_indices: scatter writes overwritten by a later write (no guaranteed winner on DirectML).
        negative_indices: whether negative indices were seen (they need FL 3_0 on DirectML).
        ort_placement: where onnxruntime's DirectML provider would place the node
            (``"DmlExecutionProvider"`` / ``"CPUExecutionProvider"``), when known.
        notes: ``(code, message)`` pairs for what the run observed without changing its result, e.g.
            ``output_shape_differs_from_inference``: the output's real shape is not what static shape
            inference (often a stale ``value_info`` of the exporter) said; the run used the real shape.
    """

    name: str
    op_type: str
    placement: str
    status: str
    operator: str | None = None
    reasons: tuple[tuple[str, str], ...] = ()
    duplicate_indices: int = 0
    negative_indices: bool = False
    ort_placement: str | None = None
    notes: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "placement": self.placement,
            "status": self.status,
            "operator": self.operator,
            "reasons": [{"code": c, "message": m} for c, m in self.reasons],
            "duplicate_indices": self.duplicate_indices,
            "negative_indices": self.negative_indices,
            "ort_placement": self.ort_placement,
            "notes": [{"code": c, "message": m} for c, m in self.notes],
        }


@dataclass(frozen=True)
class RunRecord:
    """The record of one ``run``: which engine, and what happened to every gather/scatter node.

    Attributes:
        engine: the engine name.
        feature_level: the DirectML feature level, e.g. ``DML_FEATURE_LEVEL_5_0``.
        nodes: one record per gather/scatter node, in graph order (subgraph nodes after their owner).
        cpu_partitions: how many onnxruntime CPU sessions the engine built for the graph at creation.
        translations_computed: node translations computed during this run (0 when every node's
            translation for these shapes and types was cached).
        path: how the run was answered, one of :data:`RUN_PATHS`: the partitioned engine's
            ``"whole-model check"`` or ``"partitioned"``, or the other engines' one path each.
        notes: ``(code, message)`` pairs about the whole run, e.g. the custom-op engine's
            ``layout_optimizations_around_custom_ops`` (``dmlshim.execute.custom_ops.notes``).
        device: for real DirectML (the directml engine through the Linux stack), what ran: ``(key, value)``
            pairs naming DirectML's version, onnxruntime's, the D3D12 and Vulkan layers; empty otherwise.
    """

    engine: str
    feature_level: str
    nodes: tuple[NodeRecord, ...] = field(default=())
    cpu_partitions: int = 0
    translations_computed: int = 0
    path: str = ""
    notes: tuple[tuple[str, str], ...] = ()
    device: tuple[tuple[str, str], ...] = ()

    @property
    def emulated(self) -> tuple[NodeRecord, ...]:
        """Nodes executed from their DirectML descriptors."""
        return tuple(n for n in self.nodes if n.placement == PLACEMENT_DML)

    @property
    def not_emulated(self) -> tuple[NodeRecord, ...]:
        """Nodes that ran on onnxruntime's CPU provider, each with its reasons."""
        return tuple(n for n in self.nodes if n.placement != PLACEMENT_DML)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "feature_level": self.feature_level,
            "cpu_partitions": self.cpu_partitions,
            "translations_computed": self.translations_computed,
            "path": self.path,
            **({"notes": [{"code": c, "message": m} for c, m in self.notes]} if self.notes else {}),
            **({"device": dict(self.device)} if self.device else {}),
            "nodes": [n.to_json() for n in self.nodes],
        }
