"""Whether onnxruntime's CPU provider has a kernel of its own for a node, at the node's types.

onnxruntime's constant folding computes a node of constant inputs with the CPU provider's kernel; a node
the provider has no kernel for at its types (``Relu`` of int64: the provider registers float, double,
int8 and int32) is not folded but run through its ONNX function body once the graph is partitioned, so it
reads the values ``SessionOptions.add_initializer`` puts in, not the model's; so is an op with no CPU
kernel at all (``CastLike``, a function). The kernels are onnxruntime's own registry
(``get_all_opkernel_def``), read once per process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

import onnx

logger = logging.getLogger(__name__)

_CPU = "CPUExecutionProvider"
_ONNX_DOMAINS = ("", "ai.onnx")


@functools.cache
def _registry() -> dict[tuple[str, str], list[tuple[tuple[int, int], dict[str, frozenset[str]]]]]:
    """The CPU provider's kernels by (domain, op): their opset ranges and type constraints."""
    try:
        from ...runtime.real import C  # onnxruntime's own binding, whatever stands in for the module

        defs = C.get_all_opkernel_def()
    except (ImportError, AttributeError, RuntimeError) as exc:  # no registry: every node counts as folded
        logger.debug("onnxruntime's kernel registry cannot be read (%s)", exc)
        return {}
    table: dict[tuple[str, str], list[tuple[tuple[int, int], dict[str, frozenset[str]]]]] = {}
    for d in defs:
        if d.provider != _CPU:
            continue
        domain = "" if d.domain in _ONNX_DOMAINS else d.domain
        constraints = {k: frozenset(v) for k, v in d.type_constraints.items()}
        table.setdefault((domain, d.op_name), []).append((tuple(d.version_range), constraints))
    return table


def _type_name(elem_type: int) -> str | None:
    try:
        return f"tensor({onnx.helper.tensor_dtype_to_string(elem_type).removeprefix('TensorProto.').lower()})"
    except (ValueError, KeyError):
        return None


def has_cpu_kernel(node: onnx.NodeProto, opsets: Mapping[str, int], elem_types: Mapping[str, int]) -> bool:
    """False only when onnxruntime's CPU provider certainly has no kernel for ``node`` at the types of its
    inputs known in ``elem_types`` (an ONNX-domain node whose schema resolves at ``opsets``); True when it
    has one, and whenever that cannot be told (an unknown type, schema or registry)."""
    domain = "" if node.domain in _ONNX_DOMAINS else node.domain
    if domain:
        return True
    table = _registry()
    if not table:
        return True
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get("", opsets.get("ai.onnx", 1)), "")
    except onnx.defs.SchemaError:
        return True
    kernels = table.get((domain, node.op_type))
    if not kernels:
        return False  # an ONNX op with no CPU kernel at all (CastLike): run through its function body
    actual: dict[str, str] = {}
    for formal, name in zip(schema.inputs, node.input, strict=False):
        params = {c.type_param_str for c in schema.type_constraints}
        if name and name in elem_types and formal.type_str in params:
            type_name = _type_name(elem_types[name])
            if type_name is None:
                return True
            actual.setdefault(formal.type_str, type_name)
    version = schema.since_version
    for (low, high), constraints in kernels:
        if not low <= version <= high:
            continue
        if all(constraints.get(param) is None or t in constraints[param] for param, t in actual.items()):
            return True
    return False
