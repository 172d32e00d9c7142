"""Validate a model before it ships to DirectML: run it through dmlshim and through onnxruntime CPU, compare.

:func:`validate_model` runs the model twice on the same feeds:

* through :class:`dmlshim.InferenceSession` (the partitioned engine: every gather/scatter node that
  DirectML can express executes from its DirectML descriptor, the rest in onnxruntime CPU sessions);
* through a plain onnxruntime CPU session, single-threaded (onnxruntime's ScatterND with a reduction is
  racy on duplicate indices with more than one thread).

Both runs also expose the output of every top-level gather/scatter node, so a difference in a graph output
can be traced to the first gather/scatter node whose own output already differs (the *suspect*), and not
only to the nodes upstream of it.

The report lists, per gather/scatter node, the ``dmlshim inspect`` record plus where the node ran, and
warnings that matter on real DirectML: duplicate scatter indices (DirectML guarantees no winner), negative
indices below DML_FEATURE_LEVEL_3_0, nodes onnxruntime's DirectML provider would run on the CPU, nodes that
fell back, nodes inside control flow that were not emulated.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from .comparison import array_difference
from .dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from .errors import BadInputError, BadModelError, DmlShimError, guard_resources
from .execute.feeds import load_npz
from .execute.record import PLACEMENT_DML, NodeRecord
from .execute.session import InferenceSession, LoadedModel, ModelSource, load_model
from .graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs, walk_nodes
from .inputs import generate_inputs
from .translate import CPU_PROVIDER, NodeTranslation, translate_model

__all__ = [
    "SCHEMA_VERSION",
    "Mismatch",
    "NodeValidation",
    "OutputComparison",
    "ValidationReport",
    "ValidationWarning",
    "compare_arrays",
    "reference_session",
    "validate_model",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Version of the ``dmlshim validate --json`` document."""

# Warning codes.
W_DUPLICATES = "DUPLICATE_SCATTER_INDICES"
W_NEGATIVE = "NEGATIVE_INDICES_BELOW_FL_3_0"
W_EP_CPU = "ORT_DML_EP_RUNS_ON_CPU"
W_FALLBACK = "FALLBACK_TO_CPU"
W_NOT_EMULATED = "NOT_EMULATED"
W_TRANSLATION_ERROR = "NOT_TRANSLATED"
W_NODE_DIFFERS = "NODE_OUTPUT_DIFFERS"


@dataclass(frozen=True)
class Mismatch:
    """The first position where dmlshim and onnxruntime disagree.

    Attributes:
        index: the position (row-major first), empty for a scalar.
        dmlshim: dmlshim's value there.
        onnxruntime: onnxruntime's value there.
    """

    index: tuple[int, ...]
    dmlshim: Any
    onnxruntime: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "index": list(self.index),
            "dmlshim": _scalar(self.dmlshim),
            "onnxruntime": _scalar(self.onnxruntime),
        }


@dataclass(frozen=True)
class Comparison:
    """The result of comparing two arrays (see :func:`compare_arrays`)."""

    match: bool
    max_abs_diff: float | None
    mismatches: int
    first_mismatch: Mismatch | None
    problem: str | None = None


@dataclass(frozen=True)
class OutputComparison:
    """One graph output compared.

    Attributes:
        name: the output name.
        match: the values agree (exactly for integer/bool, within rtol/atol for floats, NaN equal to NaN).
        dtype: dmlshim's dtype.
        shape: dmlshim's shape.
        max_abs_diff: the largest absolute difference (None when the dtypes or shapes differ).
        mismatches: how many elements differ.
        first_mismatch: the first differing element.
        problem: a dtype or shape difference, if any.
        upstream_nodes: the gather/scatter nodes the output depends on.
        suspect_nodes: upstream gather/scatter nodes whose own output differs while none of their own
            upstream gather/scatter nodes' outputs do: where the divergence starts.
    """

    name: str
    match: bool
    dtype: str
    shape: tuple[int, ...]
    max_abs_diff: float | None
    mismatches: int = 0
    first_mismatch: Mismatch | None = None
    problem: str | None = None
    upstream_nodes: tuple[str, ...] = ()
    suspect_nodes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "match": self.match,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "max_abs_diff": _scalar(self.max_abs_diff),
            "mismatches": self.mismatches,
            "first_mismatch": self.first_mismatch.to_json() if self.first_mismatch else None,
            "problem": self.problem,
            "upstream_nodes": list(self.upstream_nodes),
            "suspect_nodes": list(self.suspect_nodes),
        }


@dataclass(frozen=True)
class ValidationWarning:
    """Something that matters on real DirectML.

    Attributes:
        code: a stable code (``DUPLICATE_SCATTER_INDICES``, ``NEGATIVE_INDICES_BELOW_FL_3_0``,
            ``ORT_DML_EP_RUNS_ON_CPU``, ``FALLBACK_TO_CPU``, ``NOT_EMULATED``, ``NOT_TRANSLATED``,
            ``NODE_OUTPUT_DIFFERS``).
        node: the node concerned.
        message: one sentence for people.
    """

    code: str
    node: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "node": self.node, "message": self.message}


@dataclass(frozen=True)
class NodeValidation:
    """One gather/scatter node: its translation, what happened in the run, and its own output compared.

    Attributes:
        name: the node name (``owner/body/name`` inside subgraphs).
        op_type: the op.
        translation: the static translation (the ``dmlshim inspect`` record), None if not translated.
        record: the run record of the node, None if the run did not report it.
        output_match: whether the node's own output agreed with onnxruntime's (None: not compared, e.g.
            inside a subgraph).
    """

    name: str
    op_type: str
    translation: NodeTranslation | None = field(default=None, compare=False)
    record: NodeRecord | None = None
    output_match: bool | None = None

    @property
    def placement(self) -> str | None:
        """``"dml"`` or ``"onnxruntime-cpu"`` in the run."""
        return self.record.placement if self.record else None

    @property
    def ort_placement(self) -> str | None:
        """Where onnxruntime's DirectML provider would run the node."""
        if self.record is not None and self.record.ort_placement:
            return self.record.ort_placement
        return self.translation.ort_placement if self.translation else None

    def to_json(self) -> dict[str, Any]:
        if self.translation is not None:
            doc = self.translation.to_json()
        else:
            doc = {"name": self.name, "op_type": self.op_type, "status": None, "ort_placement": None}
        doc["ort_placement"] = self.ort_placement
        doc["run"] = (
            {
                "placement": self.record.placement,
                "status": self.record.status,
                "operator": self.record.operator,
                "reasons": [{"code": c, "message": m} for c, m in self.record.reasons],
                "duplicate_indices": self.record.duplicate_indices,
                "negative_indices": self.record.negative_indices,
            }
            if self.record is not None
            else None
        )
        doc["placement"] = self.placement
        doc["output_match"] = self.output_match
        return doc


@dataclass(frozen=True)
class ValidationReport:
    """The result of :func:`validate_model`.

    Attributes:
        model: the model file, or ``<in-memory model>``.
        feature_level: the emulated DirectML feature level.
        match: every graph output agreed.
        outputs: one comparison per graph output, in graph order.
        nodes: one entry per gather/scatter node (subgraphs included), in graph order.
        warnings: what matters on real DirectML.
        rtol: relative tolerance used for floating-point outputs.
        atol: absolute tolerance used for floating-point outputs.
        inputs_source: ``"file"``, ``"given"`` or ``"random"``.
        seed: the seed of random inputs, else None.
        input_shapes: the shape of every feed.
    """

    model: str
    feature_level: FeatureLevel
    match: bool
    outputs: tuple[OutputComparison, ...]
    nodes: tuple[NodeValidation, ...]
    warnings: tuple[ValidationWarning, ...]
    rtol: float
    atol: float
    inputs_source: str
    seed: int | None = None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when every output matches, 1 otherwise."""
        return 0 if self.match else 1

    @property
    def mismatched(self) -> tuple[OutputComparison, ...]:
        """The outputs that differ."""
        return tuple(o for o in self.outputs if not o.match)

    def to_json(self) -> dict[str, Any]:
        """The ``dmlshim validate --json`` document (schema_version 1)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "feature_level": self.feature_level.dml_name,
            "match": self.match,
            "rtol": self.rtol,
            "atol": self.atol,
            "inputs": {
                "source": self.inputs_source,
                "seed": self.seed,
                "shapes": {name: list(shape) for name, shape in self.input_shapes},
            },
            "outputs": [o.to_json() for o in self.outputs],
            "nodes": [n.to_json() for n in self.nodes],
            "warnings": [w.to_json() for w in self.warnings],
        }


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def compare_arrays(
    actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0, atol: float = 0.0
) -> Comparison:
    """Compare dmlshim's array with onnxruntime's.

    Integer and bool arrays must be equal; floating-point arrays must satisfy
    ``|actual - expected| <= atol + rtol * |expected|`` with NaN equal to NaN and infinities equal to
    themselves. The dtype and shape must be identical.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.dtype != expected.dtype:
        return Comparison(
            False, None, actual.size, None, f"dtype {actual.dtype}, onnxruntime gives {expected.dtype}"
        )
    if actual.shape != expected.shape:
        return Comparison(
            False,
            None,
            actual.size,
            None,
            f"shape {list(actual.shape)}, onnxruntime gives {list(expected.shape)}",
        )
    d = array_difference(actual, expected, rtol, atol)
    if d.first is None:
        return Comparison(True, d.max_abs_diff, 0, None)
    first = d.first
    mismatch = Mismatch(first, actual[first], expected[first])
    return Comparison(False, d.max_abs_diff, d.mismatches, mismatch)


def reference_session(model: onnx.ModelProto | bytes | str) -> ort.InferenceSession:
    """An onnxruntime CPU session with one intra-op thread (ScatterND is racy on duplicates otherwise)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # our error paragraph is enough; onnxruntime's own line is noise
    payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    try:
        return ort.InferenceSession(payload, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's exception types do not share a useful base
        raise BadModelError(f"onnxruntime cannot load the model: {exc}") from exc


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value a node reads, including what its subgraphs read from the enclosing scope."""
    found = {n for n in node.input if n}
    for _, sub in subgraphs(node):
        produced = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        produced |= {t.name for t in sub.initializer}
        for inner in sub.node:
            found |= _reads(inner) - produced
    return found


@dataclass(frozen=True)
class _Graph:
    """Dependencies between top-level nodes and the gather/scatter nodes each value depends on."""

    upstream: Mapping[str, frozenset[str]]  # value -> the gather/scatter nodes it depends on
    node_upstream: Mapping[str, frozenset[str]]  # gather/scatter node -> those strictly before it
    node_output: Mapping[str, str]  # top-level gather/scatter node -> its output value


def _analyse(graph: onnx.GraphProto) -> _Graph:
    upstream: dict[str, frozenset[str]] = {}
    node_upstream: dict[str, frozenset[str]] = {}
    node_output: dict[str, str] = {}
    for i, node in enumerate(graph.node):
        name = node_path("", node, i)
        before: frozenset[str] = frozenset().union(*(upstream.get(v, frozenset()) for v in _reads(node)))
        mine = set(before)
        if is_gather_scatter(node):
            node_upstream[name] = before
            mine.add(name)
            if node.output and node.output[0]:
                node_output[name] = node.output[0]
        for sub_name, sub_node in _walk_subgraphs(node, name):
            if is_gather_scatter(sub_node):
                node_upstream.setdefault(sub_name, before)
                mine.add(sub_name)
        for out in node.output:
            if out:
                upstream[out] = frozenset(mine)
    return _Graph(upstream, node_upstream, node_output)


def _walk_subgraphs(node: onnx.NodeProto, name: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    for attr_name, sub in subgraphs(node):
        yield from walk_nodes(sub, subgraph_prefix(name, attr_name))


def _exposed(model: onnx.ModelProto, extra: Sequence[str]) -> onnx.ModelProto:
    """A copy of the model with ``extra`` values added as graph outputs (types left to inference)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for name in extra:
        copy.graph.output.append(onnx.ValueInfoProto(name=name))
    return copy


def _single_threaded() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # our error paragraph is enough; onnxruntime's own line is noise
    return so


def _feeds(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
) -> tuple[dict[str, np.ndarray], str]:
    if inputs is None:
        return generate_inputs(loaded, input_shapes=input_shapes, seed=seed), "random"
    if isinstance(inputs, (str, os.PathLike)):
        return load_npz(os.fspath(inputs)), "file"
    return {k: np.asarray(v) for k, v in inputs.items()}, "given"


def _warnings(nodes: Sequence[NodeValidation], level: FeatureLevel) -> list[ValidationWarning]:
    found: list[ValidationWarning] = []
    for n in nodes:
        rec = n.record
        t = n.translation
        if t is not None and t.status.value == "error":
            codes = ", ".join(t.reason_codes) or "unknown"
            found.append(
                ValidationWarning(W_TRANSLATION_ERROR, n.name, f"not translated to DirectML ({codes})")
            )
        if rec is not None:
            if rec.status == "not_emulated":
                found.append(
                    ValidationWarning(
                        W_NOT_EMULATED,
                        n.name,
                        "inside control flow: ran on onnxruntime CPU, not checked against DirectML semantics",
                    )
                )
            elif rec.placement != PLACEMENT_DML:
                # Reasons about onnxruntime's DirectML provider get their own warning below.
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
        if n.ort_placement == CPU_PROVIDER:
            messages = [r.message for r in t.reasons if r.code.startswith("EP_")] if t else []
            if rec is not None:
                messages += [m for c, m in rec.reasons if c == "ort_cpu_preferred"]
            why = "; ".join(messages)
            found.append(
                ValidationWarning(
                    W_EP_CPU, n.name, why or "onnxruntime's DirectML provider would run this node on the CPU"
                )
            )
        if n.output_match is False:
            found.append(
                ValidationWarning(W_NODE_DIFFERS, n.name, "this node's own output differs from onnxruntime's")
            )
    return found


@guard_resources("validating the model")
def validate_model(
    model: ModelSource,
    *,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None = None,
    feature_level: FeatureLevel | str = DEFAULT_FEATURE_LEVEL,
    rtol: float = 0.0,
    atol: float = 0.0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    index_mode: str = "error",
) -> ValidationReport:
    """Run a model through dmlshim and onnxruntime CPU on the same feeds and compare every graph output.

    Args:
        model: a model path, serialized bytes or ``ModelProto``.
        inputs: feeds by name, an ``.npz`` path, or None for random inputs (:mod:`dmlshim.inputs`).
        feature_level: the DirectML feature level to emulate.
        rtol: relative tolerance for floating-point outputs (integer and bool outputs compare exactly).
        atol: absolute tolerance for floating-point outputs.
        input_shapes: shapes of inputs with symbolic dims (input name -> shape, or dim name -> size), for
            random inputs.
        seed: the seed of random inputs.
        index_mode: dmlshim's out-of-range policy (``"error"`` or ``"clamp"``).

    Returns:
        The report; ``report.match`` says whether every output agreed.

    Raises:
        BadModelError: the model cannot be read, or onnxruntime cannot load it.
        BadInputError: the feeds do not fit the model, or onnxruntime rejects them (e.g. an index out of
            range), or inputs cannot be generated.
        DmlShimError: dmlshim refused the run (e.g. ``IndexOutOfRangeError`` from an emulated node).
    """
    level = feature_level if isinstance(feature_level, FeatureLevel) else _level(feature_level)
    loaded = load_model(model)
    try:
        return _validate_loaded(loaded, inputs, level, rtol, atol, input_shapes, seed, index_mode)
    except DmlShimError as exc:
        # The sessions run a modified copy of the model, so errors raised there do not know the file.
        if exc.path is None and loaded.path is not None:
            exc.path = str(loaded.path)
        raise


def _validate_loaded(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None,
    level: FeatureLevel,
    rtol: float,
    atol: float,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
    index_mode: str,
) -> ValidationReport:
    proto = loaded.proto
    feeds, source = _feeds(loaded, inputs, input_shapes, seed)
    analysis = _analyse(proto.graph)
    graph_outputs = [o.name for o in proto.graph.output]
    probes = [v for v in analysis.node_output.values() if v not in set(graph_outputs)]
    probed = _exposed(proto, probes)
    wanted = graph_outputs + probes

    session = InferenceSession(
        probed,
        _single_threaded(),
        feature_level=level,
        engine="partitioned",
        index_mode=index_mode,
    )
    ours = session.run(wanted, feeds)
    record = session.last_run_record
    try:
        theirs = reference_session(probed).run(wanted, feeds)
    except DmlShimError:
        raise
    except Exception as exc:  # onnxruntime's exception types do not share a useful base
        raise BadInputError(f"onnxruntime CPU failed on these inputs: {exc}") from exc
    ours_by_name = dict(zip(wanted, ours, strict=True))
    theirs_by_name = dict(zip(wanted, theirs, strict=True))

    node_match: dict[str, bool] = {}
    for node_name, value in analysis.node_output.items():
        node_match[node_name] = compare_arrays(ours_by_name[value], theirs_by_name[value], rtol, atol).match

    shapes = {k: tuple(int(d) for d in np.shape(v)) for k, v in feeds.items()}
    try:
        translation = translate_model(
            proto, level, {k: v for k, v in shapes.items() if k in _input_names(proto)}
        )
        translations = {t.name: t for t in translation.nodes}
    except DmlShimError as exc:
        logger.warning("static translation failed (%s): node records carry the run only", exc)
        translations = {}
    records = {r.name: r for r in (record.nodes if record is not None else ())}
    nodes = tuple(
        NodeValidation(name, node.op_type, translations.get(name), records.get(name), node_match.get(name))
        for name, node in walk_nodes(proto.graph)
        if is_gather_scatter(node)
    )

    outputs: list[OutputComparison] = []
    for name in graph_outputs:
        got, want = np.asarray(ours_by_name[name]), np.asarray(theirs_by_name[name])
        c = compare_arrays(got, want, rtol, atol)
        upstream = analysis.upstream.get(name, frozenset())
        order = [n.name for n in nodes if n.name in upstream]
        suspects: tuple[str, ...] = ()
        if not c.match:
            suspects = tuple(
                n
                for n in order
                if node_match.get(n) is False
                and not any(node_match.get(u) is False for u in analysis.node_upstream.get(n, frozenset()))
            )
        outputs.append(
            OutputComparison(
                name=name,
                match=c.match,
                dtype=str(got.dtype),
                shape=tuple(got.shape),
                max_abs_diff=c.max_abs_diff,
                mismatches=c.mismatches,
                first_mismatch=c.first_mismatch,
                problem=c.problem,
                upstream_nodes=tuple(order),
                suspect_nodes=suspects,
            )
        )
    report = ValidationReport(
        model=loaded.path or "<in-memory model>",
        feature_level=level,
        match=all(o.match for o in outputs),
        outputs=tuple(outputs),
        nodes=nodes,
        warnings=tuple(_warnings(nodes, level)),
        rtol=rtol,
        atol=atol,
        inputs_source=source,
        seed=seed if source == "random" else None,
        input_shapes=tuple(shapes.items()),
    )
    logger.info("validate %s at %s: %s", report.model, level.short, "match" if report.match else "MISMATCH")
    return report


def _input_names(proto: onnx.ModelProto) -> set[str]:
    init = {t.name for t in proto.graph.initializer}
    return {v.name for v in proto.graph.input if v.name not in init}


def _level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except ValueError as exc:
        raise BadInputError(str(exc), value=text) from exc
