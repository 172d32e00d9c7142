"""Nodes that draw random values (ONNX spec: the random operators, and Dropout in training mode).

Two runs of such a model differ through them, and onnxruntime's seeded generators go on from run to run
within one session: the value a run draws depends on which session drew it and how often it drew before.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import numpy_helper

from ..graph import constant_node_value, walk_nodes

RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
"""Operators whose outputs are random by definition (ONNX spec)."""

_TRAINING_MODE_INPUT = {
    ("", "Dropout"): 2,
    ("com.microsoft", "BitmaskDropout"): 2,
    ("com.microsoft", "BiasDropout"): 4,
    ("com.microsoft", "BitmaskBiasDropout"): 4,
}
"""Dropouts that drop random elements only when their ``training_mode`` input (at this position) is True."""


def constant_false(name: str, graph: onnx.GraphProto) -> bool:
    """Whether ``name`` is an initializer or Constant output holding False (or 0)."""
    for t in graph.initializer:
        if t.name == name:
            return not bool(numpy_helper.to_array(t).any())
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            value = constant_node_value(node)
            return value is not None and value.dtype != object and not bool(value.any())
    return False


def random_nodes(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.NodeProto]]:
    """Every node of ``graph`` (subgraphs too) that draws random values, with its path name: the random
    operators, and the Dropouts whose ``training_mode`` input is not a constant False."""
    for name, node in walk_nodes(graph):
        if node.op_type in RANDOM_OPS and node.domain in ("", "ai.onnx"):
            yield name, node
            continue
        at = _TRAINING_MODE_INPUT.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
        if (
            at is not None
            and len(node.input) > at
            and node.input[at]
            and not constant_false(node.input[at], graph)
        ):
            yield name, node


def draws_random(model: onnx.ModelProto) -> bool:
    """Whether a node of ``model`` (its graph, subgraphs and local functions) draws random values."""
    if next(random_nodes(model.graph), None) is not None:
        return True
    return any(
        next(random_nodes(onnx.helper.make_graph(list(f.node), f.name, [], [])), None) is not None
        for f in model.functions
    )
