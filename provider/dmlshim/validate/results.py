"""What ``dmlshim validate`` finds, as frozen objects: per output, per gather/scatter node, the warnings and
the whole report. The text and JSON reports (:mod:`dmlshim.report.validate_report`) render these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dml.enums import FeatureLevel
from ..execute.record import NodeRecord
from ..translate import NodeTranslation

SCHEMA_VERSION = 2
"""Version of the ``dmlshim validate --json`` document (2: the verdict compares with the like-for-like
reference; the whole-model comparison, node attribution and optimisation levels were added; ``runs``
was added later, a field more within version 2)."""

# How the sides of a validation were run (``ValidationReport.runs``).
RUNS_ONE = "one-run-checked"
"""One onnxruntime run of the whole model (optimisation disabled) with every emulated node's kernel run on
the inputs onnxruntime computed and reproducing its output bit for bit: dmlshim's run, the reference and
the whole model are the same values."""
RUNS_THREE = "three-runs"
"""dmlshim's run, the like-for-like reference and the whole model run apart."""
RUNS_ENGINE = "engine-and-whole-model"
"""An engine other than the partitioned one (``--engine``) and onnxruntime's whole-model run, which is
its like-for-like reference."""

# Attribution of a gather/scatter node (dmlshim's run against the like-for-like reference).
ATTR_MATCH = "match"
"""Inputs and output agree."""
ATTR_DIVERGES = "diverges_here"
"""Every input agreed and the output did not: this node computed something else."""
ATTR_UPSTREAM = "inputs_differed"
"""Some input already differed (upstream); what the node did with it is not to blame."""
ATTR_UNOBSERVED = "output_differs_inputs_unobserved"
"""The output differs but some input was not observed, so where it started cannot be told."""
ATTR_NOT_COMPARED = "not_compared"
"""The node ran inside an onnxruntime session on both sides (a CPU placement or control flow): its values
were not observed, and both sides computed them the same way."""

# Why a graph output differs from the whole-model onnxruntime run.
CAUSE_IDENTICAL = "identical"
CAUSE_OTHER_NODES = "other_nodes"
"""Only through non-gather/scatter nodes: onnxruntime computed them differently when the model was cut
into partitions (fusions across a boundary, fp16 cast pairs kept or dropped)."""
CAUSE_GATHER_SCATTER = "gather_scatter"
"""Through a gather/scatter node: dmlshim's run differs from the like-for-like reference too."""
CAUSE_UNEXPLAINED = "unexplained"
"""dmlshim's run differs from the like-for-like reference, but no gather/scatter node whose inputs agreed
produced another output (a node drawing random values, such as Dropout in training mode, does that)."""


def json_scalar(value: Any) -> Any:
    """A numpy or Python scalar as JSON can hold it (non-finite floats and bytes as text)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


@dataclass(frozen=True)
class Mismatch:
    """The first position where two runs disagree.

    Attributes:
        index: the position (row-major first), empty for a scalar.
        dmlshim: dmlshim's value there.
        onnxruntime: the reference's value there.
    """

    index: tuple[int, ...]
    dmlshim: Any
    onnxruntime: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "index": list(self.index),
            "dmlshim": json_scalar(self.dmlshim),
            "onnxruntime": json_scalar(self.onnxruntime),
        }


@dataclass(frozen=True)
class Comparison:
    """The result of comparing two arrays (see :func:`dmlshim.validate.compare_arrays`)."""

    match: bool
    max_abs_diff: float | None
    mismatches: int
    first_mismatch: Mismatch | None
    problem: str | None = None


@dataclass(frozen=True)
class WholeModelComparison:
    """One graph output of dmlshim's run against onnxruntime running the whole model (information only).

    Attributes:
        rtol: relative tolerance used (from the dtype, :data:`dmlshim.comparison.DTYPE_TOLERANCE`).
        atol: absolute tolerance used.
        identical: bit-for-bit equal (NaN equal to NaN).
        within_tolerance: equal within (rtol, atol).
        max_abs_diff: the largest absolute difference (None when dtype or shape differ).
        mismatches: elements outside the tolerance.
        first_mismatch: the first of them.
        problem: a dtype or shape difference.
        cause: ``identical``, ``other_nodes`` or ``gather_scatter`` (see the CAUSE_ constants).
        onnxruntime: onnxruntime's array.
    """

    rtol: float
    atol: float
    identical: bool
    within_tolerance: bool
    max_abs_diff: float | None
    mismatches: int
    first_mismatch: Mismatch | None
    problem: str | None
    cause: str
    onnxruntime: np.ndarray | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "rtol": self.rtol,
            "atol": self.atol,
            "identical": self.identical,
            "within_tolerance": self.within_tolerance,
            "max_abs_diff": json_scalar(self.max_abs_diff),
            "mismatches": self.mismatches,
            "first_mismatch": self.first_mismatch.to_json() if self.first_mismatch else None,
            "problem": self.problem,
            "cause": self.cause,
        }


@dataclass(frozen=True)
class OutputComparison:
    """One graph output: dmlshim's run against the like-for-like reference (this decides the verdict).

    Attributes:
        name: the output name.
        match: the values agree (exactly, unless a tolerance was given).
        dtype: dmlshim's dtype.
        shape: dmlshim's shape.
        max_abs_diff: the largest absolute difference (None when the dtypes or shapes differ).
        mismatches: how many elements differ.
        first_mismatch: the first differing element.
        problem: a dtype or shape difference, if any.
        upstream_nodes: the gather/scatter nodes the output depends on.
        suspect_nodes: upstream gather/scatter nodes whose inputs agreed and whose output did not: where
            the divergence starts.
        whole_model: the same output against onnxruntime running the whole model (None when that run
            failed).
        statistics: error figures against the like-for-like reference (:mod:`.statistics`), when
            computed.
        external: the output against a reference outputs file (``--reference-outputs``), when given.
        dmlshim: dmlshim's array.
        reference: the like-for-like reference's array.
        dmlshim_bits: for a bfloat16 or float8 output (whose ``dmlshim`` holds its values decoded to
            float32), its raw bits as unsigned integers of its width: what ``--save-outputs`` writes.
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
    whole_model: WholeModelComparison | None = None
    statistics: Any = None
    external: Any = None
    dmlshim: np.ndarray | None = field(default=None, compare=False, repr=False)
    reference: np.ndarray | None = field(default=None, compare=False, repr=False)
    dmlshim_bits: np.ndarray | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "match": self.match,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "max_abs_diff": json_scalar(self.max_abs_diff),
            "mismatches": self.mismatches,
            "first_mismatch": self.first_mismatch.to_json() if self.first_mismatch else None,
            "problem": self.problem,
            "upstream_nodes": list(self.upstream_nodes),
            "suspect_nodes": list(self.suspect_nodes),
            "whole_model": self.whole_model.to_json() if self.whole_model else None,
            "statistics": self.statistics.to_json() if self.statistics is not None else None,
            "reference_outputs": self.external.to_json() if self.external is not None else None,
        }


@dataclass(frozen=True)
class ValidationWarning:
    """Something that matters on real DirectML, or for reading the verdict.

    Attributes:
        code: a stable code (``DUPLICATE_SCATTER_INDICES``, ``NEGATIVE_INDICES_BELOW_FL_3_0``,
            ``ORT_DML_EP_RUNS_ON_CPU``, ``FALLBACK_TO_CPU``, ``NOT_EMULATED``, ``NOT_TRANSLATED``,
            ``NODE_OUTPUT_DIFFERS``, ``NODE_INPUTS_DIFFER``, ``OUTPUT_SHAPE_DIFFERS_FROM_INFERENCE``,
            ``ORT_DML_EP_REFUSES_MODEL``, ``ORT_DML_EP_FAILS_THIS_RUN``, ``RANDOM_NODE``).
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
    """One gather/scatter node: its translation, what happened in the run, and its values compared.

    Attributes:
        name: the node name (``owner/body/name`` inside subgraphs).
        op_type: the op.
        translation: the static translation (the ``dmlshim inspect`` record), None if not translated.
        record: the run record of the node, None if the run did not report it.
        output_match: whether the node's output agreed with the like-for-like reference (None: not
            observed, e.g. inside a CPU segment or a subgraph).
        input_matches: ``(input name, agreed)`` per non-empty input (None: not observed).
    """

    name: str
    op_type: str
    translation: NodeTranslation | None = field(default=None, compare=False)
    record: NodeRecord | None = None
    output_match: bool | None = None
    input_matches: tuple[tuple[str, bool | None], ...] = ()

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

    @property
    def inputs_match(self) -> bool | None:
        """False when some input differed, True when every input was observed and agreed, else None."""
        seen = [m for _, m in self.input_matches]
        if any(m is False for m in seen):
            return False
        if seen and all(m is True for m in seen):
            return True
        return None

    @property
    def attribution(self) -> str:
        """One of the ATTR_ constants."""
        inputs = self.inputs_match
        if inputs is False:
            return ATTR_UPSTREAM
        if self.output_match is None:
            return ATTR_NOT_COMPARED
        if self.output_match:
            return ATTR_MATCH
        return ATTR_DIVERGES if inputs else ATTR_UNOBSERVED

    def to_json(self) -> dict[str, Any]:
        if self.translation is not None:
            doc = self.translation.to_json()
        else:
            doc = {"name": self.name, "op_type": self.op_type, "status": None, "ort_placement": None}
        doc["ort_placement"] = self.ort_placement
        rec = self.record
        if rec is not None and rec.status in ("dml", "fallback", "error") and doc.get("status") != rec.status:
            # The static translation (from the graph's shapes) could not decide what the run, with real
            # shapes, did: the status is the run's; the static answer stays beside it.
            doc["static_status"] = doc.get("status")
            doc["status"] = rec.status
        doc["run"] = rec.to_json() if rec is not None else None
        doc["placement"] = self.placement
        doc["output_match"] = self.output_match
        doc["inputs"] = [{"name": n, "match": m} for n, m in self.input_matches]
        doc["attribution"] = self.attribution
        return doc


@dataclass(frozen=True)
class ValidationReport:
    """The result of :func:`dmlshim.validate.validate_model`.

    Attributes:
        model: the model file, or ``<in-memory model>``.
        feature_level: the emulated DirectML feature level.
        match: every graph output agreed with the like-for-like reference.
        outputs: one comparison per graph output, in graph order.
        nodes: one entry per gather/scatter node (subgraphs included), in graph order.
        warnings: what matters on real DirectML, and nodes to look at.
        rtol: relative tolerance of the verdict's comparison (0: exact).
        atol: absolute tolerance of the verdict's comparison (0: exact).
        inputs_source: ``"file"``, ``"given"`` or ``"random"``.
        seed: the seed of random inputs, else None.
        input_shapes: the shape of every feed.
        input_symbols: the size chosen for every symbolic dimension of generated inputs.
        optimization_levels: ``(side, level)`` for ``dmlshim``, ``reference`` and ``whole_model``:
            onnxruntime's graph optimisation level on each side.
        whole_model_error: why onnxruntime could not run the whole model, if it could not.
        tolerances: ``(output, rtol, atol)`` for outputs given their own tolerance.
        reference_outputs: the reference outputs file compared against, if any.
        feeds: the arrays the model ran on (for ``--save-inputs``).
        runs: how the sides were run: :data:`RUNS_ONE` (one onnxruntime run of the whole model, every
            emulated node's kernel reproducing onnxruntime's output bit for bit, so the three sides are the
            same values), :data:`RUNS_THREE` (dmlshim's run, the reference and the whole model apart) or
            :data:`RUNS_ENGINE` (another engine's run, with the whole model as its reference).
        engine: the engine whose run was checked (``partitioned``, ``customop``, ``cpu``, ``directml``).
        optimization_level_reason: why the sides ran at another optimisation level than asked (or than
            the default, ``disabled``), else None (:mod:`dmlshim.validate.levels`).
        emulation: with the directml engine, the third comparison: each output of real DirectML against
            dmlshim's emulation (the partitioned engine), as ``(output, "bit-equal" | "max |diff| x" |
            "differs: ...")``; empty for the other engines.
        directml_nodes: with the directml engine when an output differs beyond tolerance, the
            :class:`dmlshim.validate.directml_nodes.DirectMLNodeCheck` (each gather/scatter node run by
            dmlshim on real DirectML's own inputs); else None.
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
    input_symbols: tuple[tuple[str, int], ...] = ()
    optimization_levels: tuple[tuple[str, str], ...] = ()
    whole_model_error: str | None = None
    tolerances: tuple[tuple[str, float, float], ...] = ()
    reference_outputs: str | None = None
    feeds: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False, repr=False)
    runs: str = RUNS_THREE
    engine: str = "partitioned"
    optimization_level_reason: str | None = None
    emulation: tuple[tuple[str, str], ...] = ()
    directml_nodes: Any = None
    loaded: Any = field(default=None, compare=False, repr=False)
    """With the directml engine, the model as validate read it (a
    :class:`dmlshim.execute.weights.model_source.LoadedModel`), which the attribution reuses."""

    @property
    def exit_code(self) -> int:
        """0 when every output matches, 1 otherwise."""
        return 0 if self.match else 1

    @property
    def mismatched(self) -> tuple[OutputComparison, ...]:
        """The outputs that differ from the like-for-like reference or from the reference outputs."""
        return tuple(
            o for o in self.outputs if not o.match or (o.external is not None and not o.external.match)
        )

    @property
    def exact(self) -> bool:
        """The verdict's comparison is bit for bit (no tolerance given)."""
        return self.rtol == 0 and self.atol == 0

    def to_json(self) -> dict[str, Any]:
        """The ``dmlshim validate --json`` document (see :data:`SCHEMA_VERSION`)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "feature_level": self.feature_level.dml_name,
            "match": self.match,
            "engine": self.engine,
            "reference": "partitioned-onnxruntime" if self.runs != RUNS_ENGINE else "whole-model-onnxruntime",
            "exact": self.exact,
            "rtol": self.rtol,
            "atol": self.atol,
            "optimization_levels": dict(self.optimization_levels),
            "optimization_level_reason": self.optimization_level_reason,
            "runs": self.runs,
            "inputs": {
                "source": self.inputs_source,
                "seed": self.seed,
                "shapes": {name: list(shape) for name, shape in self.input_shapes},
                "symbols": dict(self.input_symbols),
            },
            "outputs": [o.to_json() for o in self.outputs],
            "whole_model_error": self.whole_model_error,
            "tolerances": {name: {"rtol": r, "atol": a} for name, r, a in self.tolerances},
            "reference_outputs": self.reference_outputs,
            "nodes": [n.to_json() for n in self.nodes],
            "warnings": [w.to_json() for w in self.warnings],
            **({"real_directml_vs_emulation": dict(self.emulation)} if self.emulation else {}),
            **({"directml_nodes": self.directml_nodes.to_json()} if self.directml_nodes is not None else {}),
        }
