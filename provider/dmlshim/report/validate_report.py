"""Text and JSON renderings of a :class:`dmlshim.validate.ValidationReport` (both from the same object)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..execute.record import PLACEMENT_DML
from ..model.zero_depth_scatternd import CRASH_MARK, ort_version
from ..text import names_text, printable, shape_text, table
from ..translate.placement import REASON_CPU_PREFERRED
from ..translate.plan import CPU_PROVIDER, DML_PROVIDER
from ..validate import NodeValidation, OutputComparison, ValidationReport
from ..validate.results import (
    ATTR_DIVERGES,
    ATTR_MATCH,
    ATTR_NOT_COMPARED,
    ATTR_UNOBSERVED,
    ATTR_UPSTREAM,
    CAUSE_GATHER_SCATTER,
    CAUSE_IDENTICAL,
    CAUSE_OTHER_NODES,
    CAUSE_UNEXPLAINED,
    RUNS_ENGINE,
    RUNS_ONE,
)
from .inspect_report import placement_reasons

__all__ = ["attribution_cell", "ort_cell", "ran_cell", "render_json", "render_text", "verdict"]

_ATTRIBUTION_WORDS = {
    ATTR_MATCH: "match",
    ATTR_DIVERGES: "DIVERGES HERE",
    ATTR_UPSTREAM: "inputs already differed (upstream)",
    ATTR_UNOBSERVED: "output differs (inputs not observed)",
    ATTR_NOT_COMPARED: "-",
}


_INFORMATION_CODES = frozenset({"ORT_DML_EP_RUNS_ON_CPU", "FALLBACK_TO_CPU", "NOT_EMULATED"})
"""Warnings that describe placement rather than a problem; ``--only-problems`` counts them only."""


def verdict(report: ValidationReport) -> str:
    """``MATCH`` when every output agrees with the like-for-like reference, else ``MISMATCH``."""
    return "MATCH" if report.match else "MISMATCH"


def ran_cell(n: NodeValidation) -> str:
    """What dmlshim's run did with the node: emulated as a DirectML operator, or left to onnxruntime's
    CPU provider (with the reason codes)."""
    rec = n.record
    if rec is None:
        return "-"
    if rec.placement == PLACEMENT_DML:
        return f"emulated as {rec.operator}" if rec.operator else "emulated"
    if rec.status == "not_emulated":
        return "onnxruntime CPU (inside control flow)"
    codes = list(dict.fromkeys(c for c, _ in rec.reasons if not c.startswith("EP_")))
    return "onnxruntime CPU" + (f" ({', '.join(codes)})" if codes else "")


def attribution_cell(n: NodeValidation) -> str:
    """The node's output against the like-for-like reference, in words."""
    return _ATTRIBUTION_WORDS[n.attribution]


def ort_cell(n: NodeValidation) -> str:
    """Where onnxruntime-directml would run the node today, with the reason codes when not on DML."""
    where = n.ort_placement
    if where == DML_PROVIDER:
        return "run it on DML"
    codes: list[str] = []
    if n.translation is not None:
        codes += placement_reasons(n.translation)
    if n.record is not None:
        codes += [REASON_CPU_PREFERRED for c, _ in n.record.reasons if c == "ort_cpu_preferred"]
    shown = f" ({', '.join(dict.fromkeys(codes))})" if codes else ""
    if where == CPU_PROVIDER:
        return "place it on CPU" + shown
    return ("reject it" + shown) if n.translation is not None or n.record is not None else "-"


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}"


def _value(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _shape(shape: Sequence[int]) -> str:
    return shape_text(shape)


def _external_lines(report: ValidationReport, o: OutputComparison) -> list[str]:
    e = o.external
    if e is None or e.match:
        return []
    lines = [f"MISMATCH in output {o.name!r} against {report.reference_outputs}"]
    if e.problem:
        return [*lines, f"  {e.problem}"]
    if e.first_mismatch is not None:
        m = e.first_mismatch
        lines.append(
            f"  {e.mismatches} element(s) beyond rtol={e.rtol:g} atol={e.atol:g}; first at {list(m.index)}: "
            f"dmlshim {_value(m.dmlshim)}, reference {_value(m.onnxruntime)}"
        )
    if e.statistics is not None:
        s = e.statistics
        lines.append(
            f"  max |diff| {_number(s.max_abs)}, max rel {_number(s.max_rel)}; passes with atol "
            f"{_number(s.min_atol)} (rtol {e.rtol:g}) or rtol {_number(s.min_rtol)} (atol {e.atol:g})"
        )
    return lines


#: How many gather/scatter nodes upstream of a differing output the text names.
UPSTREAM_NAMED = 12


def _mismatch_lines(report: ValidationReport, o: OutputComparison) -> list[str]:
    if o.match:
        return _external_lines(report, o)
    lines = [f"MISMATCH in output {o.name!r}"]
    if o.problem:
        lines.append(f"  {o.problem}")
    elif o.first_mismatch is not None:
        m = o.first_mismatch
        lines.append(
            f"  {o.mismatches} element(s) differ; first at {list(m.index)}: dmlshim {_value(m.dmlshim)}, "
            f"reference {_value(m.onnxruntime)} (max |diff| {_number(o.max_abs_diff)})"
        )
    upstream_text = names_text(o.upstream_nodes, UPSTREAM_NAMED) or "none"
    if len(o.upstream_nodes) > UPSTREAM_NAMED:
        upstream_text += " (--json lists them all)"
    lines.append(f"  gather/scatter nodes upstream ({len(o.upstream_nodes)}): {upstream_text}")
    if o.suspect_nodes:
        lines.append("  divergence starts at: " + ", ".join(o.suspect_nodes))
    upstream = set(o.upstream_nodes)
    differed = [n.name for n in report.nodes if n.name in upstream and n.attribution == ATTR_UPSTREAM]
    if differed:
        lines.append("  inputs already differed (upstream): " + ", ".join(differed))
    if not o.suspect_nodes:
        lines.append("  no gather/scatter node whose inputs agreed produced a different output")
        random = [w.node for w in report.warnings if w.code == "RANDOM_NODE"]
        if random:
            lines.append("  nodes drawing random values make the runs differ: " + ", ".join(random))
    if o.statistics is not None and o.problem is None:
        s = o.statistics
        lines.append(f"  passes with atol {_number(s.min_atol)} or rtol {_number(s.min_rtol)}")
    return lines + _external_lines(report, o)


def _whole_model_lines(report: ValidationReport, only_problems: bool = False) -> list[str]:
    level = dict(report.optimization_levels).get("whole_model", "?")
    lines = [
        "",
        f"whole model in onnxruntime (information: does not change the verdict; optimization {level})",
    ]
    if report.whole_model_error is not None:
        return [*lines, f"  not compared: {report.whole_model_error}"]
    rows = [["output", "dtype", "tolerance", "max |diff|", "result", "difference comes from"]]
    for o in report.outputs:
        w = o.whole_model
        if w is None or (only_problems and w.within_tolerance):
            continue
        if w.identical:
            result = "identical"
        elif w.within_tolerance:
            result = "within tolerance"
        else:
            result = f"{w.mismatches} beyond tolerance" if not w.problem else w.problem
        cause = {
            CAUSE_IDENTICAL: "-",
            CAUSE_OTHER_NODES: (
                "non-gather/scatter nodes only (DirectML's float math in other ops)"
                if report.engine == "directml"
                else "non-gather/scatter nodes only (fusion, partition boundaries)"
            ),
            CAUSE_GATHER_SCATTER: "a gather/scatter node: " + (", ".join(o.suspect_nodes) or "see above"),
            CAUSE_UNEXPLAINED: "no gather/scatter node (see the warnings: random nodes?)",
        }[w.cause]
        rows.append(
            [o.name, o.dtype, f"rtol={w.rtol:g} atol={w.atol:g}", _number(w.max_abs_diff), result, cause]
        )
    if len(rows) == 1:
        return [*lines, "  every output within tolerance"]
    return lines + table(rows)


def _reference_outputs_lines(report: ValidationReport, only_problems: bool) -> list[str]:
    if report.reference_outputs is None:
        return []
    lines = ["", f"against reference outputs {report.reference_outputs}"]
    rows = [["output", "tolerance", "max |diff|", "max rel", "over tolerance", "passes with atol", "result"]]
    for o in report.outputs:
        e = o.external
        if e is None or (only_problems and e.match):
            continue
        s = e.statistics
        rows.append(
            [
                o.name,
                f"rtol={e.rtol:g} atol={e.atol:g}",
                _number(e.max_abs_diff),
                _number(s.max_rel) if s else "-",
                str(e.mismatches) if e.problem is None else "-",
                _number(s.min_atol) if s else "-",
                "match" if e.match else (e.problem or "MISMATCH"),
            ]
        )
    return lines + (table(rows) if len(rows) > 1 else ["  every output matches"])


def render_text(report: ValidationReport, only_problems: bool = False) -> str:
    """The human-readable report: inputs, outputs, per-node placement, warnings, verdict.

    With ``only_problems``, the outputs and nodes tables list only what differs or needs a look."""
    lines = [f"dmlshim validate {report.model} at {report.feature_level.dml_name}"]
    feeds = ", ".join(f"{printable(n)} {_shape(s)}" for n, s in report.input_shapes)
    source = f"generated (seed {report.seed})" if report.inputs_source == "random" else report.inputs_source
    symbols = ", ".join(f"{k}={v}" for k, v in report.input_symbols)
    lines.append(f"inputs: {source}: {feeds}" + (f" (symbols {symbols})" if symbols else ""))
    if report.runs == RUNS_ENGINE:
        lines.append(
            f"engine: {report.engine}; reference: onnxruntime running the whole model (single-threaded)"
        )
    else:
        lines.append(
            "reference: the same partition, with onnxruntime running the gather/scatter nodes "
            "(single-threaded)"
        )
    if report.exact and report.engine == "directml":
        lines.append(
            "comparison: integer and bool outputs exact; float outputs within their dtype's tolerance "
            "unless given one (real DirectML's float math is the device's)"
        )
    elif report.exact:
        lines.append("comparison: exact (bit for bit; any NaN equals any NaN)")
    else:
        lines.append(
            f"comparison: rtol={report.rtol:g} atol={report.atol:g} (integer and bool outputs exact)"
        )
    if report.tolerances:
        own = ", ".join(f"{n} rtol={r:g} atol={a:g}" for n, r, a in report.tolerances)
        lines.append(f"per-output tolerance: {own}")
    lines.append(
        "onnxruntime graph optimization: "
        + ", ".join(f"{side} {lv}" for side, lv in report.optimization_levels)
    )
    if report.optimization_level_reason:
        lines.append(f"  why: {report.optimization_level_reason}")
    if report.runs == RUNS_ONE:
        lines.append(
            "runs: one onnxruntime run of the whole model; every emulated node's kernel, run on the inputs "
            "onnxruntime computed, reproduced its output bit for bit (dmlshim, reference and whole model are "
            "the same values)"
        )
    lines += ["", f"outputs ({len(report.outputs)}, compared with the reference)"]
    rows = [["output", "dtype", "shape", "result", "max |diff|", "max rel"]]
    for o in report.outputs:
        if only_problems and o.match:
            continue
        rel = _number(o.statistics.max_rel) if o.statistics is not None else "-"
        result = "match" if o.match else "MISMATCH"
        rows.append([o.name, o.dtype, _shape(o.shape), result, _number(o.max_abs_diff), rel])
    lines += table(rows) if len(rows) > 1 else ["  every output matches"]
    if report.emulation:
        lines += ["", "real DirectML vs dmlshim's emulation (partitioned engine)"]
        lines += table([["output", "result"], *([n, r] for n, r in report.emulation)])
    if report.directml_nodes is not None:
        check = report.directml_nodes
        lines += [
            "",
            "real DirectML's gather/scatter nodes run by dmlshim on DirectML's own inputs",
            f"  {check.text}",
        ]
        if check.failing:
            shown = [[n.node, n.op_type, n.detail] for n in check.failing[:12]]
            lines += table([["node", "op", "result"], *shown])
    lines += ["", f"gather/scatter nodes ({len(report.nodes)})"]
    if report.nodes:
        rows = [["node", "op", "dmlshim ran it", "onnxruntime-directml would", "compared with the reference"]]
        for n in report.nodes:
            if only_problems and n.attribution in (ATTR_MATCH, ATTR_NOT_COMPARED) and n.placement == "dml":
                continue
            attribution = _ATTRIBUTION_WORDS[n.attribution]
            rows.append([n.name, n.op_type, ran_cell(n), ort_cell(n), attribution])
        lines += table(rows) if len(rows) > 1 else ["  none needs a look"]
    if not any(n.placement == "dml" for n in report.nodes):
        why = "no node ran from its descriptor" if report.nodes else "the model has no gather/scatter node"
        lines.append(f"  nothing was emulated: {why}; every run is onnxruntime CPU")
    lines += _whole_model_lines(report, only_problems)
    lines += _reference_outputs_lines(report, only_problems)
    counts = Counter(w.code for w in report.warnings)
    lines += ["", f"warnings ({len(report.warnings)})"]
    for w in report.warnings:
        if only_problems and w.code in _INFORMATION_CODES:
            continue
        lines.append(f"  {w.code} {printable(w.node)}: {w.message}")
    if counts:
        lines.append("  by code: " + ", ".join(f"{c} {k}" for c, k in sorted(counts.items())))
    lines.append("")
    for o in report.mismatched:
        lines += [*_mismatch_lines(report, o), ""]
    if report.match and report.directml_nodes is not None:
        lines.append(f"verdict: {report.directml_nodes.text}")
    elif report.match:
        lines.append("verdict: MATCH - every output agrees with the reference")
    else:
        names = ", ".join(o.name for o in report.mismatched)
        lines.append(f"verdict: MISMATCH - {len(report.mismatched)} output(s) differ: {names}")
    if report.match and report.outputs and all(0 in o.shape for o in report.outputs):
        lines.append(
            "  every output is empty (0 elements), so no value was compared: give --inputs, or "
            "--input-shape for sizes that are not 0"
        )
    computed = sorted({printable(w.node) for w in report.warnings if CRASH_MARK in w.message})
    if computed:
        lines.append(
            f"  the reference for {', '.join(computed)} is dmlshim's ONNX-semantics computation: the "
            f"installed onnxruntime {ort_version()} crashes (SIGFPE) on a ScatterND with empty index tuples"
        )
    return "\n".join(lines) + "\n"


def render_json(report: ValidationReport) -> str:
    """The ``--json`` document (see :data:`dmlshim.validate.SCHEMA_VERSION`)."""
    return json.dumps(report.to_json(), indent=2) + "\n"
