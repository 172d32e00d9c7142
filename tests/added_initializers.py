"""Runs of one model with values added through ``SessionOptions.add_initializer`` and changed between
runs, in onnxruntime's CPU provider (one intra-op thread) and in a dmlshim engine, with the same options and
the same changes (shared by the live-initializer tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnxruntime as ort

import dmlshim

Values = dict[str, Any]

KEPT: list[Any] = []
"""Options and the OrtValues added to them: onnxruntime keeps pointers, so they must outlive the sessions."""


def options_with_added(module: Any, adds: dict[str, Any], level: Any = None, quiet: bool = False) -> Any:
    """``module.SessionOptions()`` (onnxruntime's or dmlshim's) with one intra-op thread and each array of
    ``adds`` added as an initializer (an OrtValue kept alive in :data:`KEPT`)."""
    import numpy as np

    so = module.SessionOptions()
    so.intra_op_num_threads = 1
    if quiet:
        so.log_severity_level = 4
    if level is not None:
        so.graph_optimization_level = level
    for name, value in adds.items():
        ortvalue = ort.OrtValue.ortvalue_from_numpy(np.asarray(value))
        KEPT.append((value, ortvalue))
        so.add_initializer(name, ortvalue)
    KEPT.append(so)
    return so


def runs_with_added(
    make: Callable[[ort.SessionOptions], Any],
    values: Callable[[], Values],
    updates: Sequence[Callable[[Values], None]],
    run: Callable[[Any], Any],
    level: Any = None,
) -> list[Any]:
    """Each run's result (``run(session)``, or the exception it raised), an update applied to the added
    values before each run after the first."""
    held = values()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if level is not None:
        so.graph_optimization_level = level
    for name, value in held.items():
        so.add_initializer(name, value)
    session = make(so)
    results: list[Any] = []
    for update in [None, *updates]:
        if update is not None:
            update(held)
        try:
            results.append(run(session))
        except Exception as exc:  # onnxruntime's run refused (an index out of range): dmlshim's must too
            results.append(exc)
    return results


def both_sides(
    model: bytes,
    engine: str | None,
    values: Callable[[], Values],
    updates: Sequence[Callable[[Values], None]],
    run: Callable[[Any], Any],
    level: Any = None,
) -> tuple[list[Any], list[Any]]:
    """:func:`runs_with_added` in onnxruntime (``want``) and in dmlshim's ``engine`` (``got``)."""
    want = runs_with_added(
        lambda so: ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]),
        values,
        updates,
        run,
        level,
    )
    got = runs_with_added(
        lambda so: dmlshim.InferenceSession(model, so, engine=engine), values, updates, run, level
    )
    assert len(got) == len(want)
    return want, got
