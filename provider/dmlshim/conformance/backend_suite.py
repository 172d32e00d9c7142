"""The ONNX backend node tests for gather/scatter, run through :mod:`dmlshim.backend`.

The cases are the ones the onnx package lists (``onnx.backend.test.loader.load_model_tests`` with
``kind="node"``): onnx 1.23 and later build them in memory; older onnx lists only their folders, so each
case's ``model.onnx`` and ``test_data_set_0`` tensors are read from the onnx package's data folder. The
suite takes every single-op model whose op is Gather, GatherElements, GatherND, Scatter, ScatterElements or
ScatterND (26 in onnx 1.23, 23 in onnx 1.20), plus the 3 TensorScatter cases (onnx 1.20 and later), which are
reported but are not DirectML gather/scatter operators and run on onnxruntime's CPU.

Each case is prepared with ``dmlshim.backend.prepare(model, device="CPU", feature_level=...)`` and run on
its data set; outputs are compared the way onnx's backend runner does (the same number of outputs, the
exact dtype, then ``rtol``/``atol`` of the case). A case ends as:

* ``dml``: outputs match and every in-scope node executed from its DirectML descriptor;
* ``fallback``: outputs match but some node ran on onnxruntime's CPU provider (the reason says why, e.g.
  DirectML has no scatter reduction);
* ``fail``: an output differs, has the wrong dtype or shape, or the run raised (the reason says which);
* ``ort_cannot_load``: the run raised and the installed onnxruntime cannot load the case's model by itself
  either (an opset or IR version newer than it knows, e.g. TensorScatter-24 on onnxruntime 1.24), so
  nothing about dmlshim is learnt from it.

The suite passes when no gather/scatter case ends as ``fail`` or ``ort_cannot_load``; the other reported
cases never decide it.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import numpy_helper

from ..dml.enums import FeatureLevel
from ..errors import DmlShimError, EngineUnavailableError
from ..runtime.real import OrtInferenceSession

__all__ = [
    "IN_SCOPE_OPS",
    "MIN_IN_SCOPE_CASES",
    "REPORTED_OPS",
    "SUITE_LEVELS",
    "BackendCase",
    "CaseOutcome",
    "CaseStatus",
    "SuiteCorpusError",
    "SuiteResult",
    "discover_cases",
    "min_in_scope_cases",
    "ort_cannot_load",
    "run_case",
    "run_suite",
]

logger = logging.getLogger(__name__)

CaseStatus = Literal["dml", "fallback", "fail", "ort_cannot_load"]
STATUSES: tuple[CaseStatus, ...] = ("dml", "fallback", "fail", "ort_cannot_load")

IN_SCOPE_OPS = frozenset({"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"})
"""The ONNX ops dmlshim executes as DirectML operators."""

REPORTED_OPS = frozenset({"TensorScatter"})
"""Ops whose backend cases are run and reported, though DirectML has no operator for them."""

MIN_IN_SCOPE_CASES = 26
"""onnx 1.23 builds 26 in-scope cases; fewer means the corpus shrank and the suite proves less."""

MIN_IN_SCOPE_CASES_BEFORE_1_23 = 23
"""onnx 1.20 (the lowest onnx dmlshim supports) has 23: the ``*_with_element_indices`` ScatterND cases and
``test_scatter_elements_with_reduction_mul`` came later."""

SUITE_LEVELS: tuple[FeatureLevel, ...] = (FeatureLevel.FL_5_0, FeatureLevel.FL_3_0, FeatureLevel.FL_2_1)
"""The feature levels the conformance report covers."""

_PLACEMENT_DML = "dml"


DEFAULT_ENGINE = "partitioned"


class SuiteCorpusError(DmlShimError):
    """The onnx package built fewer in-scope backend cases than the floor: the corpus shrank."""


@dataclass(frozen=True)
class BackendCase:
    """One backend node test.

    Attributes:
        name: the onnx test name (``test_gather_0``).
        op_type: the op the model holds.
        opset: the model's ai.onnx opset.
        model: the one-node model.
        inputs: the input arrays, in graph-input order.
        outputs: the expected output arrays, in graph-output order.
        rtol: the case's relative tolerance.
        atol: the case's absolute tolerance.
    """

    name: str
    op_type: str
    opset: int
    model: onnx.ModelProto
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    rtol: float
    atol: float

    @property
    def in_scope(self) -> bool:
        """Whether the op is one dmlshim executes as a DirectML operator."""
        return self.op_type in IN_SCOPE_OPS


@dataclass(frozen=True)
class CaseOutcome:
    """The result of one case at one feature level.

    Attributes:
        name: the onnx test name.
        op_type: the op.
        opset: the model's ai.onnx opset.
        status: ``dml``, ``fallback``, ``fail`` or ``ort_cannot_load``.
        reason: why the case fell back or failed; for ``dml`` cases, host-side steps DirectML needed
            around the operator at this level (empty when none).
        in_scope: whether the op is one of the six gather/scatter ops.
        operators: the DirectML operators the in-scope nodes ran as (empty for CPU nodes).
    """

    name: str
    op_type: str
    opset: int
    status: CaseStatus
    reason: str = ""
    in_scope: bool = True
    operators: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "opset": self.opset,
            "status": self.status,
            "reason": self.reason,
            "in_scope": self.in_scope,
            "operators": list(self.operators),
        }


@dataclass(frozen=True)
class SuiteResult:
    """Every case of the suite at one feature level.

    Attributes:
        feature_level: the emulated DirectML feature level.
        cases: one outcome per case, in discovery order.
        engine: the engine every case ran through (``InferenceSession(engine=...)``).
    """

    feature_level: FeatureLevel
    cases: tuple[CaseOutcome, ...]
    engine: str = DEFAULT_ENGINE

    @property
    def totals(self) -> dict[str, int]:
        """``{"dml": n, "fallback": n, "fail": n, "ort_cannot_load": n}`` over every case."""
        return _count(self.cases)

    @property
    def in_scope_totals(self) -> dict[str, int]:
        """The same counts over the in-scope cases only."""
        return _count(c for c in self.cases if c.in_scope)

    @property
    def passed(self) -> bool:
        """True when every gather/scatter case passed: none failed, none the installed onnxruntime cannot
        load. The reported out-of-scope cases (TensorScatter) do not count."""
        s = self.in_scope_totals
        return s["fail"] == 0 and s["ort_cannot_load"] == 0

    def to_json(self) -> dict[str, Any]:
        """The ``dmlshim conformance --json`` document."""
        return {
            "schema_version": 1,
            "feature_level": self.feature_level.dml_name,
            "engine": self.engine,
            "cases": [c.to_json() for c in self.cases],
            "totals": self.totals,
            "in_scope_totals": self.in_scope_totals,
        }


def _count(cases: Any) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for case in cases:
        counts[case.status] += 1
    return counts


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def min_in_scope_cases(onnx_version: str | None = None) -> int:
    """The in-scope case floor for an onnx version (the installed one by default)."""
    text = onnx.__version__ if onnx_version is None else onnx_version
    try:
        major, minor = (int(part) for part in text.split(".")[:2])
    except ValueError:
        return MIN_IN_SCOPE_CASES
    return MIN_IN_SCOPE_CASES if (major, minor) >= (1, 23) else MIN_IN_SCOPE_CASES_BEFORE_1_23


@functools.lru_cache(maxsize=1)
def _load_node_tests() -> tuple[Any, ...]:
    from onnx.backend.test.loader import load_model_tests

    # Building every node case runs onnx's own generators, some of which warn about float overflow.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(load_model_tests(kind="node"))


def _single_op(model: onnx.ModelProto) -> str | None:
    """The op of a model whose nodes are all one op we run or report, else None."""
    ops = {n.op_type for n in model.graph.node}
    if len(ops) != 1:
        return None
    op_type = next(iter(ops))
    return op_type if op_type in IN_SCOPE_OPS | REPORTED_OPS else None


def _numbered(folder: Path, stem: str) -> list[Path]:
    """``stem_0.pb``, ``stem_1.pb``, ... in numeric order."""
    paths = folder.glob(f"{stem}_*.pb")
    return sorted(paths, key=lambda p: int(p.stem.rpartition("_")[2]))


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _from_disk(test: Any) -> tuple[onnx.ModelProto, tuple[Any, Any]] | None:
    """Before onnx 1.23 the node cases come without a model: read ``model.onnx`` and the first data set
    from the case's folder in the onnx package (None when it is not a case of ours or has no data)."""
    folder = Path(test.model_dir)
    model = onnx.load(str(folder / "model.onnx"))
    if _single_op(model) is None:
        return None
    data = folder / "test_data_set_0"
    if not data.is_dir():
        return None
    inputs = [_read_tensor(p) for p in _numbered(data, "input")]
    outputs = [_read_tensor(p) for p in _numbered(data, "output")]
    return model, (inputs, outputs)


def _case_model(test: Any) -> tuple[onnx.ModelProto, tuple[Any, Any]] | None:
    """The model and first data set of one onnx node test, wherever this onnx keeps them."""
    if test.model is not None:
        return (test.model, test.data_sets[0]) if test.data_sets else None
    if getattr(test, "model_dir", None):
        return _from_disk(test)
    return None


def discover_cases(min_in_scope: int | None = None) -> tuple[BackendCase, ...]:
    """The gather/scatter backend node tests onnx builds, in scope first, each group by name.

    Args:
        min_in_scope: the floor on in-scope cases (by default :func:`min_in_scope_cases` for the
            installed onnx).

    Raises:
        SuiteCorpusError: fewer than ``min_in_scope`` in-scope cases were found.
    """
    if min_in_scope is None:
        min_in_scope = min_in_scope_cases()
    found: list[BackendCase] = []
    for test in _load_node_tests():
        loaded = _case_model(test)
        if loaded is None:
            continue
        model, (inputs, outputs) = loaded
        op_type = _single_op(model)
        if op_type is None:
            continue
        opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        found.append(
            BackendCase(
                name=test.name,
                op_type=op_type,
                opset=opset,
                model=model,
                inputs=tuple(_as_array(a) for a in inputs),
                outputs=tuple(_as_array(a) for a in outputs),
                rtol=float(test.rtol),
                atol=float(test.atol),
            )
        )
    found.sort(key=lambda c: (not c.in_scope, c.op_type, c.name))
    in_scope = sum(c.in_scope for c in found)
    if in_scope < min_in_scope:
        raise SuiteCorpusError(
            f"onnx {onnx.__version__} built {in_scope} gather/scatter backend node tests, "
            f"fewer than the floor of {min_in_scope}: the corpus shrank",
            value=in_scope,
        )
    logger.info("discovered %d backend cases (%d in scope)", len(found), in_scope)
    return tuple(found)


def compare_outputs(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float, atol: float
) -> str | None:
    """Compare as onnx's backend runner does; None when they agree, else why not.

    The output count must agree, each dtype must be identical, shapes equal, and values close within
    ``rtol``/``atol`` (NaN equal to NaN); object arrays compare exactly.
    """
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        got = np.asarray(got)
        if got.dtype != want.dtype:
            return f"output {i}: dtype {got.dtype}, expected {want.dtype}"
        if got.shape != want.shape:
            return f"output {i}: shape {list(got.shape)}, expected {list(want.shape)}"
        if want.dtype == object:
            same = np.array_equal(got, want)
            close = np.full(want.shape, same, dtype=bool)
        else:
            close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(np.all(close)):
            bad = tuple(int(k) for k in np.argwhere(~close)[0]) if close.ndim else ()
            return (
                f"output {i}: {int((~close).sum())} of {close.size} values differ beyond rtol={rtol} "
                f"atol={atol}; first at {list(bad)}: got {got[bad]!r}, expected {want[bad]!r}"
            )
    return None


def _reasons_text(reasons: Sequence[tuple[str, str]]) -> str:
    """The causes in full, then the codes of notes about onnxruntime's DirectML provider."""
    causes = [(c, m) for c, m in reasons if not c.startswith("EP_")] or list(reasons)
    notes = [c for c, _ in reasons if (c, _) not in causes]
    text = "; ".join(f"{code}: {message}" for code, message in causes)
    return text + (f" (also: {', '.join(notes)})" if notes else "")


def _dml_notes(case: BackendCase, level: FeatureLevel) -> str:
    """Host-side steps the translation needs around the DirectML operator at this level."""
    from ..translate import translate_model

    try:
        translation = translate_model(case.model, level)
    except DmlShimError as exc:
        return f"(translation not inspected: {exc})"
    steps = sorted({s.kind.value for n in translation.nodes for s in n.host_steps})
    notes = sorted({r.code for n in translation.nodes if n.ok for r in n.reasons})
    layouts = sorted(
        {n.layout.value for n in translation.nodes if n.layout is not None and n.layout.value != "ep"}
    )
    parts = []
    if layouts:
        parts.append("layout: " + ", ".join(layouts))
    if steps:
        parts.append("host steps: " + ", ".join(steps))
    if notes:
        parts.append("notes: " + ", ".join(notes))
    return "; ".join(parts)


def _sess_options() -> Any:
    import onnxruntime as ort

    # onnxruntime's ScatterND with a reduction is racy on duplicate indices with more than one thread.
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def ort_cannot_load(model: onnx.ModelProto) -> str | None:
    """Why the installed onnxruntime cannot load ``model`` on its own CPU provider (None: it can)."""
    import onnxruntime as ort

    from ..model.ort_errors import ORT_ERRORS

    try:
        OrtInferenceSession(model.SerializeToString(), _sess_options(), providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        return f"onnxruntime {ort.__version__} cannot load this model: {exc}".strip()
    return None


def run_case(case: BackendCase, feature_level: FeatureLevel, engine: str = DEFAULT_ENGINE) -> CaseOutcome:
    """Prepare and run one case through :mod:`dmlshim.backend` with ``engine`` and classify the result.

    Errors dmlshim raises on purpose, and onnxruntime failures, become ``fail`` with the error text, or
    ``ort_cannot_load`` when the installed onnxruntime cannot load the model by itself either; an engine
    that cannot run here (``EngineUnavailableError``) and internal bugs propagate.
    """
    from .. import backend

    def outcome(status: CaseStatus, reason: str, operators: tuple[str, ...] = ()) -> CaseOutcome:
        return CaseOutcome(case.name, case.op_type, case.opset, status, reason, case.in_scope, operators)

    try:
        rep = backend.prepare(
            case.model, device="CPU", feature_level=feature_level, sess_options=_sess_options(), engine=engine
        )
        actual = rep.run(list(case.inputs))
    except EngineUnavailableError:
        raise  # not the case's failure: no case can run through this engine here
    except (DmlShimError, RuntimeError, ValueError) as exc:
        logger.debug("%s at %s raised", case.name, feature_level.short, exc_info=True)
        unloadable = ort_cannot_load(case.model)
        if unloadable is not None:
            return outcome("ort_cannot_load", unloadable)
        return outcome("fail", f"{type(exc).__name__}: {exc}")
    mismatch = compare_outputs([np.asarray(a) for a in actual], case.outputs, case.rtol, case.atol)
    if mismatch is not None:
        return outcome("fail", mismatch)
    record = rep.last_run_record
    nodes = tuple(record.nodes) if record is not None else ()
    if not case.in_scope:
        if any(n.placement == _PLACEMENT_DML for n in nodes):
            return outcome("fail", f"{case.op_type} has no DirectML operator, yet a node ran as one")
        return outcome(
            "fallback",
            f"OUT_OF_SCOPE: {case.op_type} (opset {case.opset}) has no DirectML operator; "
            "ran on onnxruntime CPU",
        )
    in_scope = [n for n in nodes if n.op_type in IN_SCOPE_OPS]
    if not in_scope:
        return outcome("fail", "the run record names no gather/scatter node: cannot tell where it ran")
    operators = tuple(n.operator for n in in_scope if n.operator)
    on_cpu = [n for n in in_scope if n.placement != _PLACEMENT_DML]
    if on_cpu:
        why = "; ".join(_reasons_text(n.reasons) or n.status for n in on_cpu)
        return outcome("fallback", why, operators)
    return outcome("dml", _dml_notes(case, feature_level), operators)


def run_suite(
    feature_level: FeatureLevel | str = FeatureLevel.FL_5_0,
    cases: Sequence[BackendCase] | None = None,
    engine: str = DEFAULT_ENGINE,
) -> SuiteResult:
    """Run every gather/scatter backend node test at one feature level.

    Args:
        feature_level: the DirectML feature level to emulate (``FeatureLevel`` or text such as ``"3_0"``).
        cases: the cases to run; :func:`discover_cases` when None.
        engine: the engine the cases run through (partitioned, customop, cpu, directml).

    Returns:
        The outcome of every case.

    Raises:
        SuiteCorpusError: fewer in-scope cases than :data:`MIN_IN_SCOPE_CASES` were discovered.
        EngineUnavailableError: the engine is unknown or cannot run on this machine.
    """
    level = feature_level if isinstance(feature_level, FeatureLevel) else FeatureLevel.parse(feature_level)
    chosen = discover_cases() if cases is None else tuple(cases)
    outcomes = tuple(run_case(case, level, engine) for case in chosen)
    result = SuiteResult(level, outcomes, engine)
    totals = result.totals
    logger.info(
        "backend suite at %s: %d dml, %d fallback, %d fail, %d onnxruntime cannot load",
        level.short,
        totals["dml"],
        totals["fallback"],
        totals["fail"],
        totals["ort_cannot_load"],
    )
    return result


def suite_by_level(levels: Sequence[FeatureLevel] = SUITE_LEVELS) -> Mapping[FeatureLevel, SuiteResult]:
    """:func:`run_suite` at each level (the cases are discovered once)."""
    cases = discover_cases()
    return {level: run_suite(level, cases) for level in levels}
