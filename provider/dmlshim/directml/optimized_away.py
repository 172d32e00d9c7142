"""Gather/scatter nodes onnxruntime's graph optimizations remove before it places nodes on providers.

With graph optimizations on (``ORT_ENABLE_BASIC`` and above, onnxruntime's default ``all`` included),
onnxruntime's level-1 transformers run before partitioning, the same for every provider: constant folding
computes a node whose inputs are all known (a ``Gather`` on the ``Shape`` of static dimensions, a
``ScatterElements`` writing into a shape) with its CPU kernels at session creation, and the reshape fusion
turns a ``Shape -> Gather -> Concat -> Reshape`` chain into one ``Reshape`` of a constant shape. Such a node
is in no partition, so onnxruntime's "Node placements" log does not list it, and the Linux directml
engine, which reads every unlisted node as fused into a ``DmlFusedNode`` (the log names only the nodes on
the CPU), called it a DirectML node. :func:`optimized_away_nodes` asks onnxruntime CPU which nodes its
level-1 optimizations remove (the graph it saves at ``ORT_ENABLE_BASIC``), so the run record places them
with the CPU, where ``inspect`` puts these shape computations, and never on DirectML.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ..graph import display_names, is_gather_scatter

logger = logging.getLogger(__name__)

__all__ = ["optimized_away_nodes"]

_EXTERNAL_KEY = "session.optimized_model_external_initializers_file_name"
_EXTERNAL_MIN_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"


def _twin_key(node: onnx.NodeProto) -> tuple[object, ...]:
    """What onnxruntime's common-subexpression elimination compares: op, inputs and attributes."""
    return (
        node.domain,
        node.op_type,
        tuple(node.input),
        tuple(a.SerializeToString() for a in node.attribute),
    )


def optimized_away_nodes(
    model: onnx.ModelProto, optimization: str, source: Path | None = None
) -> frozenset[str]:
    """Names (as every command reports them) of the top-level gather/scatter nodes of ``model`` that
    onnxruntime's level-1 graph optimizations remove, for a session at ``optimization`` (onnxruntime-node's
    level name: ``disabled`` removes nothing). A node with twins (the same op, inputs and attributes) counts
    only when every twin is gone: common-subexpression elimination keeps one of them, which runs where the
    log says. Empty when onnxruntime CPU cannot build the model (the placement log is then all there is).
    ``source``: the model's file, when there is one (onnxruntime reads it rather than a serialized copy)."""
    if optimization == "disabled":
        return frozenset()
    nodes = model.graph.node
    names = display_names(nodes)
    twins: dict[tuple[object, ...], list[int]] = {}
    for index, node in enumerate(nodes):
        if is_gather_scatter(node):
            twins.setdefault(_twin_key(node), []).append(index)
    if not twins:
        return frozenset()
    from ..model.ort_errors import ORT_ERRORS
    from ..runtime.real import OrtInferenceSession, ort

    with tempfile.TemporaryDirectory(prefix="dmlshim-optimized-") as tmp:
        target = Path(tmp) / "basic.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(target)
        options.add_session_config_entry(_EXTERNAL_KEY, "weights.bin")  # only the graph is read back
        options.add_session_config_entry(_EXTERNAL_MIN_KEY, "1024")
        options.log_severity_level = 3
        try:
            loaded = str(source) if source is not None else model.SerializeToString()
            OrtInferenceSession(loaded, options, providers=["CPUExecutionProvider"])
            saved = onnx.load(str(target), load_external_data=False)
        except (*ORT_ERRORS, OSError, ValueError, DecodeError) as exc:
            logger.debug("no graph-optimization probe for the directml engine's records: %s", exc)
            return frozenset()
    shapes = {name for node in nodes if node.op_type == "Shape" for name in node.output}
    originals = {i: nodes[i] for group in twins.values() for i in group}
    survived = _survivors(originals, saved.graph.node, shapes)
    gone = {i for group in twins.values() if survived.isdisjoint(group) for i in group}
    gone -= _rewritten_here(model)
    # a name two nodes share (the records know nodes by name) counts only when every node so named is gone
    kept = {name for i, name in enumerate(names) if i not in gone}
    return frozenset(names[i] for i in gone) - kept


def _rewritten_here(model: onnx.ModelProto) -> set[int]:
    """Positions of the ScatterND nodes dmlshim's own onnxruntime sessions replace by ONNX operators (empty
    index tuples, which crash onnxruntime before 1.32: :mod:`dmlshim.model.zero_depth_scatternd`): gone
    from the probe's graph because dmlshim rewrote them, not because onnxruntime optimized them away."""
    from ..model.zero_depth_scatternd import empty_tuple_nodes, ort_crashes

    return set(empty_tuple_nodes(model)) if ort_crashes() else set()


def _loose_key(node: onnx.NodeProto) -> tuple[object, ...]:
    """Op, attributes and the data input: what stays when optimization renames a node's other inputs (a
    folded index becomes an initializer) and its output (a removed ``Identity`` hands its name on)."""
    return (
        node.op_type,
        node.input[0] if node.input else "",
        tuple(a.SerializeToString() for a in node.attribute),
    )


def _survivors(
    originals: dict[int, onnx.NodeProto],
    saved: Sequence[onnx.NodeProto],
    shapes: set[str] | frozenset[str] = frozenset(),
) -> set[int]:
    """The positions of the ``originals`` found in onnxruntime's optimized graph: by their own name (a
    nameless node's reported name ``Gather_3`` is its position, which optimization changes), outputs
    (unique in a graph) or op, inputs and attributes. A node of the optimized graph none of these explains
    stands for every original of its op, attributes and data input, or, when none has them, for every
    original of its op (which one it is cannot be told: none of them is recorded as optimized away),
    unless it writes the output of an original ``Shape`` (``shapes``): the transpose optimizer turns
    ``Shape(Transpose(x))`` into a ``Gather`` of ``Shape(x)``, a new node that stands for no original."""
    kept = [node for node in saved if is_gather_scatter(node)]
    evidence = [{(n.op_type, n.name) for n in kept if n.name}, {(n.op_type, tuple(n.output)) for n in kept}]
    keys = {_twin_key(n) for n in kept}
    found = {
        i
        for i, n in originals.items()
        if (n.op_type, n.name) in evidence[0]
        or (n.op_type, tuple(n.output)) in evidence[1]
        or _twin_key(n) in keys
    }
    mine = {(n.op_type, n.name) for n in originals.values() if n.name}
    mine |= {(n.op_type, tuple(n.output)) for n in originals.values()}
    twin_keys = {_twin_key(n) for n in originals.values()}
    loose = {_loose_key(n) for n in originals.values()}
    for node in kept:
        if (node.op_type, node.name) in mine or (node.op_type, tuple(node.output)) in mine:
            continue
        if _twin_key(node) in twin_keys:
            continue
        if _loose_key(node) in loose:
            found |= {i for i, n in originals.items() if _loose_key(n) == _loose_key(node)}
        elif not shapes.isdisjoint(node.output):
            continue  # a rewritten Shape, not a gather/scatter of the model
        else:
            found |= {i for i, n in originals.items() if n.op_type == node.op_type}
    return found
