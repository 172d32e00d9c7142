"""Run models on real DirectML (the Linux stack) and compare three ways: real DirectML, dmlshim's
emulation (the partitioned engine) and onnxruntime CPU. ``dmlshim directml sweep MODEL...``.

Each model runs with the inputs shipped beside it (``M.npz``) or generated ones. A refusal by
onnxruntime-directml is a result too (the message is kept, and whether dmlshim's inspect predicted it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DmlShimError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Comparison:
    """How two runs' outputs compare: ``bit-equal``, ``max abs diff <x>`` or ``differs: <why>``."""

    equal: bool
    max_abs: float
    text: str


@dataclass(frozen=True)
class SweepResult:
    """One model on real DirectML.

    Attributes:
        model: the model path.
        outcome: ``ran`` or ``refused`` (session creation failed) or ``failed`` (the run failed) or
            ``skipped`` (no inputs / reference).
        message: the refusal or failure message.
        vs_cpu: real DirectML against onnxruntime CPU.
        vs_emulation: real DirectML against dmlshim's partitioned engine.
        predicted_refusal: the refusal codes predicted, for comparison with ``outcome``: inspect's table's,
            and those decided from onnxruntime CPU's run of the same feeds (a graph output contradicting
            its declared shape, :mod:`dmlshim.translate.ep_declared_shapes`).
        cpu_nodes: nodes onnxruntime placed on its CPU provider (from its log).
        optimized_away: gather/scatter nodes onnxruntime's graph optimizations removed before placement
            (folded into constants or fused away at session creation: in no partition, not in its log).
        seconds: session creation + first run time on real DirectML.
    """

    model: str
    outcome: str
    message: str = ""
    vs_cpu: Comparison | None = None
    vs_emulation: Comparison | None = None
    predicted_refusal: tuple[str, ...] = ()
    cpu_nodes: tuple[str, ...] = ()
    seconds: float = 0.0
    optimized_away: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def comp(c: Comparison | None) -> Any:
            return None if c is None else {"equal": c.equal, "max_abs": c.max_abs, "text": c.text}

        return {
            "model": self.model,
            "outcome": self.outcome,
            "message": self.message,
            "vs_onnxruntime_cpu": comp(self.vs_cpu),
            "vs_dmlshim_emulation": comp(self.vs_emulation),
            "predicted_refusal": list(self.predicted_refusal),
            "cpu_nodes": list(self.cpu_nodes),
            "optimized_away": list(self.optimized_away),
            "seconds": round(self.seconds, 2),
        }


def compare(a: Sequence[Any], b: Sequence[Any]) -> Comparison:
    """Compare two output lists element by element (NaN equals NaN; dtypes and shapes must agree)."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return Comparison(
                False, float("inf"), f"differs: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
            )
        if x.dtype.kind in "fc":
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            if not same.all():
                diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
                worst = max(worst, float(np.nanmax(np.where(same, 0.0, diff))) if diff.size else 0.0)
        elif not np.array_equal(x, y):
            return Comparison(False, float("inf"), "differs: integer/bool values differ")
    if worst == 0.0:
        return Comparison(True, 0.0, "bit-equal")
    return Comparison(False, worst, f"max abs diff {worst:.3g}")


def _feeds(path: Path) -> dict[str, np.ndarray]:
    from ..execute.weights.model_source import load_model
    from ..fileio.npz import load_npz
    from ..inputs.narrow_floats import narrow_feeds
    from ..inputs.search import generate

    npz = path.with_suffix(".npz")
    if npz.exists():
        return narrow_feeds(load_model(str(path), weightless=True).proto.graph, load_npz(npz))
    return dict(generate(load_model(str(path), weightless=True), seed=0).feeds)


def cpu_outputs(path: Path, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> list[Any]:
    """onnxruntime CPU's outputs ``names`` of the model file ``path`` on ``feeds`` (one thread)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return list(
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(list(names), dict(feeds))
    )


def cpu_values(proto: Any, feeds: Mapping[str, np.ndarray], values: Sequence[str]) -> dict[str, Any]:
    """onnxruntime CPU's values ``values`` (intermediate values of ``proto``) on ``feeds``, read by running
    a copy that also outputs them; {} when there are none, the model keeps its weights in external files, or
    onnxruntime fails (then only the graph outputs are checked)."""
    if not values or any(t.data_location == 1 for t in proto.graph.initializer):  # 1: EXTERNAL
        return {}
    import onnx
    import onnxruntime as ort

    from ..model.ort_errors import ORT_ERRORS
    from ..translate.ep_declared_shapes import with_values_as_outputs

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3  # the exposed values' declarations draw onnxruntime's merge warnings
    try:
        exposed = with_values_as_outputs(proto, values).SerializeToString()
        got = ort.InferenceSession(exposed, so, providers=["CPUExecutionProvider"]).run(
            list(values), dict(feeds)
        )
    except (*ORT_ERRORS, onnx.shape_inference.InferenceError) as exc:
        logger.debug("onnxruntime CPU could not expose %s: %s", list(values), exc)
        return {}
    return dict(zip(values, got, strict=True))


def declared_shape_findings(
    proto: Any,
    names: Sequence[str],
    reference: Sequence[Any],
    feeds: Mapping[str, np.ndarray],
    placements: Mapping[str, str] | None,
) -> tuple[Any, ...]:
    """The :class:`~dmlshim.translate.ep_declared_shapes.DeclaredShapeContradiction` s of a run, from
    onnxruntime CPU's outputs ``reference`` (of graph outputs ``names``) and its values of
    ``DeclaredOutputs.values``, the nodes placed as onnxruntime's log says."""
    from ..ort.declared_shapes import run_shapes
    from ..translate.ep_declared_shapes import DeclaredOutputs

    declared = DeclaredOutputs(proto)
    exposed = cpu_values(proto, feeds, declared.values)
    shapes = {**run_shapes(names, reference), **run_shapes(list(exposed), list(exposed.values()))}
    seen = {**feeds, **exposed}
    conditions = {
        n: bool(np.asarray(seen[n]).reshape(-1)[0])
        for n in declared.conditions
        if n in seen and np.asarray(seen[n]).size == 1
    }
    return declared.contradictions(shapes, placements, from_log=True, conditions=conditions)


def sweep_one(path: Path) -> SweepResult:
    """Run one model on real DirectML and compare it with onnxruntime CPU and dmlshim's emulation."""
    import onnx

    from ..ort.session import InferenceSession
    from ..translate.ep_refusals import session_refusals

    proto = onnx.load(str(path), load_external_data=False)
    predicted = tuple(sorted({r.code for _, r in session_refusals(proto)}))
    names = [o.name for o in proto.graph.output]
    try:
        feeds = _feeds(path)
    except DmlShimError as exc:
        return SweepResult(str(path), "skipped", f"no inputs: {exc}", predicted_refusal=predicted)
    start = time.monotonic()
    try:
        real = InferenceSession(str(path), engine="directml")
    except DmlShimError as exc:
        return SweepResult(
            str(path), "refused", str(exc), predicted_refusal=predicted, seconds=time.monotonic() - start
        )
    engine = real._engine if hasattr(real, "_engine") else None
    cpu_nodes = tuple(engine.cpu_nodes()) if engine is not None and hasattr(engine, "cpu_nodes") else ()
    away = tuple(sorted(getattr(engine, "optimized_away", ())))
    placements = getattr(getattr(engine, "_session", None), "placements", None)
    try:
        got = real.run(names, feeds)
    except DmlShimError as exc:
        from ..model.ort_errors import ORT_ERRORS

        try:
            reference = cpu_outputs(path, feeds, names)
        except ORT_ERRORS as cpu_exc:  # onnxruntime's own failure: no prediction from the run's values
            logger.debug("onnxruntime CPU failed on %s too: %s", path, cpu_exc)
        else:
            predicted = _with_run_refusals(predicted, proto, names, reference, placements, feeds)
        return SweepResult(str(path), "failed", str(exc), predicted_refusal=predicted, cpu_nodes=cpu_nodes)
    seconds = time.monotonic() - start
    reference = cpu_outputs(path, feeds, names)
    predicted = _with_run_refusals(predicted, proto, names, reference, placements, feeds)
    vs_cpu = compare(got, reference)
    try:
        emulated = InferenceSession(str(path), engine="partitioned").run(names, feeds)
        vs_emu: Comparison | None = compare(got, emulated)
    except DmlShimError as exc:
        vs_emu = Comparison(False, float("inf"), f"emulation failed: {exc}")
    return SweepResult(
        str(path), "ran", "", vs_cpu, vs_emu, predicted, cpu_nodes, seconds, optimized_away=away
    )


def _with_run_refusals(
    predicted: tuple[str, ...],
    proto: Any,
    names: Sequence[str],
    reference: Sequence[Any],
    placements: Mapping[str, str] | None,
    feeds: Mapping[str, np.ndarray],
) -> tuple[str, ...]:
    """``predicted`` with the refusals decided from a run's values (:func:`declared_shape_findings`): a
    graph output, value_info value or If branch output contradicting its declared shape."""
    found = declared_shape_findings(proto, names, reference, feeds, placements)
    return tuple(sorted({*predicted, *(c.code for c in found)}))


def sweep(paths: Iterable[Path]) -> list[SweepResult]:
    """:func:`sweep_one` for each model, in order."""
    return [sweep_one(Path(p)) for p in paths]


def table(results: Sequence[SweepResult]) -> list[str]:
    """The results as a Markdown table."""
    lines = [
        "| model | real DirectML | vs onnxruntime CPU | vs dmlshim emulation | on CPU (onnxruntime's log) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        outcome = r.outcome if r.outcome == "ran" else f"{r.outcome}: {r.message.splitlines()[0][:160]}"
        lines.append(
            f"| {r.model.removeprefix('onnx_models/')} | {outcome} | {r.vs_cpu.text if r.vs_cpu else '-'} | "
            f"{r.vs_emulation.text if r.vs_emulation else '-'} | {', '.join(r.cpu_nodes) or '-'} |"
        )
    return lines
