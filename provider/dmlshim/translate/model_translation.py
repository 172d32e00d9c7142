"""Translate every gather/scatter node of a model, subgraphs included, and count the results.

``translate_model`` runs ONNX shape inference once and translates every Gather, GatherElements, GatherND,
Scatter, ScatterElements and ScatterND node, including those inside If/Loop/Scan bodies, naming each with
its path (``loop_node/body/scatter_1``). Nodes that differ only in their tensor names (a chain of 100,000
Gathers) are lowered once and the translation is renamed for the others.
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..graph import GATHER_SCATTER_OPS, node_path, subgraph_prefix, subgraphs
from ..model.prepare import prepare_model
from ..resources import guard_resources
from .converters import get_converter
from .ep_refusals import session_refusals
from .graph_infos import _GraphInfos, _RunInfos
from .ort_apply import apply_optimized_away
from .ort_fold_gate import nothing_folds
from .placement import CPU_PREFERRED_MESSAGE, REASON_CPU_PREFERRED, graph_placements
from .plan import (
    CPU_PROVIDER,
    DML_PROVIDER,
    NodeTranslation,
    Reason,
    Status,
    TensorInfo,
    replace_translation,
)
from .run_cases import Execution, RunCase, translate_executions
from .shapes_info import infer_shapes
from .subgraph_shapes import unknown_rank_origins
from .translator import is_ep_reason, model_opsets, translate_node

logger = logging.getLogger(__name__)

__all__ = ["ModelTranslation", "translate_model"]


@dataclass(frozen=True)
class ModelTranslation:
    """Every gather/scatter node of a model, translated at one feature level.

    Attributes:
        feature_level: the target level.
        nodes: the translations, in graph order (subgraph nodes after their parent node).
        total_nodes: the number of nodes in the model, subgraphs included.
        opset: the model's ai.onnx opset.
        session_refusals: ``(node name, code, form)`` for each node, of any op type, in a form
            onnxruntime-directml refuses at session creation (``dmlshim.translate.ep_refusals``): its
            session fails whatever the gather/scatter nodes are.
        run_cases: for the body nodes translated at the shapes a run gave them (``run_executions`` of
            :func:`translate_model`), each distinct set of input shapes with its verdict; the node's
            translation is the worst of them.
    """

    feature_level: FeatureLevel
    nodes: tuple[NodeTranslation, ...]
    total_nodes: int
    opset: int
    session_refusals: tuple[tuple[str, str, str], ...] = ()
    run_cases: Mapping[str, tuple[RunCase, ...]] = field(default_factory=dict, compare=False)

    @functools.cached_property
    def summary(self) -> dict[str, Any]:
        """Counts: nodes by status and placement; one counter per reason code of the nodes not run as
        DirectML (``reasons``), of notes on translated nodes (``notes``) and of why onnxruntime's DirectML
        provider would place nodes on the CPU or reject them (``ort_reasons``, codes ``EP_*``). The two
        questions of the verdict: ``all_dml`` (every node translates to a DirectML operator; the exit
        code) and ``all_on_dml_ep`` (onnxruntime-directml places every node on DmlExecutionProvider)."""
        status: collections.Counter[str] = collections.Counter()
        placement: collections.Counter[str] = collections.Counter()
        reasons: collections.Counter[str] = collections.Counter()
        notes: collections.Counter[str] = collections.Counter()
        ep: collections.Counter[str] = collections.Counter()
        levels: list[FeatureLevel] = []
        for n, count in _alike(self.nodes):
            status[n.status.value] += count
            placement[n.ort_placement or "none"] += count
            for r in n.reasons:
                (ep if is_ep_reason(r) else notes if n.ok else reasons)[r.code] += count
            if n.min_feature_level is not None:
                levels.append(n.min_feature_level)
        return {
            "total_nodes": self.total_nodes,
            "gather_scatter_nodes": len(self.nodes),
            "dml": status.get("dml", 0),
            "fallback": status.get("fallback", 0),
            "error": status.get("error", 0),
            "ort_placement": {
                "DmlExecutionProvider": placement.get(DML_PROVIDER, 0),
                "CPUExecutionProvider": placement.get("CPUExecutionProvider", 0),
                "none": placement.get("none", 0),
            },
            "reasons": dict(sorted(reasons.items())),
            "notes": dict(sorted(notes.items())),
            "ort_reasons": dict(sorted(ep.items())),
            "min_feature_level": max(levels).dml_name if levels else None,
            "all_dml": all(n.ok for n in self.nodes),
            # The second question (where onnxruntime-directml runs them), apart from the first (all_dml).
            "all_on_dml_ep": placement.get(DML_PROVIDER, 0) == len(self.nodes) and not self.session_refusals,
            "session_refusals": [{"node": n, "code": c, "form": f} for n, c, f in self.session_refusals],
        }

    def to_json(self, *, plan: bool = True) -> dict[str, Any]:
        """The ``dmlshim inspect --json`` document (schema_version 1)."""
        return {
            "schema_version": 1,
            "feature_level": self.feature_level.dml_name,
            "nodes": [n.to_json(plan=plan) for n in self.nodes],
            "summary": self.summary,
        }


def _alike(nodes: Sequence[NodeTranslation]) -> list[tuple[NodeTranslation, int]]:
    """The nodes grouped by what the summary reads (status, placement, reasons, feature level), one of each
    group with its count. Nodes renamed from one translation (``_renamed``) hold the very same objects for
    these fields, so they are grouped by identity, without comparing reasons node by node."""
    groups: dict[tuple[object, object, int, int], list[Any]] = {}
    for n in nodes:
        fields = n.__dict__
        level = fields["_min_feature_level"]
        key = (fields["status"], fields["ort_placement"], id(fields["reasons"]), id(level))
        group = groups.get(key)
        if group is None:
            groups[key] = [n, 1]
        else:
            group[1] += 1
    return [(n, count) for n, count in groups.values()]


_UNREAD: Any = object()


def _walk(
    graph: onnx.GraphProto, prefix: str, local: _GraphInfos, scopes: dict[str, _GraphInfos]
) -> Iterator[tuple[onnx.NodeProto, str, Mapping[str, TensorInfo], int]]:
    """Every node with its graph's path prefix (its name is ``node_path(prefix, node, index)``, spelled
    by the caller for the nodes it keeps: most nodes of a large graph are no gather/scatter), the type
    scope it sees and its index in its own graph (``scopes`` gets the scope of every graph by its prefix)."""
    scopes[prefix] = local
    for index, node in enumerate(graph.node):
        yield node, prefix, local, index
        for attr_name, sub in subgraphs(node):
            name = node_path(prefix, node, index)
            yield from _walk(sub, subgraph_prefix(name, attr_name), _GraphInfos(sub, local), scopes)


def _structure_key(
    node: onnx.NodeProto, domain: str, opset: int, infos: tuple[TensorInfo | None, ...]
) -> tuple[Any, ...]:
    """What translating ``node`` reads besides its names: nodes with equal keys translate alike."""
    # The attributes as their bytes: equal bytes are equal attributes (about half the cost of decoding).
    attrs = tuple([a.SerializeToString() for a in node.attribute])
    return (domain, node.op_type, opset, attrs, infos, tuple([bool(i) for i in node.input]))


@guard_resources("translating the model")
def translate_model(
    model: onnx.ModelProto,
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    symbolic: bool = True,
    other_domains: bool = False,
    value_shapes: Mapping[str, Sequence[int]] | None = None,
    run_executions: Mapping[str, Sequence[Execution]] | None = None,
    inferred: onnx.ModelProto | None = None,
    prepared: bool = False,
    optimized: bool = False,
    overridden: bool = False,
) -> ModelTranslation:
    """Translate every gather/scatter node of a model, subgraphs included.

    Args:
        model: the model (not modified); its local functions are expanded and its nodes sorted first, as
            onnxruntime does (:func:`dmlshim.model.prepare.prepare_model`).
        feature_level: the target DirectML feature level.
        input_shapes: concrete shapes for graph inputs, replacing symbolic or unknown dims before shape
            inference (the ``--input-shape`` option).
        symbolic: translate nodes with symbolic sizes from their ranks and types (see
            :func:`translate_node`); their descriptors are descriptions, not something to run.
        other_domains: also list nodes of other domains named like the six ops (``com.microsoft``
            GatherND), status ``fallback`` on ``CPUExecutionProvider`` with reason ``DOMAIN_NOT_ONNX``
            (``dmlshim inspect`` lists them; the engines leave them to onnxruntime).
        value_shapes: shapes a run gave to values of the top-level graph (``dmlshim inspect --inputs``):
            the nodes reading them are translated at those shapes, whatever inference says.
        run_executions: for nodes inside control-flow bodies (by path name), the shapes a run gave their
            inputs at each execution (:mod:`dmlshim.translate.run_cases`): each distinct set is
            translated and the worst verdict kept (``run_cases`` of the result).
        inferred: ``infer_shapes(model)`` when the caller has it already (a session's engine), so that
            shape inference and data propagation do not run twice; not modified. Ignored with
            ``input_shapes``, or when ``model`` is not prepared yet.
        prepared: ``model`` is what :func:`dmlshim.model.prepare.prepare_model` returned, unchanged since
            (the model a load gave): it is not walked again to find that out.
        optimized: report for a session with graph optimizations on (onnxruntime's default): the
            top-level nodes its constant folding removes before placing nodes
            (:mod:`dmlshim.translate.ort_folding`) are placed on no provider but computed on the CPU at
            session creation, with reason ``EP_OPTIMIZED_AWAY`` (``dmlshim inspect``), inside If/Loop/Scan
            bodies too (:mod:`dmlshim.translate.ort_subgraph_folding`).
        overridden: with ``optimized``, the sizes ``input_shapes`` and the model's graph inputs fix are
            a session's free-dimension overrides (``inspect --input-shape``): they decide when a Shape
            inside an If of constant condition is folded.

    Returns:
        The translations and counts; nodes whose shapes stay unknown have status ``error`` with reason
        ``SHAPE_UNKNOWN``.

    Raises:
        BadInputError: ``input_shapes`` names a tensor that is not a graph input or has the wrong rank.
        BadModelError: shape inference fails on the model.
    """
    fl = FeatureLevel(feature_level)
    # local functions expanded, nodes sorted (a no-op for loaded models)
    ready = model if prepared else prepare_model(model)
    if inferred is None or input_shapes or ready is not model:
        inferred = infer_shapes(ready, input_shapes)
    model = ready
    opsets = model_opsets(inferred)
    translations: list[NodeTranslation] = []
    top_level: dict[int, int] = {}  # node index in the top-level graph -> position in translations
    bodies: dict[tuple[str, int], int] = {}  # (body path prefix, index in the body) -> the same
    total = 0
    debug = logger.isEnabledFor(logging.DEBUG)
    top = _RunInfos(inferred.graph, value_shapes) if value_shapes else _GraphInfos(inferred.graph, {})
    # Nodes that differ only in tensor names share one lowering (None: the reasons quote a name).
    templates: dict[tuple[Any, ...], NodeTranslation | None] = {}
    scopes: dict[str, _GraphInfos] = {}
    unknown: list[tuple[int, str]] = []  # translations of SHAPE_UNKNOWN, with their graph's path prefix
    run_cases: dict[str, tuple[RunCase, ...]] = {}
    for node, prefix, scope, index in _walk(inferred.graph, "", top, scopes):
        total += 1
        domain = "" if node.domain == "ai.onnx" else node.domain
        if get_converter(domain, node.op_type) is None:
            if other_domains and domain and node.op_type in GATHER_SCATTER_OPS:
                name = node_path(prefix, node, index)
                if scope is top:
                    top_level[index] = len(translations)
                else:
                    bodies[(prefix, index)] = len(translations)
                translations.append(_other_domain(node, name, domain, opsets.get(domain, 0), fl))
            continue
        name = node_path(prefix, node, index)
        names = node.input
        get = scope.get
        infos = tuple([get(i) if i else None for i in names])
        opset = opsets.get(domain, 0)
        if scope is top:
            top_level[index] = len(translations)
        else:
            bodies[(prefix, index)] = len(translations)
        key = _structure_key(node, domain, opset, infos)
        template = templates.get(key, _UNREAD)
        ran = _at_run(node, name, opset, fl, symbolic, scope, run_executions) if run_executions else None
        if ran is not None:
            t, run_cases[name] = ran
            shape_unknown = "SHAPE_UNKNOWN" in t.reason_codes
        elif template is _UNREAD or template is None:
            t = translate_node(node, opset, infos, fl, name=name, symbolic=symbolic)
            shape_unknown = "SHAPE_UNKNOWN" in t.reason_codes
            if template is _UNREAD:
                templates[key] = None if _quotes_names(t, node) else t
        else:
            t = _renamed(template, name, node)
            shape_unknown = "SHAPE_UNKNOWN" in template.reason_codes if template.reasons else False
        translations.append(t)
        if shape_unknown:
            unknown.append((len(translations) - 1, prefix))
        if debug:
            logger.debug("%s: %s", name, t.status.value)
    if unknown:
        _explain_unknown(inferred, scopes, unknown, translations)
    # The graph as given: in the inferred copy large initializers are graph inputs (no weight bytes).
    _apply_graph_placement(model.graph, top, top_level, translations)
    if optimized and (top_level or bodies) and not nothing_folds(model.graph):
        # one onnx inference per round, on a model without weights (the first inference's shapes kept)
        scope_infos = {p: s.get for p, s in scopes.items() if p}
        apply_optimized_away(
            model, top.get, top_level, translations, _reinfer, bodies, scope_infos, overridden
        )
    refusals = tuple((name, r.code, f"{r.form}; fails at {r.when}") for name, r in session_refusals(model))
    return ModelTranslation(fl, tuple(translations), total, opsets.get("", 0), refusals, run_cases)


def _at_run(
    node: onnx.NodeProto,
    name: str,
    opset: int,
    fl: FeatureLevel,
    symbolic: bool,
    scope: Mapping[str, TensorInfo],
    run_executions: Mapping[str, Sequence[Execution]],
) -> tuple[NodeTranslation, tuple[RunCase, ...]] | None:
    """The worst translation of a body node over the shapes a run gave it, or None (no run shapes)."""
    executions = run_executions.get(name)
    if not executions:
        return None
    return translate_executions(
        node,
        executions,
        scope.get,
        lambda infos: translate_node(node, opset, infos, fl, name=name, symbolic=symbolic),
    )


def _explain_unknown(
    inferred: onnx.ModelProto,
    scopes: Mapping[str, _GraphInfos],
    unknown: Sequence[tuple[int, str]],
    translations: list[NodeTranslation],
) -> None:
    """Say in each ``SHAPE_UNKNOWN`` reason about an input of unknown rank where that rank is lost: an If
    whose branches disagree, a loop-carried value whose rank changes, or the op ONNX cannot infer."""
    origin = unknown_rank_origins(inferred, lambda prefix, name: scopes[prefix].get(name))
    for position, prefix in unknown:
        t = translations[position]
        reasons = []
        for r in t.reasons:
            lost_rank = "is not known statically;" in r.message
            if r.code == "SHAPE_UNKNOWN" and isinstance(r.value, str) and lost_rank:
                found = origin(prefix, r.value)
                if found is not None:
                    head = r.message.split("is not known statically;", 1)[0]
                    r = Reason(r.code, f"{head}is not known statically ({found.message}); {found.advice}",
                               r.value)  # fmt: skip
            reasons.append(r)
        translations[position] = _copy(t, reasons=tuple(reasons))


def _other_domain(
    node: onnx.NodeProto, name: str, domain: str, opset: int, fl: FeatureLevel
) -> NodeTranslation:
    """A node of another domain named like one of the six ops: not the ONNX operator, so not translated;
    onnxruntime runs it with that domain's kernel, which onnxruntime's DirectML provider does not register."""
    qualified = f"{domain}:{node.op_type}"
    return NodeTranslation(
        name=name,
        op_type=node.op_type,
        domain=domain,
        since_version=opset,
        feature_level=fl,
        status=Status.FALLBACK,
        operator=None,
        ort_placement=CPU_PROVIDER,
        reasons=(
            Reason(
                "DOMAIN_NOT_ONNX",
                f"{qualified} is not the ONNX operator {node.op_type} (domain {domain!r}); dmlshim "
                "translates only the ai.onnx operators, and onnxruntime runs this node on the CPU with its "
                "own kernel",
                domain,
            ),
            Reason(
                "EP_NOT_REGISTERED",
                f"onnxruntime's DirectML provider registers no kernel for {qualified}; it runs on the CPU "
                "provider",
            ),
        ),
        min_feature_level=None,
    )


def _quotes_names(t: NodeTranslation, node: onnx.NodeProto) -> bool:
    """Whether a translation's reasons mention the node's tensor names (then it cannot be shared)."""
    # A message quotes a name as repr() spells it ('a\\b' for a\b): look for that spelling too.
    forms = {f for n in (*node.input, *node.output) if n for f in (n, repr(n)[1:-1])}
    return any(f in r.message or f in repr(r.value) for r in t.reasons for f in forms)


def _copy(obj: Any, **changes: Any) -> Any:
    """A shallow copy of a frozen plan object with some fields changed (no checks: same class, same
    fields, so the copy is what the class would build)."""
    out = object.__new__(type(obj))
    out.__dict__.update(obj.__dict__, **changes)
    return out


def _with(obj: Any, key: str, value: Any) -> Any:
    """``_copy(obj, key=value)`` for one field, with fewer steps (run per binding of every renamed node)."""
    fields = obj.__dict__.copy()
    fields[key] = value
    out = object.__new__(type(obj))
    object.__setattr__(out, "__dict__", fields)
    return out


def _renamed(t: NodeTranslation, name: str, node: onnx.NodeProto) -> NodeTranslation:
    """``t`` for another node of the same structure: its name and its tensor names in the bindings."""
    names = node.input
    # a binding of a tensor both nodes read (the chain's shared indices) is the template's own (frozen)
    inputs = tuple([
        b if b.onnx_name == names[b.onnx_index] else _with(b, "onnx_name", names[b.onnx_index])
        for b in t.inputs
    ])  # fmt: skip
    output = t.output
    if output is not None and output.onnx_name != node.output[0]:
        output = _with(output, "onnx_name", node.output[0])
    return _copy(t, name=name, inputs=inputs, output=output)


def _apply_graph_placement(
    graph: onnx.GraphProto,
    infos: _GraphInfos,
    top_level: Mapping[int, int],
    translations: list[NodeTranslation],
) -> None:
    """Give the nodes onnxruntime moves to the CPU as shape computations that placement (and reason)."""
    if not top_level:
        return

    def elem_type(name: str) -> int:
        info = infos.get(name)
        return info.elem_type if info is not None else 0

    moved = graph_placements(graph, {i: translations[p] for i, p in top_level.items()}, elem_type)
    for i in moved:
        t = translations[top_level[i]]
        reasons = tuple(r for r in t.reasons if not is_ep_reason(r))
        translations[top_level[i]] = replace_translation(
            t,
            ort_placement=CPU_PROVIDER,
            reasons=(*reasons, Reason(REASON_CPU_PREFERRED, CPU_PREFERRED_MESSAGE)),
        )


def _reinfer(model: onnx.ModelProto) -> Any:
    """The shapes onnx's inference (with data propagation) gives ``model``: a function of a value's name."""
    return _GraphInfos(onnx.shape_inference.infer_shapes(model, data_prop=True).graph, {}).get
