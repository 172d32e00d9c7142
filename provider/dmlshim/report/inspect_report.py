"""Text and JSON renderings of a model translation, both from the same ModelTranslation object.

The text follows onnxruntime's EP usability checker: nodes handled versus total, one counter per reason a
node is not handled, a per-node table, a verdict and the next command to run.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..dml.symbolic import describe
from ..model.ort_errors import LOWERED_HOW, REGISTER_HOW, UnknownOperator, is_lowered_op
from ..text import printable, shape_text, table
from ..translate.ep_refusals import describe_refusals
from ..translate.model_translation import ModelTranslation
from ..translate.ort_folding import OPTIMIZED_AWAY_CODE
from ..translate.plan import NodeTranslation, Status, elem_type_name
from ..translate.run_cases import case_lines
from ..translate.translator import NOTE_MEANINGS, is_ep_reason

__all__ = [
    "GraphValue",
    "next_command",
    "placement_reasons",
    "placement_verdict",
    "render_text",
    "shape_hint",
    "verdict",
    "verdict_lines",
]

PROVIDER_WARNINGS = frozenset({"EP_OUTPUT_UNWRITTEN", "EP_DESCRIPTOR_FAILS"})
"""``EP_*`` codes that warn about what the provider computes, not where it places the node."""


class RunShapesLike(Protocol):
    """What ``inspect --inputs`` learnt from a run (:class:`dmlshim.cli.inspect_run.RunShapes`)."""

    # Read-only (properties): the run's shapes are a frozen dataclass.
    @property
    def source(self) -> str: ...
    @property
    def nodes(self) -> frozenset[str]: ...
    @property
    def constant(self) -> frozenset[str]: ...
    @property
    def error(self) -> str | None: ...
    @property
    def not_run(self) -> Mapping[str, str]: ...

    def to_json(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class GraphValue:
    """A graph input or output as the report shows it.

    Attributes:
        name: the value's name.
        elem_type: ONNX element type (0 = unknown).
        shape: dims (int, dim name, or None for unnamed), None when the rank is unknown.
    """

    name: str
    elem_type: int
    shape: tuple[int | str | None, ...] | None

    def render(self) -> str:
        kind = elem_type_name(self.elem_type) if self.elem_type else "?"
        if self.shape is None:
            return f"{kind} (rank unknown)"
        return f"{kind} {shape_text([None if d == '' else d for d in self.shape])}"


def verdict(mt: ModelTranslation) -> str:
    """The answer to the first question, which decides inspect's exit code: does every gather/scatter node
    translate to a DirectML operator at the target level? YES: every one; PARTIAL: some; NO: none."""
    summary = mt.summary
    if summary["all_dml"]:
        return "YES"
    return "PARTIAL" if summary["dml"] else "NO"


def placement_verdict(mt: ModelTranslation) -> str:
    """The answer to the second question: would onnxruntime-directml run every gather/scatter node on
    DmlExecutionProvider today? YES: every one; PARTIAL: some; NO: none, or the provider refuses the model
    at session creation (a node of any op in a form it refuses; an empty model answers YES)."""
    if _session_fails(mt) or mt.session_refusals:
        return "NO"
    on_dml = mt.summary["ort_placement"]["DmlExecutionProvider"]
    if on_dml == len(mt.nodes):
        return "YES"
    return "PARTIAL" if on_dml else "NO"


def _session_fails(mt: ModelTranslation) -> list[str]:
    """Nodes the provider places on DML with a descriptor DirectML rejects: its session creation fails."""
    if "EP_DESCRIPTOR_FAILS" not in _codes(mt):
        return []
    return [n.name for n in mt.nodes if "EP_DESCRIPTOR_FAILS" in n.reason_codes]


def _codes(mt: ModelTranslation) -> set[str]:
    """Every reason code of any node: the summary counts each node's codes under one of its three
    counters (from one node per group of nodes sharing their reasons), so no walk of the nodes is made."""
    s = mt.summary
    return {*s["reasons"], *s["notes"], *s["ort_reasons"]}


def _meaning(mt: ModelTranslation) -> str:
    """The first answer in words, from the counts: nothing is said that did not happen."""
    s = mt.summary
    if not mt.nodes:
        return "nothing to translate"
    symbolic = sum(1 for n in mt.nodes if n.ok and n.symbolic)
    if s["all_dml"]:
        out = "every gather/scatter node translates to a DirectML operator"
        if symbolic:
            out += f"; {symbolic} with symbolic sizes, whose size rules are checked when they run"
        return out
    parts = []
    if s["fallback"]:
        parts.append(f"{s['fallback']} fall back to the CPU")
    if s["error"]:
        unknown = sum(1 for n in mt.nodes if "SHAPE_UNKNOWN" in n.reason_codes)
        if unknown:
            parts.append(f"{unknown} of unknown rank or type")
        if s["error"] - unknown:
            parts.append(f"{s['error'] - unknown} not translated")
    head = f"{s['dml']} of {s['gather_scatter_nodes']} translate to DirectML operators"
    return head + "; " + ", ".join(parts)


def placement_reasons(node: NodeTranslation) -> list[str]:
    """The reason codes for which onnxruntime's DirectML provider does not run ``node`` on DML (its
    ``EP_*`` codes other than the warnings, else the translation's own reasons)."""
    codes = [r.code for r in node.reasons if is_ep_reason(r) and r.code not in PROVIDER_WARNINGS]
    if not codes and not node.ok:
        codes = [r.code for r in node.reasons if r.code != "SIZES_SYMBOLIC"]
    return list(dict.fromkeys(codes))


def _placement_meaning(mt: ModelTranslation) -> str:
    """The second answer in words: counts by provider, with the reason codes of the nodes not on DML."""
    if mt.session_refusals:
        return f"onnxruntime-directml fails on the model ({describe_refusals(mt.session_refusals)})"
    if not mt.nodes:
        return "nothing to place"
    total = len(mt.nodes)
    parts = []
    for provider, label in (
        ("CPUExecutionProvider", "on CPUExecutionProvider"),
        (None, "rejected by the provider (the session fails)"),
    ):
        nodes = [n for n in mt.nodes if n.ort_placement == provider]
        if not nodes:
            continue
        codes = collections.Counter(c for n in nodes for c in placement_reasons(n))
        why = ", ".join(f"{c} {k}" for c, k in sorted(codes.items()))
        parts.append(f"{len(nodes)} {label}" + (f": {why}" if why else ""))
    on_dml = mt.summary["ort_placement"]["DmlExecutionProvider"]
    failing = _session_fails(mt)
    if failing:
        parts.insert(
            0,
            f"{len(failing)} placed on DmlExecutionProvider with a descriptor DirectML rejects, so session "
            "creation fails there: EP_DESCRIPTOR_FAILS",
        )
        return "; ".join(parts)
    if on_dml == total:
        return "every gather/scatter node on DmlExecutionProvider"
    return f"{on_dml} of {total} on DmlExecutionProvider; " + "; ".join(parts)


def verdict_lines(mt: ModelTranslation) -> list[str]:
    """The two answers, each on its own line: the first decides the exit code."""
    return [
        "Verdict:",
        f"  DirectML operators at {mt.feature_level.dml_name}: {verdict(mt)} ({_meaning(mt)})",
        f"  onnxruntime-directml today: {placement_verdict(mt)} ({_placement_meaning(mt)})",
    ]


def shape_hint(symbolic_inputs: Mapping[str, Sequence[object]]) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` sizes ``Next:`` would suggest: 1 for each of the model's own symbolic
    dimension names; the whole shape (1 for each unknown dim) for an input with an unnamed dimension."""
    named: dict[str, tuple[int, ...]] = {}
    whole: dict[str, tuple[int, ...]] = {}
    for name, dims in symbolic_inputs.items():
        if any(not isinstance(d, (int, str)) or d == "" for d in dims):
            whole[name] = tuple(d if isinstance(d, int) else 1 for d in dims)
        else:
            named.update((str(d), (1,)) for d in dims if isinstance(d, str))
    return {**named, **whole}


def next_command(
    mt: ModelTranslation,
    model_path: str,
    symbolic_inputs: Mapping[str, Sequence[object]] | None = None,
    inputs_path: str | None = None,
    *,
    hint_helps: bool = True,
) -> str:
    """The command a user most likely wants next.

    Args:
        mt: the translation.
        model_path: the model as the user named it.
        symbolic_inputs: the model's graph inputs with symbolic or unknown dims (name -> dims), those not
            fixed by ``--input-shape``.
        inputs_path: a sample .npz beside the model, if there is one.
        hint_helps: whether the ``--input-shape`` sizes of :func:`shape_hint` change the answer (the
            caller tried them); an inspect with them is suggested only then.
    """
    level = mt.feature_level.short
    codes = _codes(mt)
    if "SHAPE_UNKNOWN" in codes and symbolic_inputs and hint_helps:
        hint = shape_hint(symbolic_inputs)
        args = [f"--input-shape {name}={','.join(str(d) for d in dims)}" for name, dims in hint.items()]
        if args:
            return f"dmlshim inspect {model_path} {' '.join(args)} --feature-level {level}"
    if inputs_path is not None:
        return f"dmlshim run {model_path} --inputs {inputs_path} --feature-level {level}"
    # validate draws inputs itself (and translates nodes of unknown shape with the real ones).
    return f"dmlshim validate {model_path} --feature-level {level}"


def _operator_cell(node: NodeTranslation) -> str:
    if node.operator is None:
        return "-"
    return node.operator.operator_type.dml_name.removeprefix("DML_OPERATOR_")


def _dims(values: Sequence[int]) -> str:
    return "[" + ",".join(str(describe(v)) for v in values) + "]"


def descriptor_line(node: NodeTranslation) -> str:
    """The descriptor's fields in one line: the UINT fields, then each tensor's Sizes (Strides) and type."""
    op = node.operator
    if op is None:
        return "-"
    parts = [f"{k}={v}" for k, v in op.uints().items()]
    for field, tensor in op.tensors().items():
        text = f"{field.removesuffix('Tensor')}{_dims(tensor.sizes)}"
        if tensor.strides is not None:
            text += f" strides {_dims(tensor.strides)}"
        parts.append(f"{text} {tensor.data_type.name}")
    return " ".join(parts)


_NAMES_SHOWN = 6
"""Nodes named per line of a note said once (the rest counted; ``--json`` lists every node's notes)."""


def _notes(nodes: Sequence[NodeTranslation], counts: Mapping[str, int]) -> list[str]:
    """The notes on translated nodes, counted; a note whose meaning is the same on every node
    (:data:`NOTE_MEANINGS`) is explained here once, with its nodes grouped by what the note names (the
    symbolic dimensions), instead of once per node under Details."""
    lines = _counts("Notes on translated nodes:", counts)
    for code in counts:
        meaning = NOTE_MEANINGS.get(code)
        if meaning is None:
            continue
        index = lines.index(f"  {code}: {counts[code]}")
        groups: dict[str, list[str]] = {}
        for n in nodes:
            for r in n.reasons:
                if r.code == code and n.ok:
                    named = r.value if isinstance(r.value, list) else []
                    groups.setdefault(", ".join(str(v) for v in named) or "-", []).append(printable(n.name))
        detail = [f"    {meaning}"]
        for named, names in groups.items():
            shown = ", ".join(names[:_NAMES_SHOWN])
            if len(names) > _NAMES_SHOWN:
                shown += f" and {len(names) - _NAMES_SHOWN} more"
            detail.append(f"    dimensions {named}: {shown}")
        lines[index + 1 : index + 1] = detail
    return lines


def _counts(title: str, counts: Mapping[str, int]) -> list[str]:
    if not counts:
        return []
    return ["", title, *(f"  {code}: {count}" for code, count in counts.items())]


def render_text(
    mt: ModelTranslation,
    model_path: str,
    symbolic_inputs: Mapping[str, Sequence[object]] | None = None,
    inputs_path: str | None = None,
    *,
    graph_inputs: Sequence[GraphValue] = (),
    graph_outputs: Sequence[GraphValue] = (),
    descriptors: bool = False,
    hint_helps: bool = True,
    run: RunShapesLike | None = None,
    unknown_ops: Sequence[UnknownOperator] = (),
) -> str:
    """The human-readable report of ``dmlshim inspect``.

    Args:
        mt: the translation.
        model_path: the model file, as the user named it.
        symbolic_inputs: graph inputs with symbolic dims (for the ``--input-shape`` hint).
        inputs_path: a sample-input .npz beside the model, for the suggested ``dmlshim run``.
        graph_inputs: the graph's inputs (initializers excluded), shown after the target.
        graph_outputs: the graph's outputs.
        descriptors: add each node's descriptor fields (Sizes, Axis, counts), one line per node.
        hint_helps: see :func:`next_command`.
        run: the shapes a run gave (``inspect --inputs``): which nodes were translated at them.
        unknown_ops: nodes of operators ONNX and onnxruntime do not define (custom ops): listed as nodes
            inspect cannot place, and ``Next:`` says their library must be registered first.
    """
    s = mt.summary
    nodes = f"{s['total_nodes']} node" + ("" if s["total_nodes"] == 1 else "s")
    lines = [
        f"Model: {model_path}",
        f"Target: {mt.feature_level.dml_name} (ai.onnx opset {mt.opset}; {nodes}, "
        f"{s['gather_scatter_nodes']} gather/scatter)",
    ]
    if run is not None:
        lines.append(_run_line(mt, run))
    for title, values in (("Inputs", graph_inputs), ("Outputs", graph_outputs)):
        if values:
            lines += ["", f"{title}:", *table([[v.name, v.render()] for v in values])]
    lines += [
        "",
        f"Gather/scatter nodes translated to DirectML: {s['dml']} of {s['gather_scatter_nodes']}"
        + (
            f" ({s['fallback']} fall back to CPU, {s['error']} failed to translate)"
            if not s["all_dml"]
            else ""
        ),
        f"onnxruntime DirectML EP would place: {s['ort_placement']['DmlExecutionProvider']} on "
        f"DmlExecutionProvider, {s['ort_placement']['CPUExecutionProvider']} on CPUExecutionProvider"
        + (f", {s['ort_placement']['none']} rejected" if s["ort_placement"]["none"] else ""),
    ]
    if s["min_feature_level"]:
        lines.append(f"Lowest feature level for every translated node: {s['min_feature_level']}")
    ep = s["ort_reasons"]
    lines += _counts("Not translated because:", s["reasons"])
    lines += _counts(
        "onnxruntime's DirectML EP would not run on DML because:",
        {c: n for c, n in ep.items() if c not in PROVIDER_WARNINGS},
    )
    lines += _counts(
        "Warnings: onnxruntime's DirectML EP differs from ONNX here:",
        {c: n for c, n in ep.items() if c in PROVIDER_WARNINGS},
    )
    lines += _notes(mt.nodes, s["notes"])
    if mt.nodes:
        lines += ["", "Nodes:", *table(_node_rows(mt.nodes, descriptors, run, _codes(mt)))]
        if run is not None and not run.error:
            lines += _body_lines(mt, run)
        lines += _details(mt.nodes)
    else:
        lines += ["", "No Gather, GatherElements, GatherND, Scatter, ScatterElements or ScatterND node."]
    nxt = next_command(mt, model_path, symbolic_inputs, inputs_path, hint_helps=hint_helps)
    if unknown_ops:
        lines += [
            "",
            "Nodes inspect cannot place (operators ONNX and onnxruntime do not define: custom ops):",
            *table([["NODE", "OP", "DOMAIN"], *([u.node, u.op_type, u.domain] for u in unknown_ops)]),
        ]
        # A file `dmlshim lower` wrote runs only under dmlshim's own custom ops: say how, as run does.
        lowered = all(is_lowered_op(u.domain, u.op_type) for u in unknown_ops)
        nxt = (
            f"run and validate refuse this model as it is: {LOWERED_HOW}"
            if lowered
            else "run and validate refuse this model until onnxruntime knows these operators: register the "
            f"library that defines them ({REGISTER_HOW})"
        )
    lines += ["", *verdict_lines(mt)]
    if unknown_ops:
        lines.append(
            "  (both assume the custom operators' library is registered: without it onnxruntime refuses "
            "the model)"
        )
    lines.append(f"Next: {nxt}")
    return "\n".join(lines) + "\n"


def _run_line(mt: ModelTranslation, run: RunShapesLike) -> str:
    if run.error:
        return f"Shapes: static (onnxruntime CPU could not run the model on {run.source}: {run.error})"
    at_run = sum(1 for n in mt.nodes if n.name in run.nodes)
    constant = sum(1 for n in mt.nodes if n.name in run.constant)
    not_run = sum(1 for n in mt.nodes if n.name in run.not_run and n.name not in run.nodes)
    rest = len(mt.nodes) - at_run - constant - not_run
    bodies = sum(1 for n in mt.nodes if n.name in mt.run_cases)
    return (
        f"Shapes: {at_run} of {len(mt.nodes)} gather/scatter nodes translated at the shapes of a run on "
        f"onnxruntime CPU ({run.source})"
        + (f", {bodies} of them inside If/Loop/Scan bodies" if bodies else "")
        + (f"; {constant} reading only initializers, whose static shapes are exact" if constant else "")
        + (
            f"; {not_run} in bodies that did not run, from static shapes (inferred from the run's input "
            "sizes)"
            if not_run
            else ""
        )
        + (f"; {rest} inside control flow from static shapes" if rest else "")
    )


def _body_lines(mt: ModelTranslation, run: RunShapesLike) -> list[str]:
    """The body nodes whose shapes changed between executions (each shape with its iterations and
    verdict), and why the run gave some body nodes no shapes."""
    lines = case_lines(mt.run_cases)
    lines += [f"  {name}: static shapes: {why}" for name, why in run.not_run.items() if name not in run.nodes]
    return ["", "Shapes inside control flow:", *lines] if lines else []


def _node_rows(
    nodes: Sequence[NodeTranslation],
    descriptors: bool,
    run: RunShapesLike | None = None,
    codes: set[str] | None = None,
) -> list[list[str]]:
    """The node table's rows; ``codes``: every reason code of the nodes (a superset will do), when known."""
    rows = [["NODE", "OP", "SINCE", "STATUS", "DML OPERATOR", "MIN FL", "ORT EP"]]
    if run is not None:
        rows[0].append("SHAPES")
    if descriptors:
        rows[0].append("DESCRIPTOR")
    # A large graph's nodes share a handful of rows but for the name: each distinct one is spelled once.
    cells: dict[tuple[object, ...], list[str]] = {}
    any_removed = codes is None or OPTIMIZED_AWAY_CODE in codes  # a code no node has is not looked for
    for n in nodes:
        operator = n.operator
        kind = operator.operator_type if operator is not None else None
        # a node onnxruntime's optimizations remove runs in no partition: the column says so
        removed = any_removed and OPTIMIZED_AWAY_CODE in n.reason_codes
        key = (n.op_type, n.since_version, n.status, kind, n.min_feature_level, n.ort_placement, removed)
        tail = cells.get(key)
        if tail is None:
            level = n.min_feature_level
            tail = cells[key] = [
                n.op_type,
                str(n.since_version),
                n.status.value,
                _operator_cell(n),
                level.short if level else "-",
                "removed" if removed else (n.ort_placement or "rejected").removesuffix("ExecutionProvider"),
            ]
        row = [n.name, *tail]
        if run is not None:
            row.append("run" if n.name in run.nodes else "static")
        if descriptors:
            row.append(descriptor_line(n))
        rows.append(row)
    return rows


def _details(nodes: Sequence[NodeTranslation]) -> list[str]:
    lines: list[str] = []
    for n in nodes:
        # notes said once for the model (under "Notes on translated nodes") are not repeated per node
        reasons = [r for r in n.reasons if not (n.ok and r.code in NOTE_MEANINGS)]
        if not reasons and not n.host_steps:
            continue
        lines.append(f"  {printable(n.name)}:")
        for r in reasons:
            if r.code in PROVIDER_WARNINGS:
                mark = "warning"
            elif is_ep_reason(r):
                mark = "placement"  # where onnxruntime-directml runs the node, not the translation
            else:
                mark = "note" if n.status is Status.DML else n.status.value
            lines.append(f"    [{mark}] {r.code}: {r.message}")
        for step in n.host_steps:
            lines.append(f"    [host] {step.kind.value}: {step.description}")
    return ["", "Details:", *lines] if lines else []
