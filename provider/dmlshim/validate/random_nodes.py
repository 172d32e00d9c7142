"""Nodes that draw random values: two runs of the same model on the same feeds differ through them, so a
mismatch downstream says nothing about the gather/scatter nodes. validate warns about them."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from ..graph import constant_node_value, walk_nodes
from .results import ValidationWarning

W_RANDOM = "RANDOM_NODE"

RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
"""Operators whose outputs are random by definition (ONNX spec)."""


def _constant_false(name: str, graph: onnx.GraphProto) -> bool:
    """Whether ``name`` is an initializer or Constant output holding False (or 0)."""
    for t in graph.initializer:
        if t.name == name:
            return not bool(numpy_helper.to_array(t).any())
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            value = constant_node_value(node)
            return value is not None and value.dtype != object and not bool(value.any())
    return False


def random_node_warnings(graph: onnx.GraphProto) -> tuple[ValidationWarning, ...]:
    """One warning per node that draws random values: the random operators, and Dropout whose
    ``training_mode`` input is not a constant False (ONNX: Dropout only drops in training mode)."""
    found: list[ValidationWarning] = []
    for name, node in walk_nodes(graph):
        if node.op_type in RANDOM_OPS:
            what = f"{node.op_type} draws random values"
        elif node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            if _constant_false(node.input[2], graph):
                continue
            what = "Dropout with a training_mode input drops random elements when it is True"
        else:
            continue
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
