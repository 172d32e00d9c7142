"""What the HTML report says about each gather/scatter node: where it runs (the colour) and the details
shown when it is selected, from an inspect translation or a validate report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...translate.ort_folding import OPTIMIZED_AWAY_CODE
from ...translate.placement import REASON_CPU_PREFERRED
from ...translate.plan import NodeTranslation, Status
from ...translate.translator import is_ep_reason
from ...validate import NodeValidation, ValidationReport
from ...validate.results import ATTR_DIVERGES
from ..inspect_report import PROVIDER_WARNINGS, descriptor_line

__all__ = ["CATEGORIES", "NodeMark", "inspect_marks", "validate_marks"]

DML = "dml"
FALLBACK = "fallback"
SHAPE = "shape"
ERROR = "error"

CATEGORIES: Mapping[str, tuple[str, str]] = {
    DML: ("DirectML operator", "#43a047"),
    FALLBACK: ("CPU fallback", "#fb8c00"),
    SHAPE: ("onnxruntime shape computation (CPU)", "#1e88e5"),
    ERROR: ("not translated", "#e53935"),
}
"""Category -> (legend label, fill colour). The colours are distinct enough to be told apart in a
screenshot (the browser test looks for each one)."""


@dataclass(frozen=True)
class NodeMark:
    """One gather/scatter node as the page shows it.

    Attributes:
        name: the node's path name (``loop/body/Gather_2``), as every command names it.
        op_type: the ONNX op.
        category: one of the :data:`CATEGORIES` keys (the node's colour).
        summary: a few words under the name (the DML operator, or the first reason code).
        details: (label, text) rows shown when the node is selected.
        alert: a result that needs a look (validate: the output diverges here).
    """

    name: str
    op_type: str
    category: str
    summary: str
    details: tuple[tuple[str, str], ...]
    alert: bool = False


def _category(t: NodeTranslation) -> str:
    if t.status is Status.ERROR:
        return ERROR
    if t.status is Status.FALLBACK:
        return FALLBACK
    # a node onnxruntime's optimizations remove is computed on the CPU at session creation, if at all
    codes = t.reason_codes
    return SHAPE if REASON_CPU_PREFERRED in codes or OPTIMIZED_AWAY_CODE in codes else DML


def _reason_mark(t: NodeTranslation, code: str) -> str:
    if code in PROVIDER_WARNINGS:
        return "warning"
    if any(r.code == code and is_ep_reason(r) for r in t.reasons):
        return "placement"
    return "note" if t.status is Status.DML else t.status.value


class _Descriptors:
    """Descriptor lines, made once per descriptor object: nodes renamed from one translation share it."""

    def __init__(self) -> None:
        self._lines: dict[int, tuple[object, str]] = {}

    def __call__(self, t: NodeTranslation) -> str:
        if t.operator is None:
            return "-"
        found = self._lines.get(id(t.operator))
        if found is None or found[0] is not t.operator:
            found = self._lines[id(t.operator)] = (t.operator, descriptor_line(t))
        return found[1]


def _translation_rows(t: NodeTranslation, descriptors: _Descriptors) -> list[tuple[str, str]]:
    level = t.min_feature_level
    rows = [
        ("op", f"{t.domain or 'ai.onnx'} {t.op_type}-{t.since_version}"),
        ("status", t.status.value),
        ("DML operator", t.operator.operator_type.dml_name if t.operator is not None else "-"),
        ("descriptor", descriptors(t)),
        ("lowest feature level", level.dml_name if level else "-"),
        ("target feature level", t.feature_level.dml_name),
        ("onnxruntime-directml places it on", t.ort_placement or "rejected (the session fails)"),
    ]
    rows += [(f"[{_reason_mark(t, r.code)}] {r.code}", r.message) for r in t.reasons]
    rows += [(f"[host] {s.kind.value}", s.description) for s in t.host_steps]
    return rows


def _summary(t: NodeTranslation | None, category: str) -> str:
    if t is None:
        return ""
    if category == DML and t.operator is not None:
        return t.operator.operator_type.dml_name.removeprefix("DML_OPERATOR_")
    if category == SHAPE:
        return "shape computation on CPU"
    codes = [c for c in t.reason_codes if c != "SIZES_SYMBOLIC"]
    return codes[0] if codes else t.status.value


def inspect_marks(nodes: tuple[NodeTranslation, ...] | list[NodeTranslation]) -> dict[str, NodeMark]:
    """The marks of ``dmlshim inspect``'s nodes, by node name."""
    out: dict[str, NodeMark] = {}
    descriptors = _Descriptors()
    for t in nodes:
        category = _category(t)
        out[t.name] = NodeMark(
            t.name, t.op_type, category, _summary(t, category), tuple(_translation_rows(t, descriptors))
        )
    return out


def _run_category(n: NodeValidation) -> str | None:
    rec = n.record
    if rec is None:
        return None
    if rec.status == "error":
        return ERROR
    if rec.placement == "dml":
        return DML
    if any(c == "ort_cpu_preferred" for c, _ in rec.reasons):
        return SHAPE
    return FALLBACK


def validate_marks(report: ValidationReport) -> dict[str, NodeMark]:
    """The marks of ``dmlshim validate``'s nodes (the run decides the colour), by node name."""
    from ..validate_report import attribution_cell, ort_cell, ran_cell

    out: dict[str, NodeMark] = {}
    descriptors = _Descriptors()
    for n in report.nodes:
        t = n.translation
        category = _run_category(n) or (_category(t) if t is not None else ERROR)
        rows = [
            ("in dmlshim's run", ran_cell(n)),
            ("onnxruntime-directml would", ort_cell(n)),
            ("output against the reference", attribution_cell(n)),
        ]
        rows += [
            (f"input {name}", {True: "match", False: "differs", None: "not observed"}[m])
            for name, m in n.input_matches
        ]
        if n.record is not None:
            rows += [(f"[run] {c}", m) for c, m in n.record.reasons]
            rows += [(f"[run note] {c}", m) for c, m in n.record.notes]
        if t is not None:
            rows += _translation_rows(t, descriptors)
        summary = _summary(t, category)
        if n.record is not None and n.record.operator and category == DML:
            summary = n.record.operator.removeprefix("DML_OPERATOR_")
        out[n.name] = NodeMark(
            n.name, n.op_type, category, summary, tuple(rows), alert=n.attribution == ATTR_DIVERGES
        )
    return out
