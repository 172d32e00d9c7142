"""The output types of a node whose big input data propagation cuts (:mod:`dmlshim.model.data_prop`):
what the node's own inference gives from its inputs' full types, asked of onnx once per structure."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import onnx

logger = logging.getLogger(__name__)

__all__ = ["pin_outputs"]


def pin_outputs(
    graph: onnx.GraphProto,
    node: onnx.NodeProto,
    types: Mapping[str, onnx.TypeProto],
    declared: dict[str, onnx.ValueInfoProto],
    versions: dict[str, int],
    renamed: dict[str, str],
    inits: Mapping[str, onnx.TensorProto],
    typed_nodes: dict[tuple[object, ...], list[bytes | None]],
    serialized: dict[str, bytes] | None = None,
) -> None:
    """Declare the node's outputs with the types its own inference gives from its inputs' full types
    (without data; else the types already known for them). ``types`` and ``inits``: what the node's
    graph sees by name (its own values over its enclosing graphs'). ``declared`` holds the graph's outputs and
    value_info by name, and gains what is added; ``typed_nodes``: see :func:`_same_node_types`;
    ``serialized``: ``types``' values already serialized, by name (filled in as more are)."""
    own = _same_node_types(node, types, versions, renamed, inits, typed_nodes, serialized)
    for name in node.output:
        found = own.get(name)
        tp = types.get(name) if found is None else None
        if not name or (found is None and tp is None):
            continue
        target = declared.get(name)
        if target is None:
            target = declared[name] = graph.value_info.add()
            target.name = name
        if found is not None:
            target.type.ParseFromString(found)  # parsing clears first: as CopyFrom of the parsed type
        else:
            target.type.CopyFrom(tp)


def _same_node_types(
    node: onnx.NodeProto,
    types: Mapping[str, onnx.TypeProto],
    versions: dict[str, int],
    renamed: dict[str, str],
    inits: Mapping[str, onnx.TensorProto],
    typed_nodes: dict[tuple[object, ...], list[bytes | None]],
    serialized: dict[str, bytes] | None = None,
) -> dict[str, bytes]:
    """:func:`_node_types`, serialized, asked of onnx once per structure: ``typed_nodes`` keeps, by
    everything the node's inference reads (op, domain, opset, attributes as bytes, each input's type and
    data, which inputs and outputs share a name), the output types by position. 19,000 cut Casts of one
    chain are typed once."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    seen: dict[str, int] = {}
    inputs: list[tuple[object, ...]] = []
    if serialized is None:
        serialized = {}
    for name in node.input:
        original = renamed.get(name, name)
        content = serialized.get(original)
        if content is None:
            tp = types.get(original)
            if tp is not None:
                content = serialized[original] = tp.SerializeToString()
        data = inits[name] if name in inits and name not in renamed else None
        inputs.append((
            seen.setdefault(name, len(seen)),
            content,
            data.SerializeToString() if data is not None else None,
        ))  # fmt: skip
    outputs = tuple([seen.setdefault(name, len(seen)) for name in node.output])
    key = (
        node.op_type,
        domain,
        versions.get(domain, 0),
        tuple([a.SerializeToString() for a in node.attribute]),
        tuple(inputs),
        outputs,
    )
    known = typed_nodes.get(key)
    if known is not None:
        return {name: found for name, found in zip(node.output, known, strict=True) if found is not None}
    own = _node_types(node, types, versions, renamed, inits)
    found_types = [own[n].SerializeToString() if n in own else None for n in node.output]
    if own:  # an empty answer (onnx could not tell) is asked again: it may be an error worth logging
        typed_nodes[key] = found_types
    return {name: found for name, found in zip(node.output, found_types, strict=True) if found is not None}


def _node_types(
    node: onnx.NodeProto,
    types: Mapping[str, onnx.TypeProto],
    versions: dict[str, int],
    renamed: dict[str, str],
    inits: Mapping[str, onnx.TensorProto],
) -> dict[str, onnx.TypeProto]:
    """The types the node's own inference gives its outputs from its inputs' types (a cut input read under
    its fresh name, ``renamed`` mapping it back); empty when onnx cannot tell."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    inputs = {name: types[renamed.get(name, name)] for name in node.input if renamed.get(name, name) in types}
    try:
        schema = onnx.defs.get_schema(node.op_type, versions.get(domain, 0), domain)
        data = {name: inits[name] for name in node.input if name in inits and name not in renamed}
        found = onnx.shape_inference.infer_node_outputs(schema, node, inputs, data)
    except Exception as exc:
        logger.debug("no types for %s from its inputs: %s", node.op_type, exc)
        return {}
    return {
        name: tp
        for name, tp in found.items()
        if tp.HasField("tensor_type") and tp.tensor_type.HasField("shape")
    }
