"""Runs of one model with values added through ``SessionOptions.add_initializer`` and changed between
runs, in onnxruntime's CPU provider (one intra-op thread) and in a dmlshim engine, with the same options and
the same changes (shared by the live-initializer tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnxruntime as ort

import dmlshim

Values = dict[str, Any]


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
