"""Nodes inside control-flow bodies translated at the shapes a run gave them (``inspect --inputs``).

A node in a Loop or Scan body runs once per iteration, and its inputs may have other shapes at each (a
loop-carried value that grows). Every distinct set of input shapes is translated; the node's verdict is
the worst of them (not translated, then falling back, then the highest feature level), and each
:class:`RunCase` names the iterations that gave those shapes and the verdict they give.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from .plan import CPU_PROVIDER, DML_PROVIDER, NodeTranslation, Status, TensorInfo

__all__ = ["Execution", "RunCase", "iteration_text", "translate_executions"]

Execution = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
"""One execution of a body node: the iterations of its enclosing Loops/Scans (outermost first, 1-based;
empty for an If branch outside any loop) and the run's shapes of its non-empty inputs, in order."""

_SEVERITY = {Status.DML: 0, Status.FALLBACK: 1, Status.ERROR: 2}
_SHOWN = 6  # the cases the text lists per node (the worst always)
_PLACEMENT = {DML_PROVIDER: 0, CPU_PROVIDER: 1, None: 2}


@dataclass(frozen=True)
class RunCase:
    """One distinct set of input shapes a run gave a body node.

    Attributes:
        iterations: the executions that gave these shapes (iteration numbers, see :data:`Execution`).
        shapes: the shapes of the node's non-empty inputs.
        status: the verdict at these shapes (``dml``, ``fallback``, ``error``).
        operator: the DirectML operator at these shapes, if translated.
        ort_placement: where onnxruntime's DirectML provider would run the node at these shapes (None:
            it rejects the node).
        worst: whether this is the case the node's verdict comes from, where the cases' verdicts differ.
    """

    iterations: tuple[tuple[int, ...], ...]
    shapes: tuple[tuple[int, ...], ...]
    status: str
    operator: str | None
    ort_placement: str | None
    worst: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "iterations": iteration_text(self.iterations),
            "shapes": [list(s) for s in self.shapes],
            "status": self.status,
            "operator": self.operator,
            "ort_placement": self.ort_placement,
            "worst": self.worst,
        }


def iteration_text(iterations: Sequence[tuple[int, ...]]) -> str:
    """``iterations 1-3, 5`` (nested loops: ``iteration 2.1``); ``the run`` for an If outside loops."""
    if all(not it for it in iterations):
        return "the run"
    flat = [it for it in iterations if len(it) == 1]
    if len(flat) == len(iterations):
        numbers = sorted(it[0] for it in flat)
        spans: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        label = "iterations" if len(numbers) > 1 else "iteration"
        return f"{label} {', '.join(spans)}"
    label = "iterations" if len(iterations) > 1 else "iteration"
    return f"{label} " + ", ".join(".".join(str(i) for i in it) for it in iterations)


def _severity(t: NodeTranslation) -> tuple[int, int, int]:
    """Worse first by status (not translated, falling back, DirectML), then by onnxruntime-directml's
    placement (rejected, CPU, DML), then by the feature level needed."""
    level = t.min_feature_level
    return _SEVERITY.get(t.status, 2), _PLACEMENT.get(t.ort_placement, 2), int(level) if level else 0


def translate_executions(
    node: onnx.NodeProto,
    executions: Sequence[Execution],
    scope: Callable[[str], TensorInfo | None],
    translate: Callable[[tuple[TensorInfo | None, ...]], NodeTranslation],
) -> tuple[NodeTranslation, tuple[RunCase, ...]] | None:
    """The worst translation of ``node`` over the distinct input shapes of its ``executions``, and the
    cases; None when an input's element type is unknown (the static verdict stands).

    Args:
        scope: the inferred TensorInfo of a value (its element type is kept, its shape replaced).
        translate: translates the node at the given input infos (one per ``node.input``).
    """
    types: list[int] = []
    for name in node.input:
        if name:
            info = scope(name)
            if info is None or not info.elem_type:
                return None
            types.append(info.elem_type)
    grouped: dict[tuple[tuple[int, ...], ...], list[tuple[int, ...]]] = {}
    for iterations, shapes in executions:
        grouped.setdefault(shapes, []).append(iterations)
    results: list[tuple[tuple[tuple[int, ...], ...], NodeTranslation]] = []
    for shapes in grouped:
        given = iter(zip(shapes, types, strict=True))
        infos = tuple(TensorInfo(*next(given)) if name else None for name in node.input)
        results.append((shapes, translate(infos)))
    severities = [_severity(t) for _, t in results]
    worst = max(range(len(results)), key=severities.__getitem__)  # the first of the worst
    differ = len(set(severities)) > 1
    cases = tuple(
        RunCase(
            tuple(grouped[shapes]),
            shapes,
            t.status.value,
            t.operator.operator_type.dml_name if t.operator is not None else None,
            t.ort_placement,
            k == worst and differ,
        )
        for k, (shapes, t) in enumerate(results)
    )
    return results[worst][1], cases


def case_lines(cases: Mapping[str, Sequence[RunCase]]) -> list[str]:
    """The text report's lines for the body nodes translated at a run's shapes (several cases only)."""
    lines: list[str] = []
    for name, found in cases.items():
        if len(found) < 2:
            continue
        which = "verdict from the worst" if any(c.worst for c in found) else "the same verdict at each"
        lines.append(f"  {name}: {len(found)} shapes in the run, {which}:")
        shown = [c for k, c in enumerate(found) if k < _SHOWN or c.worst]
        for c in shown:
            shapes = ", ".join("[" + ",".join(str(d) for d in s) + "]" for s in c.shapes)
            operator = f" {c.operator.removeprefix('DML_OPERATOR_')}" if c.operator else ""
            where = (c.ort_placement or "rejected").removesuffix("ExecutionProvider")
            mark = "  <- worst" if c.worst else ""
            verdict = f"{c.status}{operator}, ORT EP {where}{mark}"
            lines.append(f"    {iteration_text(c.iterations)}: inputs {shapes}: {verdict}")
        if len(shown) < len(found):
            lines.append(f"    ... {len(found) - len(shown)} more shapes (--json lists every one)")
    return lines
