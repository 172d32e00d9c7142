"""Nodes that draw random values: two runs of the same model on the same feeds differ through them, so a
mismatch downstream says nothing about the gather/scatter nodes. validate warns about them."""

from __future__ import annotations

import onnx

from ..model.random_ops import RANDOM_OPS, random_nodes
from .results import ValidationWarning

W_RANDOM = "RANDOM_NODE"

__all__ = ["RANDOM_OPS", "W_RANDOM", "random_node_warnings"]


def random_node_warnings(graph: onnx.GraphProto) -> tuple[ValidationWarning, ...]:
    """One warning per node that draws random values: the random operators, and Dropout whose
    ``training_mode`` input is not a constant False (ONNX: Dropout only drops in training mode)."""
    found: list[ValidationWarning] = []
    for name, node in random_nodes(graph):
        if node.op_type in RANDOM_OPS:
            what = f"{node.op_type} draws random values"
        else:
            what = f"{node.op_type} with a training_mode input drops random elements when it is True"
        found.append(
            ValidationWarning(
                W_RANDOM,
                name,
                f"{what}: the runs compared draw different values, so outputs downstream can differ "
                "whatever the gather/scatter nodes do. Export the model in eval mode (PyTorch: "
                "model.eval()), where Dropout has training_mode False and copies its input",
            )
        )
    return tuple(found)
