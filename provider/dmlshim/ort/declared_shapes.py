"""Each run's graph outputs against their declared shapes, as real DirectML checks them: a run's record
gets a note per output onnxruntime-directml would fail on (:mod:`dmlshim.translate.ep_declared_shapes`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..execute.record import RunRecord
from ..translate.ep_declared_shapes import DeclaredOutputs, DeclaredShapeContradiction


def run_shapes(names: Sequence[str], outputs: Sequence[Any]) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor output (numpy arrays and OrtValues; sequences and maps have none)."""
    shapes = {}
    for name, value in zip(names, outputs, strict=False):
        shape = getattr(value, "shape", None)
        if callable(shape):  # an OrtValue
            shape = shape()
        if isinstance(shape, (tuple, list)):
            shapes[name] = tuple(int(s) for s in shape)
    return shapes


def record_placements(record: RunRecord) -> Mapping[str, str]:
    """Where onnxruntime's DirectML provider places the run's gather/scatter nodes, as far as known (the
    cpu engine's records name its own provider, which says nothing of DirectML's placement)."""
    from ..execute.engines.cpu import ENGINE_NAME as CPU_ENGINE_NAME  # asked only after a contradiction

    if record.engine == CPU_ENGINE_NAME:
        return {}
    return {n.name: n.ort_placement for n in record.nodes if n.ort_placement}


def declared_shape_contradictions(
    declared: DeclaredOutputs, record: RunRecord, shapes: Mapping[str, Sequence[int]]
) -> tuple[DeclaredShapeContradiction, ...]:
    """The outputs of a run (``shapes``) whose declared shape real DirectML would fail on."""
    if declared.empty:
        return ()
    return declared.contradictions(shapes, record_placements(record))


def with_declared_shape_notes(
    declared: DeclaredOutputs, record: RunRecord, names: Sequence[str], outputs: Sequence[Any]
) -> RunRecord:
    """``record`` with a note ``(code, message)`` per output real DirectML would fail on."""
    if not declared.may_contradict(names, outputs):
        return record
    found = declared_shape_contradictions(declared, record, run_shapes(names, outputs))
    if not found:
        return record
    return dataclasses.replace(record, notes=(*record.notes, *((c.code, c.message()) for c in found)))
