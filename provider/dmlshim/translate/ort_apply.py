"""Marking inspect's translations of the nodes onnxruntime's level-1 optimizations remove.

:func:`apply_optimized_away` runs :mod:`.ort_folding` on the top-level graph (with the rounds of folded
values of :mod:`.ort_folded_shapes`) and :mod:`.ort_subgraph_folding` on the bodies, and marks the
translations; :func:`carry_optimized_away` copies those marks onto a translation made at a run's shapes
(``inspect --inputs`` / ``--input-shape``), where the folding is still that of a session's static shapes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .ort_folded_shapes import folded_value_model, worth_values
from .ort_folding import (
    _MAX_PASSES,
    _ONNX,
    _RUN_WARNINGS,
    OPTIMIZED_AWAY_CODE,
    FoldCause,
    _Graph,
    _run,
    optimized_away_reason,
)
from .ort_subgraph_folding import NOT_MODELLED_CODE, BodyCause, body_removals, not_modelled_reason
from .plan import CPU_PROVIDER, NodeTranslation, TensorInfo, replace_translation
from .translator import is_ep_reason

if TYPE_CHECKING:
    from .model_translation import ModelTranslation

__all__ = ["apply_optimized_away", "carry_optimized_away"]

logger = logging.getLogger(__name__)


def apply_optimized_away(
    model: onnx.ModelProto,
    info: Callable[[str], TensorInfo | None],
    top_level: Mapping[int, int],
    translations: list[NodeTranslation],
    reinfer: Callable[[onnx.ModelProto], Callable[[str], TensorInfo | None]] | None = None,
    bodies: Mapping[tuple[str, int], int] | None = None,
    scopes: Mapping[str, Callable[[str], TensorInfo | None]] | None = None,
    overridden: bool = False,
) -> None:
    """Mark the gather/scatter nodes onnxruntime's level-1 optimizations remove (constant folding
    computes them with its CPU kernels at session creation, or they are left unread): placed on the CPU
    with reason ``EP_OPTIMIZED_AWAY``, after the reasons of where they would run without the
    optimizations (a node with no other placement reason would run on DmlExecutionProvider then); inside
    If/Loop/Scan bodies too, and a body node whose removal depends on a condition inspect does not compute
    gets the note ``ORT_OPTIMIZATION_NOT_MODELLED`` instead.

    Args:
        model: the prepared model (its own initializers).
        info: the inferred type and shape of a top-level value.
        top_level: node index in the top-level graph -> position in ``translations``.
        translations: the translations, changed in place.
        reinfer: shape inference of a model (:mod:`.ort_folded_shapes`: the shapes onnxruntime learns
            from the values it folds); without it, the shapes of ``info`` alone.
        bodies: (body path prefix, index in the body) -> position in ``translations``, for the nodes of
            If/Loop/Scan bodies (:mod:`.ort_subgraph_folding`); without it, the top-level graph alone.
        scopes: each body's inferred types and shapes, by its path prefix.
        overridden: some sizes are fixed by free-dimension overrides (``inspect --input-shape``).
    """
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 0)
    fused: dict[str, list[int]] = {}
    g = _Graph(model.graph, model.ir_version, opset, info)
    final = g.fresh(info)
    removed = _run(final, fused)
    if reinfer is not None:
        removed, final = _with_folded_values(model, g, info, removed, fused, reinfer, final)
    positions: list[tuple[int, FoldCause | BodyCause]] = [
        (top_level[i], cause) for i, cause in removed.items() if i in top_level
    ]
    if bodies is not None and any(final.subgraph):  # (an inlined branch may leave a top-level node unread)
        found = body_removals(model.graph, final, model.ir_version, opset, scopes or {}, "", overridden)
        at = {("", i): position for i, position in top_level.items()}  # a top-level node left unread
        positions += [
            (p, cause) for key, cause in found.items() if (p := bodies.get(key, at.get(key))) is not None
        ]
    for position, cause in positions:
        t = translations[position]
        if cause is BodyCause.UNKNOWN_BRANCH:
            translations[position] = replace_translation(t, reasons=(*t.reasons, not_modelled_reason()))
            continue
        # the reasons of the placement it would have without the optimizations stay (EP_CPU_PREFERRED, a
        # provider without the kernel); the provider's warnings about running it do not (it never does)
        reasons = tuple(r for r in t.reasons if not (is_ep_reason(r) and r.code in _RUN_WARNINGS))
        translations[position] = replace_translation(
            t, ort_placement=CPU_PROVIDER, reasons=(*reasons, optimized_away_reason(cause))
        )


def _with_folded_values(
    model: onnx.ModelProto,
    g: _Graph,
    info: Callable[[str], TensorInfo | None],
    removed: dict[int, FoldCause],
    fused: dict[str, list[int]],
    reinfer: Callable[[onnx.ModelProto], Callable[[str], TensorInfo | None]],
    final: _Graph,
) -> tuple[dict[int, FoldCause], _Graph]:
    """``removed`` again with the shapes onnx's inference gives once the folded values are initializers,
    as onnxruntime's inference does after each fold (a few rounds, while more folds)."""
    known: dict[str, np.ndarray] = {}  # folded values computed so far, by name
    for _ in range(_MAX_PASSES):
        if not worth_values(model.graph, removed, info):
            break
        computed = [i for i, c in removed.items() if c in (FoldCause.STATIC_SHAPE, FoldCause.CONSTANT_INPUTS)]
        before = len(known)
        valued = folded_value_model(model, computed, removed, info, fused, known)
        if valued is None:
            break
        try:
            learned = reinfer(valued)
        except Exception as exc:  # onnx's inference refusing a folded value: the shapes known so far stand
            logger.debug("no inference with the folded values: %s: %s", type(exc).__name__, exc)
            break
        first = info

        def info(name: str, learned=learned, first=first) -> TensorInfo | None:
            found = learned(name)
            if found is not None and found.static_dims is not None:
                return found
            return first(name)

        fused = {}
        fresh = g.fresh(info)
        again = _run(fresh, fused)
        if len(again) > len(removed):
            removed, final = again, fresh
        elif len(known) == before:
            break  # neither a node more removed nor a value more known: no later round changes anything
    return removed, final


def carry_optimized_away(source: ModelTranslation, target: ModelTranslation) -> ModelTranslation:
    """``target`` (the same model's translation at a run's shapes) with the nodes ``source`` (its static
    translation with ``optimized``) reports removed or not modelled marked the same way."""
    nodes = list(target.nodes)
    codes = (OPTIMIZED_AWAY_CODE, NOT_MODELLED_CODE)
    for k, (mine, static) in enumerate(zip(nodes, source.nodes, strict=False)):
        marks = tuple(r for r in static.reasons if r.code in codes)
        if not marks or mine.name != static.name:
            continue
        if marks[0].code == NOT_MODELLED_CODE:
            nodes[k] = replace_translation(mine, reasons=(*mine.reasons, *marks))
            continue
        reasons = tuple(r for r in mine.reasons if not (is_ep_reason(r) and r.code in _RUN_WARNINGS))
        nodes[k] = replace_translation(mine, ort_placement=CPU_PROVIDER, reasons=(*reasons, *marks))
    return dataclasses.replace(target, nodes=tuple(nodes))
