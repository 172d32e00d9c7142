"""Translate ONNX gather/scatter nodes, or every such node of a model (subgraphs included).

``translate_node`` is pure and cached (the execution engine calls it at run time with concrete shapes);
``translate_model`` runs ONNX shape inference once and translates every Gather, GatherElements, GatherND,
Scatter, ScatterElements and ScatterND node, including those inside If/Loop/Scan bodies, naming each with
its path (``loop_node/body/scatter_1``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import helper

from ..dml import support
from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel, OperatorType
from ..dml.symbolic import SIZE_DEPENDENT_RULES, UNNAMED
from ..dml.validate import validate
from .converters import ConvertContext, Converter, Lowering, NodeFailure, get_converter
from .deferred import Deferred
from .placement import (
    node_placement,
    provider_notes,
)
from .plan import (
    DML_PROVIDER,
    NodeTranslation,
    Reason,
    Status,
    TensorInfo,
    assemble,
)
from .support_table import SUPPORTED_OPS, find_row

logger = logging.getLogger(__name__)

__all__ = [
    "NOTE_MEANINGS",
    "SIZES_SYMBOLIC_MEANING",
    "model_opsets",
    "node_since_version",
    "symbolic_note",
    "translate_node",
]

# Where behaviour can change: the levels that start a row of DirectML's support table, and the target.
_CANDIDATE_LEVELS: tuple[FeatureLevel, ...] = tuple(
    sorted({row.since for row in support.SUPPORT_TABLE} | {FeatureLevel.FL_1_0, FeatureLevel.FL_3_0})
)


def is_ep_reason(reason: Reason) -> bool:
    """Reasons about onnxruntime's DirectML provider (placement), as opposed to DirectML itself."""
    return reason.code.startswith("EP_")


def _hashable(value: Any) -> object:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


_A = onnx.AttributeProto


def _attribute_value(a: onnx.AttributeProto) -> object:
    """``_hashable(helper.get_attribute_value(a))``, read directly for the scalar and list types."""
    # helper.get_attribute_value costs more than the rest of a cached translate_node together.
    kind = a.type
    if kind == _A.INT:
        return a.i
    if kind == _A.STRING:
        return a.s.decode(errors="replace")
    if kind == _A.FLOAT:
        return a.f
    if kind == _A.INTS:
        return tuple(a.ints)
    return _hashable(helper.get_attribute_value(a))


def _attributes(node: onnx.NodeProto) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((a.name, _attribute_value(a)) for a in node.attribute))


@functools.lru_cache(maxsize=256)
def _schema_since(op_type: str, since_version: int, domain: str) -> int:
    """The since_version of the schema ``op_type`` has at opset ``since_version`` (0 if none)."""
    try:
        return int(onnx.defs.get_schema(op_type, since_version, domain).since_version)
    except onnx.defs.SchemaError:
        return 0


def _error(
    node: onnx.NodeProto, name: str, since_version: int, fl: FeatureLevel, reason: Reason
) -> NodeTranslation:
    return NodeTranslation(
        name=name,
        op_type=node.op_type,
        domain=node.domain,
        since_version=since_version,
        feature_level=fl,
        status=Status.ERROR,
        operator=None,
        min_feature_level=None,
        ort_placement=None,
        reasons=(reason,),
    )


def translate_node(
    node: onnx.NodeProto,
    since_version: int,
    inputs: Sequence[TensorInfo | None],
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    *,
    name: str | None = None,
    symbolic: bool = False,
) -> NodeTranslation:
    """Translate one ONNX node with known input types and shapes to a DirectML operator and its plan.

    Args:
        node: a Gather, GatherElements, GatherND, Scatter, ScatterElements or ScatterND node.
        since_version: the since_version of the node's schema, or the model's opset for the node's domain
            (resolved to the schema's since_version).
        inputs: static type and shape of each node input, in order (None = unknown).
        feature_level: the target DirectML feature level (default DML_FEATURE_LEVEL_5_0).
        name: the name to report (default: the node's name, else ``op_type``).
        symbolic: translate inputs of known rank and type but symbolic sizes with placeholder sizes
            (a description for people, with a ``SIZES_SYMBOLIC`` note; not something to run). Without
            it such nodes are ``SHAPE_UNKNOWN``.

    Returns:
        The translation. Status ``error`` with reason ``OP_UNSUPPORTED`` or ``OPSET_UNSUPPORTED`` for ops
        or opsets dmlshim does not translate; ``SHAPE_UNKNOWN`` when a shape is not static.
    """
    fl = feature_level if type(feature_level) is FeatureLevel else FeatureLevel(feature_level)
    op_type = node.op_type
    label = name if name is not None else (node.name or op_type)
    domain = node.domain or ""
    converter = get_converter(domain, op_type)
    if converter is None:
        return _error(
            node,
            label,
            since_version,
            fl,
            Reason(
                "OP_UNSUPPORTED",
                f"dmlshim translates only {', '.join(SUPPORTED_OPS)} (ai.onnx), not {domain or 'ai.onnx'}."
                f"{node.op_type}",
                node.op_type,
            ),
        )
    since = _schema_since(op_type, int(since_version), domain)
    row = find_row(op_type, since)
    if row is None:
        return _error(
            node,
            label,
            since_version,
            fl,
            Reason(
                "OPSET_UNSUPPORTED",
                f"{node.op_type} has no schema at opset {since_version} that dmlshim translates",
                since_version,
            ),
        )
    output = node.output[0] if node.output else ""
    # The label is part of the key: a node's output name already makes its key unique in a model, so
    # sharing one cached translation between labels would save nothing and cost a renamed copy per call.
    return _translate(
        label,
        op_type,
        domain,
        since,
        _attributes(node),
        tuple(node.input),
        output,
        tuple(inputs),
        fl,
        symbolic,
    )


def _converter(op_type: str) -> Converter:
    converter = get_converter("", op_type)
    assert converter is not None  # translate_node checked it
    return converter


@functools.lru_cache(maxsize=32)
def _levels(fl: FeatureLevel) -> tuple[FeatureLevel, ...]:
    """The levels to try, lowest first, for the lowest level at which a node translates."""
    return tuple(sorted({*_CANDIDATE_LEVELS, fl}))


def _attempt(ctx: ConvertContext) -> tuple[Status, Lowering | None, tuple[Reason, ...]]:
    converter = _converter(ctx.op_type)
    try:
        lowering = converter.convert(ctx)
    except NodeFailure as failure:
        return (Status.FALLBACK if failure.fallback else Status.ERROR), None, failure.reasons
    violations = validate(lowering.operator, ctx.feature_level)
    if violations and ctx.symbolic:
        violations = tuple(v for v in violations if v.rule not in SIZE_DEPENDENT_RULES)
    if violations:
        return (
            Status.FALLBACK,
            None,
            tuple(Reason("DESCRIPTOR_INVALID", str(v), v.as_dict()) for v in violations),
        )
    return Status.DML, lowering, lowering.notes


def _dim_names(inputs: tuple[TensorInfo | None, ...]) -> list[str]:
    return [
        d if isinstance(d, str) and d else "?"
        for info in inputs
        if info is not None and info.shape is not None
        for d in info.shape
        if not (isinstance(d, int) and d >= 0)
    ]


def _role_shapes(inputs: tuple[TensorInfo | None, ...]) -> dict[str, tuple[int | str | None, ...]]:
    shapes = {}
    for role, info in zip(("data", "indices"), inputs, strict=False):
        if info is not None and info.shape is not None:
            shapes[role] = info.shape
    return shapes


def _lowest_level(*args: Any) -> FeatureLevel | None:
    """The lowest level at which a node translates: ``args`` are the fields of its ConvertContext at the
    target level, then its status there (kept as a plain tuple until asked: fewer objects per node)."""
    *fields, status = args
    ctx = ConvertContext(*fields)
    operators: tuple[OperatorType, ...] = getattr(_converter(ctx.op_type), "OPERATORS", ())
    for level in _levels(ctx.feature_level):
        if level == ctx.feature_level:
            found = status is Status.DML
        elif operators and not any(support.operator_available(op, level) for op in operators):
            continue  # every lowering fails at a level without its operator
        else:
            found = _attempt(dataclasses.replace(ctx, feature_level=level))[0] is Status.DML
        if found:
            return level
    return None


@functools.lru_cache(maxsize=4096)
def _translate(
    name: str,
    op_type: str,
    domain: str,
    since: int,
    attributes: tuple[tuple[str, object], ...],
    input_names: tuple[str, ...],
    output_name: str,
    inputs: tuple[TensorInfo | None, ...],
    fl: FeatureLevel,
    symbolic: bool = False,
) -> NodeTranslation:
    row = find_row(op_type, since)
    assert row is not None
    # Placeholder sizes only where some input has them: a static node translates exactly as before.
    symbolic = symbolic and any(info is not None and not info.is_static for info in inputs)
    ctx = ConvertContext(op_type, since, attributes, input_names, output_name, inputs, fl, row, symbolic)
    status, lowering, reasons = _attempt(ctx)
    if symbolic and status is not Status.ERROR:
        reasons = (*reasons, symbolic_note(_dim_names(inputs)))

    # Nothing that runs the node reads the lowest level, and finding it lowers the node again at lower
    # levels: defer that to the first read.
    min_fl = None
    if status is not Status.ERROR:
        context = (op_type, since, attributes, input_names, output_name, inputs, fl, row, symbolic)
        min_fl = Deferred(_lowest_level, *context, status)
    reduction = ctx.attr("reduction", "none")
    elem_types = tuple(info.elem_type if info is not None else 0 for info in inputs)
    codes = [r.code for r in reasons]
    placement, ep_reasons = node_placement(op_type, since, str(reduction), elem_types, status, codes)
    if placement == DML_PROVIDER:
        ep_reasons = provider_notes(op_type, codes, _role_shapes(inputs))
    return assemble(
        NodeTranslation,
        name=name,
        op_type=op_type,
        domain=domain,
        since_version=since,
        feature_level=fl,
        status=status,
        operator=lowering.operator if lowering else None,
        min_feature_level=min_fl,
        ort_placement=placement,
        reasons=(*reasons, *ep_reasons),
        layout=lowering.layout if lowering else None,
        inputs=lowering.inputs if lowering else (),
        output=lowering.output if lowering else None,
        attributes=lowering.attributes if lowering else attributes,
    )


def model_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """The model's opset per domain (``ai.onnx`` written as ``""``)."""
    return {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}


def node_since_version(node: onnx.NodeProto, opsets: Mapping[str, int]) -> int:
    """The since_version of a node's schema at the model's opset; the opset itself if onnx has no schema."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain, 0)
    return _schema_since(node.op_type, opset, domain) or opset


SIZES_SYMBOLIC_MEANING = (
    "the operator, DimensionCount, Axis and counts are decided, and the rules that depend on runtime sizes "
    "(empty tensors, the 2^32-1 element and UINT32 size limits, indices smaller than data, equal sizes the "
    "model names differently such as batch dimensions) are checked when the node runs"
)
"""What a ``SIZES_SYMBOLIC`` note means, said once per report (the note itself names the dimensions)."""

NOTE_MEANINGS: Mapping[str, str] = {"SIZES_SYMBOLIC": SIZES_SYMBOLIC_MEANING}
"""Notes whose meaning is the same on every node, said once per report: code -> meaning."""


def symbolic_note(names: Sequence[str]) -> Reason:
    """The note of a node translated from placeholder sizes: the dimensions in words and as its value
    (the rules it leaves to the run: :data:`SIZES_SYMBOLIC_MEANING`)."""
    shown = ", ".join(dict.fromkeys(names)) or UNNAMED
    return Reason(
        "SIZES_SYMBOLIC",
        f"Sizes follow the symbolic dimensions ({shown}); the rules that depend on runtime sizes are "
        "checked when the node runs",
        list(dict.fromkeys(names)),
    )
