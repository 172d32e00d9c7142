"""validate's warnings about gather/scatter nodes: what matters on real DirectML (duplicate scatter
writes, negative indices below FL 3_0, nodes onnxruntime-directml sends to the CPU, node forms that make
it fail on the whole model) and where a divergence starts, read from each node's translation, run record
and attribution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from ..dml.enums import FeatureLevel
from ..execute.plan.step_keys import NOTE_SHAPE_DIFFERS
from ..execute.record import PLACEMENT_DML, RunRecord
from ..translate import CPU_PROVIDER
from ..translate.ep_refusals import describe_refusals
from .results import ATTR_DIVERGES, ATTR_UPSTREAM, NodeValidation, ValidationWarning

# Warning codes.
W_DUPLICATES = "DUPLICATE_SCATTER_INDICES"
W_NEGATIVE = "NEGATIVE_INDICES_BELOW_FL_3_0"
W_EP_CPU = "ORT_DML_EP_RUNS_ON_CPU"
W_FALLBACK = "FALLBACK_TO_CPU"
W_NOT_EMULATED = "NOT_EMULATED"
W_TRANSLATION_ERROR = "NOT_TRANSLATED"
W_NODE_DIFFERS = "NODE_OUTPUT_DIFFERS"
W_INPUTS_DIFFER = "NODE_INPUTS_DIFFER"
W_SHAPE_NOTE = "OUTPUT_SHAPE_DIFFERS_FROM_INFERENCE"
W_EP_REFUSES_MODEL = "ORT_DML_EP_REFUSES_MODEL"
W_EP_FAILS_RUN = "ORT_DML_EP_FAILS_THIS_RUN"


def declared_shape_warnings(
    model: onnx.ModelProto, record: RunRecord, outputs: Mapping[str, Any]
) -> tuple[ValidationWarning, ...]:
    """One warning per graph output of this run whose declared shape real DirectML would fail the run on
    (the run record's ``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE`` note): the verdict compares values
    with onnxruntime CPU, which runs such a model."""
    from ..ort.declared_shapes import declared_shape_contradictions, run_shapes
    from ..translate.ep_declared_shapes import DeclaredOutputs

    declared = DeclaredOutputs(model)
    if declared.empty:
        return ()
    shapes = run_shapes(list(outputs), list(outputs.values()))
    return tuple(
        ValidationWarning(W_EP_FAILS_RUN, c.node, c.message())
        for c in declared_shape_contradictions(declared, record, shapes)
    )


def session_refusal_warnings(refusals: Sequence[tuple[str, str, str]]) -> tuple[ValidationWarning, ...]:
    """One warning per refused node form (``ModelTranslation.session_refusals``): onnxruntime-directml
    fails on the whole model there, whatever the gather/scatter nodes do, as inspect's verdict says."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node, code, form in refusals:
        groups.setdefault((code, form), []).append(node)
    found = []
    for (code, form), nodes in groups.items():
        # The warning names the first node; a form met at several nodes lists them all.
        where = f"{form} ({code})" if len(nodes) == 1 else describe_refusals([(n, code, form) for n in nodes])
        found.append(
            ValidationWarning(
                W_EP_REFUSES_MODEL,
                nodes[0],
                f"onnxruntime-directml fails on the whole model here: {where}; the verdict on the "
                "gather/scatter nodes still holds (docs/directml-linux.md)",
            )
        )
    return tuple(found)


def node_warnings(nodes: Sequence[NodeValidation], level: FeatureLevel) -> list[ValidationWarning]:
    found: list[ValidationWarning] = []
    for n in nodes:
        rec = n.record
        t = n.translation
        ran_as_dml = rec is not None and rec.placement == PLACEMENT_DML
        if t is not None and t.status.value == "error" and not ran_as_dml:
            codes = ", ".join(t.reason_codes) or "unknown"
            found.append(
                ValidationWarning(W_TRANSLATION_ERROR, n.name, f"not translated to DirectML ({codes})")
            )
        if rec is not None:
            found += _record_warnings(n, level)
        if n.ort_placement == CPU_PROVIDER:
            messages = [r.message for r in t.reasons if r.code.startswith("EP_")] if t else []
            if rec is not None:
                messages += [m for c, m in rec.reasons if c == "ort_cpu_preferred" and m not in messages]
            why = "; ".join(messages)
            found.append(
                ValidationWarning(
                    W_EP_CPU, n.name, why or "onnxruntime's DirectML provider would run this node on the CPU"
                )
            )
        if n.attribution == ATTR_DIVERGES:
            found.append(
                ValidationWarning(
                    W_NODE_DIFFERS,
                    n.name,
                    "every input agreed with the reference but this node's output did not: the "
                    "divergence starts here",
                )
            )
        elif n.attribution == ATTR_UPSTREAM:
            differing = ", ".join(name for name, m in n.input_matches if m is False)
            found.append(
                ValidationWarning(
                    W_INPUTS_DIFFER,
                    n.name,
                    f"inputs already differed (upstream): {differing}; this node is not to blame",
                )
            )
    return found


def _record_warnings(n: NodeValidation, level: FeatureLevel) -> list[ValidationWarning]:
    rec = n.record
    assert rec is not None
    found: list[ValidationWarning] = []
    if rec.status == "not_emulated":
        found.append(
            ValidationWarning(
                W_NOT_EMULATED,
                n.name,
                "inside control flow: ran on onnxruntime CPU, not checked against DirectML semantics",
            )
        )
    elif rec.placement != PLACEMENT_DML:
        # Reasons about onnxruntime's DirectML provider get their own warning.
        causes = [(c, m) for c, m in rec.reasons if not c.startswith("EP_")] or list(rec.reasons)
        why = "; ".join(f"{c}: {m}" for c, m in causes) or rec.status
        found.append(ValidationWarning(W_FALLBACK, n.name, f"ran on onnxruntime CPU: {why}"))
    if rec.duplicate_indices:
        found.append(
            ValidationWarning(
                W_DUPLICATES,
                n.name,
                f"{rec.duplicate_indices} scatter writes were overwritten by a later write; on "
                "DirectML duplicate indices are invalid and no write is guaranteed to win",
            )
        )
    if rec.negative_indices and level < FeatureLevel.FL_3_0:
        found.append(
            ValidationWarning(
                W_NEGATIVE,
                n.name,
                f"negative indices seen: DirectML takes them only from DML_FEATURE_LEVEL_3_0 "
                f"(target {level.dml_name}); they were normalised on the host",
            )
        )
    for code, message in rec.notes:
        if code == NOTE_SHAPE_DIFFERS:
            found.append(ValidationWarning(W_SHAPE_NOTE, n.name, message))
    return found
