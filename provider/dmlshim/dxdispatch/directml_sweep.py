"""The real-DirectML fidelity sweep: generated nodes, translated, replayed on DirectML.dll, compared.

:func:`write_sweep` writes one export-style folder per generated case (``model.json``, inputs,
``expected_output.npy`` from dmlshim's kernels) plus an ``index.json``, so the folder is an export
directory like any other (``dmlshim compare DIR --run-directml`` works on it). :func:`run_sweep` replays
it on DirectML.dll and judges each case: a ``check`` case must match exactly (and, where onnxruntime CPU
runs the node, dmlshim's translation must equal onnxruntime's output: else the case fails too); a
difference is *explained* only when :data:`KNOWN_DIFFERENCES` names it (each entry says what causes it
and points at docs/semantics.md); ``duplicates`` and ``out_of_range`` cases are observations of
behaviour DirectML leaves undefined and never fail.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import DmlShimError, IndexOutOfRangeError
from ..fileio.files import write_json
from ..kernels import IndexMode
from ..translate import Status, TensorInfo, translate_node
from .compare import MATCH, NodeComparison, compare_export
from .export_node import export_node
from .export_results import INDEX_FILE, INDEX_SCHEMA_VERSION, ExportedNode
from .host_stack import HostStack
from .real_replay import DirectMLReplay, replay_folders
from .sweep_cases import CHECK, OUT_OF_RANGE, SweepCase

log = logging.getLogger(__name__)

__all__ = ["KNOWN_DIFFERENCES", "SweepOutcome", "SweepReport", "run_sweep", "write_sweep"]

KNOWN_DIFFERENCES: Mapping[str, str] = {}
"""Case-name pattern (a regular expression) -> what causes the difference there (docs/semantics.md)."""

PASS = "pass"
EXPLAINED = "explained"
OBSERVED = "observed"
FAIL = "fail"
SKIPPED = "skipped"


@dataclass(frozen=True)
class SweepOutcome:
    """One case's verdict.

    Attributes:
        case: the case name (its folder).
        op_type: the ONNX op.
        feature_level: the feature level translated for (``5_0``).
        kind: ``check``, ``duplicates`` or ``out_of_range``.
        verdict: ``pass``, ``explained``, ``observed`` (an observation that differs from dmlshim's
            stand-in), ``fail`` or ``skipped`` (not a DirectML operator at this level, or no input to run).
        operator: the DML operator (``DML_OPERATOR_GATHER_ND1``), or "".
        detail: the comparison's or skip's detail.
        onnxruntime: whether dmlshim's translation equals onnxruntime CPU for the node (None: not run).
    """

    case: str
    op_type: str
    feature_level: str
    kind: str
    verdict: str
    operator: str = ""
    detail: str = ""
    onnxruntime: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SweepReport:
    """The sweep's outcomes, the device and how long it took."""

    outcomes: tuple[SweepOutcome, ...]
    replay: DirectMLReplay | None
    seconds_build: float
    seconds_replay: float

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, EXPLAINED: 0, OBSERVED: 0, FAIL: 0, SKIPPED: 0}
        for o in self.outcomes:
            out[o.verdict] += 1
        return out

    @property
    def ok(self) -> bool:
        """True when no case failed (an unexplained difference, or DirectML refusing a descriptor)."""
        return not any(o.verdict == FAIL for o in self.outcomes)


def _ort_output(case: SweepCase) -> np.ndarray | None:
    """The node's output on onnxruntime's CPU provider, or None where onnxruntime refuses it."""
    import onnxruntime as ort

    names = [f"x{i}" for i in range(len(case.inputs))]
    node = helper.make_node(case.op_type, names, ["y"], **case.attrs)
    graph = helper.make_graph(
        [node],
        case.name,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, case.inputs, strict=True)
        ],
        [onnx.ValueInfoProto(name="y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # no warning per old-opset case (Gather-1 is swept on purpose)
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return np.asarray(session.run(None, dict(zip(names, case.inputs, strict=True)))[0])
    except Exception as exc:  # onnxruntime's own error classes; a refusal just means no reference
        log.info("%s: onnxruntime CPU refused it: %s", case.name, str(exc).splitlines()[0])
        return None


def _export_case(
    case: SweepCase, directory: Path, *, with_ort: bool
) -> tuple[ExportedNode | None, str, bool]:
    """Write the case's folder: (ExportedNode, "", whether onnxruntime gave a reference), or (None, why
    it was skipped, False)."""
    names = [f"x{i}" for i in range(len(case.inputs))]
    node = helper.make_node(case.op_type, names, ["y"], name=case.name, **case.attrs)
    infos = [TensorInfo(tuple(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for a in case.inputs]
    t = translate_node(node, case.opset, infos, case.feature_level, name=case.name)
    if t.status is not Status.DML or t.operator is None:
        codes = ", ".join(r.code for r in t.reasons) or t.status.value
        return None, f"not a DirectML operator here ({codes})", False
    if any(tensor.element_count == 0 for tensor in t.operator.tensors().values()):
        return None, "an empty tensor: DirectML has no zero-sized dimension, nothing to dispatch", False
    reference = _ort_output(case) if with_ort and case.kind != OUT_OF_RANGE else None
    mode = IndexMode.CLAMP if case.kind == OUT_OF_RANGE else IndexMode.ERROR
    try:
        exported = export_node(
            case.name, t, list(case.inputs), reference, directory, "dmlshim sweep", index_mode=mode
        )
    except IndexOutOfRangeError as exc:
        return None, f"index out of range on the host side: {exc.message}", False
    except DmlShimError as exc:
        return None, f"export failed: {exc.message}", False
    return exported, "", reference is not None


def write_sweep(
    cases: Sequence[SweepCase], directory: Path, *, with_ort: bool = True
) -> tuple[dict[str, ExportedNode], dict[str, str], set[str]]:
    """Write every case's folder and an ``index.json`` into the (new or empty) ``directory``.

    Returns:
        (exported nodes by case name, skip reasons by case name, the cases onnxruntime CPU ran).
    """
    directory.mkdir(parents=True, exist_ok=True)
    exported: dict[str, ExportedNode] = {}
    skipped: dict[str, str] = {}
    referenced: set[str] = set()
    for case in cases:
        node, why, had_reference = _export_case(case, directory, with_ort=with_ort)
        if node is None:
            skipped[case.name] = why
        else:
            exported[case.name] = node
            if had_reference:
                referenced.add(case.name)
    index = {
        "schema_version": INDEX_SCHEMA_VERSION,
        "tool": "dmlshim directml sweep",
        "model": "generated",
        "exported": [e.to_json() for e in exported.values()],
        "skipped": [{"node": name, "reason": why} for name, why in skipped.items()],
    }
    write_json(directory / INDEX_FILE, index, overwrite=True)
    return exported, skipped, referenced


def _explanation(case: str) -> str:
    for pattern, why in KNOWN_DIFFERENCES.items():
        if re.fullmatch(pattern, case):
            return why
    return ""


def _verdict(case: SweepCase, comparison: NodeComparison | None) -> tuple[str, str]:
    if comparison is None:
        return FAIL, "no comparison"
    if comparison.status == MATCH:
        return PASS, ""
    detail = comparison.detail
    if case.kind != CHECK:
        return OBSERVED, detail
    why = _explanation(case.name)
    if why:
        return EXPLAINED, f"{detail} [{why}]"
    return FAIL, detail


def run_sweep(
    cases: Sequence[SweepCase],
    directory: Path,
    *,
    stack: HostStack | None = None,
    exe: Path | None = None,
    with_ort: bool = True,
) -> SweepReport:
    """Write, replay on DirectML.dll and judge every case (see the module docstring).

    Raises:
        StackMissingError: real DirectML is not set up.
    """
    start = time.monotonic()
    exported, skipped, referenced = write_sweep(cases, directory, with_ort=with_ort)
    built = time.monotonic() - start
    replay = (
        replay_folders([directory / name for name in exported], stack=stack, exe=exe) if exported else None
    )
    report = compare_export(directory)
    by_folder = {n.folder: n for n in report.nodes}
    outcomes: list[SweepOutcome] = []
    for case in cases:
        fl = case.feature_level.short
        if case.name in skipped:
            outcomes.append(
                SweepOutcome(case.name, case.op_type, fl, case.kind, SKIPPED, detail=skipped[case.name])
            )
            continue
        node = exported[case.name]
        verdict, detail = _verdict(case, by_folder.get(case.name))
        if (
            case.kind == CHECK
            and case.name in referenced
            and not node.matches_onnxruntime
            and verdict == PASS
        ):
            verdict, detail = (
                FAIL,
                "DirectML equals dmlshim's kernels, but dmlshim's translation differs from onnxruntime CPU",
            )
        outcomes.append(
            SweepOutcome(
                case.name,
                case.op_type,
                fl,
                case.kind,
                verdict,
                node.operator,
                detail,
                node.matches_onnxruntime if case.name in referenced else None,
            )
        )
    return SweepReport(tuple(outcomes), replay, built, time.monotonic() - start - built)
