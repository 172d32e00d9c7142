"""Text and JSON renderings of a model translation, both from the same ModelTranslation object.

The text follows onnxruntime's EP usability checker: nodes handled versus total, one counter per reason a
node is not handled, a per-node table, a verdict and the next command to run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..translate.plan import NodeTranslation, Status
from ..translate.translator import ModelTranslation
from .text import table

__all__ = ["next_command", "render_json", "render_text", "verdict"]


def verdict(mt: ModelTranslation) -> str:
    """YES: every gather/scatter node runs as DirectML; PARTIAL: some do; NO: none do."""
    summary = mt.summary
    if summary["all_dml"]:
        return "YES"
    return "PARTIAL" if summary["dml"] else "NO"


def next_command(
    mt: ModelTranslation,
    model_path: str,
    symbolic_inputs: Mapping[str, Sequence[object]] | None = None,
    inputs_path: str | None = None,
) -> str:
    """The command a user most likely wants next (``inputs_path``: a sample .npz, if one is known)."""
    level = mt.feature_level.short
    codes = {code for n in mt.nodes for code in n.reason_codes}
    if "SHAPE_UNKNOWN" in codes:
        args = (
            " ".join(
                f"--input-shape {name}={','.join(str(d) if isinstance(d, int) else 'N' for d in dims)}"
                for name, dims in (symbolic_inputs or {}).items()
            )
            or "--input-shape NAME=D0,D1,.."
        )
        return f"dmlshim inspect {model_path} {args}"
    npz = inputs_path or "INPUTS.npz"
    if not mt.nodes:
        return f"dmlshim run {model_path} --inputs {npz}"
    return f"dmlshim run {model_path} --inputs {npz} --feature-level {level}"


def _operator_cell(node: NodeTranslation) -> str:
    if node.operator is None:
        return "-"
    return node.operator.operator_type.dml_name.removeprefix("DML_OPERATOR_")


def render_text(
    mt: ModelTranslation,
    model_path: str,
    symbolic_inputs: Mapping[str, Sequence[object]] | None = None,
    inputs_path: str | None = None,
) -> str:
    """The human-readable report of ``dmlshim inspect``.

    Args:
        mt: the translation.
        model_path: the model file, as the user named it.
        symbolic_inputs: graph inputs with symbolic dims (for the ``--input-shape`` hint).
        inputs_path: a sample-input .npz beside the model, for the suggested ``dmlshim run``.
    """
    s = mt.summary
    lines = [
        f"Model: {model_path}",
        f"Target: {mt.feature_level.dml_name} (ai.onnx opset {mt.opset}; {s['total_nodes']} nodes, "
        f"{s['gather_scatter_nodes']} gather/scatter)",
        "",
        f"Gather/scatter nodes translated to DirectML: {s['dml']} of {s['gather_scatter_nodes']}"
        + (f" ({s['fallback']} fall back to CPU, {s['error']} not translated)" if not s["all_dml"] else ""),
        f"onnxruntime DirectML EP would place: {s['ort_placement']['DmlExecutionProvider']} on "
        f"DmlExecutionProvider, {s['ort_placement']['CPUExecutionProvider']} on CPUExecutionProvider"
        + (f", {s['ort_placement']['none']} rejected" if s["ort_placement"]["none"] else ""),
    ]
    if s["min_feature_level"]:
        lines.append(f"Lowest feature level for every translated node: {s['min_feature_level']}")
    if s["reasons"]:
        lines += ["", "Not translated because:"]
        lines += [f"  {code}: {count}" for code, count in s["reasons"].items()]
    if s["ort_reasons"]:
        lines += ["", "onnxruntime's DirectML EP would not run on DML because:"]
        lines += [f"  {code}: {count}" for code, count in s["ort_reasons"].items()]
    if s["notes"]:
        lines += ["", "Notes on translated nodes:"]
        lines += [f"  {code}: {count}" for code, count in s["notes"].items()]
    if mt.nodes:
        rows = [["NODE", "OP", "SINCE", "STATUS", "DML OPERATOR", "MIN FL", "ORT EP"]]
        for n in mt.nodes:
            rows.append(
                [
                    n.name,
                    n.op_type,
                    str(n.since_version),
                    n.status.value,
                    _operator_cell(n),
                    n.min_feature_level.short if n.min_feature_level else "-",
                    (n.ort_placement or "rejected").removesuffix("ExecutionProvider"),
                ]
            )
        lines += ["", "Nodes:", *table(rows)]
        detailed = [n for n in mt.nodes if n.reasons or n.host_steps]
        if detailed:
            lines += ["", "Details:"]
            for n in detailed:
                lines.append(f"  {n.name}:")
                for r in n.reasons:
                    mark = "note" if n.status is Status.DML else n.status.value
                    lines.append(f"    [{mark}] {r.code}: {r.message}")
                for step in n.host_steps:
                    lines.append(f"    [host] {step.kind.value}: {step.description}")
    else:
        lines += ["", "No Gather, GatherElements, GatherND, Scatter, ScatterElements or ScatterND node."]
    v = verdict(mt)
    meaning = {
        "YES": "every gather/scatter node runs as a DirectML operator",
        "PARTIAL": "some gather/scatter nodes fall back to the CPU",
        "NO": "no gather/scatter node runs as a DirectML operator",
    }[v]
    if not mt.nodes:
        meaning = "nothing to translate"
    nxt = next_command(mt, model_path, symbolic_inputs, inputs_path)
    lines += ["", f"Verdict: {v} ({meaning})", f"Next: {nxt}"]
    return "\n".join(lines) + "\n"


def render_json(mt: ModelTranslation, model_path: str | None = None) -> str:
    """The ``--json`` document: schema_version 1 (extra keys: model, and each node's plan)."""
    doc: dict[str, Any] = mt.to_json()
    if model_path is not None:
        doc = {"schema_version": doc.pop("schema_version"), "model": model_path, **doc}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
