"""Text and JSON renderings of a :class:`dmlshim.validate.ValidationReport` (both from the same object)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..validate import OutputComparison, ValidationReport
from .text import shape_text, table

__all__ = ["render_json", "render_text", "verdict"]


def verdict(report: ValidationReport) -> str:
    """``MATCH`` when every output agrees with onnxruntime CPU, else ``MISMATCH``."""
    return "MATCH" if report.match else "MISMATCH"


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}"


def _value(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _shape(shape: Sequence[int]) -> str:
    return shape_text(shape)


def _mismatch_lines(o: OutputComparison) -> list[str]:
    lines = [f"MISMATCH in output {o.name!r}"]
    if o.problem:
        lines.append(f"  {o.problem}")
    elif o.first_mismatch is not None:
        m = o.first_mismatch
        lines.append(
            f"  {o.mismatches} element(s) differ; first at {list(m.index)}: dmlshim {_value(m.dmlshim)}, "
            f"onnxruntime {_value(m.onnxruntime)} (max |diff| {_number(o.max_abs_diff)})"
        )
    lines.append("  gather/scatter nodes upstream: " + (", ".join(o.upstream_nodes) or "none"))
    if o.suspect_nodes:
        lines.append("  divergence starts at: " + ", ".join(o.suspect_nodes))
    elif o.upstream_nodes:
        lines.append("  no upstream gather/scatter node's own output differs (divergence after them)")
    return lines


def render_text(report: ValidationReport) -> str:
    """The human-readable report: inputs, outputs, per-node placement, warnings, verdict."""
    lines = [f"dmlshim validate {report.model} at {report.feature_level.dml_name}"]
    feeds = ", ".join(f"{n} {_shape(s)}" for n, s in report.input_shapes)
    source = f"generated (seed {report.seed})" if report.inputs_source == "random" else report.inputs_source
    symbols = ", ".join(f"{k}={v}" for k, v in report.input_symbols)
    lines.append(f"inputs: {source}: {feeds}" + (f" (symbols {symbols})" if symbols else ""))
    lines.append(f"tolerance: rtol={report.rtol:g} atol={report.atol:g} (integer and bool outputs exact)")
    lines += ["", f"outputs ({len(report.outputs)}, compared with onnxruntime CPU, single-threaded)"]
    rows = [["output", "dtype", "shape", "result", "max |diff|"]]
    for o in report.outputs:
        rows.append(
            [o.name, o.dtype, _shape(o.shape), "match" if o.match else "MISMATCH", _number(o.max_abs_diff)]
        )
    lines += table(rows)
    lines += ["", f"gather/scatter nodes ({len(report.nodes)})"]
    if report.nodes:
        rows = [["node", "op", "ran on", "operator", "DML EP places on", "own output"]]
        for n in report.nodes:
            operator = (n.record.operator if n.record and n.record.operator else None) or "-"
            own = {True: "match", False: "DIFFERS", None: "-"}[n.output_match]
            rows.append([n.name, n.op_type, n.placement or "-", operator, n.ort_placement or "-", own])
        lines += table(rows)
    if not any(n.placement == "dml" for n in report.nodes):
        why = "no node ran from its descriptor" if report.nodes else "the model has no gather/scatter node"
        lines.append(f"  nothing was emulated: {why}; both runs are onnxruntime CPU")
    counts = Counter(w.code for w in report.warnings)
    lines += ["", f"warnings ({len(report.warnings)})"]
    for w in report.warnings:
        lines.append(f"  {w.code} {w.node}: {w.message}")
    if counts:
        lines.append("  by code: " + ", ".join(f"{c} {k}" for c, k in sorted(counts.items())))
    lines.append("")
    for o in report.mismatched:
        lines += [*_mismatch_lines(o), ""]
    if report.match:
        lines.append("verdict: MATCH - every output agrees with onnxruntime CPU")
    else:
        names = ", ".join(o.name for o in report.mismatched)
        lines.append(f"verdict: MISMATCH - {len(report.mismatched)} output(s) differ: {names}")
    return "\n".join(lines) + "\n"


def render_json(report: ValidationReport) -> str:
    """The ``--json`` document (schema_version 1)."""
    return json.dumps(report.to_json(), indent=2) + "\n"
