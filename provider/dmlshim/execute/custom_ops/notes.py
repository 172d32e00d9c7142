"""What the custom-op engine's record says about onnxruntime's layout optimisations.

At onnxruntime's level ``all`` (its default) the session adds layout optimisations: NCHWc transforms
around Conv, pooling and Resize nodes, with fusions across them. Custom-op nodes are opaque to them, so
around a custom-op node they can transform and fuse differently than around the original gather/scatter,
and a float output can differ from onnxruntime's by rounding that a deep network amplifies (reported on
ResNet-50-FPN detectors: RetinaNet boxes by 1.2e-4, Mask R-CNN boxes by 1.5e-3 and masks by 1.3e-4; on
held-out exports with random weights RetinaNet boxes by 7.6e-5, Keypoint R-CNN boxes by 1e-2 and
keypoints by 8.4e-3). At ``disabled``, ``basic`` and ``extended`` there are no layout optimisations and
the outputs are onnxruntime's.
"""

from __future__ import annotations

import onnx

NOTE_LAYOUT = "layout_optimizations_around_custom_ops"

LAYOUT_OP_TYPES = frozenset(
    {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "Resize",
     "Upsample"}
)  # fmt: skip
"""The op types onnxruntime's NCHWc layout transformer rewrites."""


def layout_nodes(graph: onnx.GraphProto) -> list[str]:
    """The top-level nodes onnxruntime's layout optimisations transform (Conv, pooling, Resize)."""
    onnx_domain = ("", "ai.onnx")
    return [
        n.name or n.op_type for n in graph.node if n.op_type in LAYOUT_OP_TYPES and n.domain in onnx_domain
    ]


def layout_note(graph: onnx.GraphProto, level_all: bool, lowered: int) -> tuple[str, str] | None:
    """The record's note when a session at level ``all`` runs custom ops beside layout-optimised nodes."""
    nodes = layout_nodes(graph)
    if not level_all or not lowered or not nodes:
        return None
    return (
        NOTE_LAYOUT,
        f"the session runs at onnxruntime's level all, whose layout optimizations (NCHWc transforms around "
        f"{len(nodes)} Conv/pooling/Resize node(s)) work differently around custom-op nodes: float outputs "
        "can differ from onnxruntime's by rounding, which a deep network amplifies; at extended or below "
        "they are onnxruntime's (validate compares there when they differ)",
    )
