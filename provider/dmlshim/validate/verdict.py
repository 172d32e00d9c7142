"""The verdict: dmlshim's run against the like-for-like reference, output by output and node by node,
with the whole-model onnxruntime run alongside as information, and the warnings that matter on DirectML."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..comparison import array_difference, exact_difference
from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError, DmlShimError
from ..execute.weights.model_source import LoadedModel, ModelSource, load_model
from ..graph import is_gather_scatter, uses_half_floats, walk_nodes
from ..inputs import annotate_error
from ..kernels.options import IndexMode
from ..resources import guard_resources
from ..translate import ModelTranslation, translate_model
from .attribution import compare_nodes, dependencies, suspects, upstream_order
from .engine_side import COMPARABLE_LEVEL, PARTITIONED, custom_op_layout_reason, engine_runs
from .levels import ORT_DEFAULT_LEVEL, note_default_level_runs, only_optimised_runs
from .node_warnings import declared_shape_warnings, node_warnings, session_refusal_warnings
from .random_nodes import random_node_warnings
from .references import (
    DEFAULT_OPTIMIZATION_LEVEL,
    ONE_RUN_LEVEL,
    SIDES,
    PartitionedRun,
    checked_run,
    feeds_for,
    partitioned_run,
    whole_model_run,
)
from .references import optimization_level as ort_level
from .results import (
    CAUSE_GATHER_SCATTER,
    CAUSE_IDENTICAL,
    CAUSE_OTHER_NODES,
    CAUSE_UNEXPLAINED,
    RUNS_ENGINE,
    RUNS_ONE,
    RUNS_THREE,
    Comparison,
    Mismatch,
    NodeValidation,
    OutputComparison,
    ValidationReport,
    WholeModelComparison,
)
from .value_kinds import (
    as_compared,
    comparable,
    compared_dtype,
    feed_shape,
    fitting_tolerance,
    is_array,
    kind_text,
    narrow_bits,
)

logger = logging.getLogger(__name__)


def compare_arrays(
    actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0, atol: float = 0.0, *, exact: bool = False
) -> Comparison:
    """Compare dmlshim's array with a reference's.

    The dtype and shape must be identical. With ``exact``, elements must be bit-identical (any NaN equals
    any NaN); otherwise integer and bool elements must be equal and floating-point ones satisfy
    ``|actual - expected| <= atol + rtol * |expected|`` (NaN equal to NaN, infinities to themselves).
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.dtype != expected.dtype:
        return Comparison(
            False, None, actual.size, None, f"dtype {actual.dtype}, the reference gives {expected.dtype}"
        )
    if actual.shape != expected.shape:
        return Comparison(
            False,
            None,
            actual.size,
            None,
            f"shape {list(actual.shape)}, the reference gives {list(expected.shape)}",
        )
    d = exact_difference(actual, expected) if exact else array_difference(actual, expected, rtol, atol)
    if d.first is None:
        return Comparison(True, d.max_abs_diff, 0, None)
    first = d.first
    return Comparison(False, d.max_abs_diff, d.mismatches, Mismatch(first, actual[first], expected[first]))


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
    optimization_level: str | None = None,
    engine: str = PARTITIONED,
) -> ValidationReport:
    """Run a model through dmlshim and through references on the same feeds, and compare.

    The verdict compares dmlshim's run with a reference that has the same partition but runs the
    gather/scatter nodes in onnxruntime (see :mod:`dmlshim.validate.references`): exactly, bit for bit
    with NaN equal to NaN, unless a tolerance is given. The whole model run by onnxruntime is compared too,
    with a tolerance fitting each output's dtype, as information.

    Args:
        model: a model path, serialized bytes or ``ModelProto``.
        inputs: feeds by name, an ``.npz`` path, or None for random inputs (:mod:`dmlshim.inputs`).
        feature_level: the DirectML feature level to emulate.
        rtol: relative tolerance of the verdict for floating-point outputs (0 with atol 0: exact).
        atol: absolute tolerance of the verdict for floating-point outputs.
        input_shapes: shapes of inputs with symbolic dims (input name -> shape, or dim name -> size), for
            random inputs.
        seed: the seed of random inputs.
        index_mode: dmlshim's out-of-range policy (``"error"`` or ``"clamp"``).
        optimization_level: onnxruntime's graph optimisation on every side: ``disabled``, ``basic``,
            ``extended`` or ``all``; None (default): ``disabled``, or ``all`` when onnxruntime itself
            fails the model at ``disabled`` and runs it at its default level (:mod:`.levels`; the report
            says why in ``optimization_level_reason``).
        engine: the engine whose run is checked (``InferenceSession(engine=...)``): ``partitioned``
            (default) against the same partition with onnxruntime running the gather/scatter nodes, any
            other against onnxruntime running the whole model (:mod:`dmlshim.validate.engine_side`).

    Returns:
        The report; ``report.match`` says whether every output agreed with the like-for-like reference.

    Raises:
        BadModelError: the model cannot be read, or onnxruntime cannot load a partition of it.
        BadInputError: the feeds do not fit the model, or onnxruntime rejects them (e.g. an index out of
            range), or inputs cannot be generated, or an unknown optimisation level.
        DmlShimError: dmlshim refused the run (e.g. ``IndexOutOfRangeError`` from an emulated node).
    """
    level = feature_level if isinstance(feature_level, FeatureLevel) else _level(feature_level)
    mode = _index_mode(index_mode)
    if optimization_level is not None:
        optimization_level_checked(optimization_level)
    # A model file is read without its large weights: every onnxruntime session reads them from the file.
    loaded = load_model(model, weightless=True)
    try:
        return _validate_loaded(
            loaded, inputs, level, rtol, atol, input_shapes, seed, mode, optimization_level, engine
        )
    except DmlShimError as exc:
        # The engines run copies and parts of the model, so errors raised there do not know the file.
        if exc.path is None and loaded.path is not None:
            exc.path = str(loaded.path)
        raise


def optimization_level_checked(name: str) -> None:
    """Raise BadInputError for an unknown optimisation level name."""
    ort_level(name)


def _validate_loaded(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None,
    level: FeatureLevel,
    rtol: float,
    atol: float,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
    index_mode: IndexMode,
    requested_level: str | None,
    engine_name: str = PARTITIONED,
) -> ValidationReport:
    proto = loaded.proto
    opt_level = requested_level or DEFAULT_OPTIMIZATION_LEVEL
    feeds, source, generated = feeds_for(loaded, inputs, input_shapes, seed)
    common = {
        "feature_level": level,
        "index_mode": index_mode,
        "level": opt_level,
        "model_path": loaded.weights_path,
    }
    whole: dict[str, np.ndarray] | None
    shapes = {k: feed_shape(v) for k, v in feeds.items()}
    translated: list[ModelTranslation | None] = []

    def translate() -> None:  # while onnxruntime builds the check's session
        if not translated:
            translated.append(_translations(proto, level, shapes))

    notes: list[str] = []
    try:
        try:
            ours, ref, whole, whole_error, runs = _sides(loaded, feeds, common, engine_name, translate, notes)
        except DmlShimError as exc:
            # onnxruntime's own session of the model file (as a deployment would load it)
            reason = only_optimised_runs(exc, proto, feeds, loaded.path) if requested_level is None else None
            if reason is None:
                note_default_level_runs(exc, proto, feeds, opt_level, loaded.path)
                raise
            logger.info("%s", reason)
            notes.append(reason)
            common["level"] = ORT_DEFAULT_LEVEL
            ours, ref, whole, whole_error, runs = _sides(loaded, feeds, common, engine_name, translate, notes)
        opt_level = common["level"]
    except DmlShimError as exc:
        if generated is not None:
            # say which shapes were generated and how to choose others
            annotate_error(exc, generated, proto.graph)
        raise
    exact = rtol == 0 and atol == 0

    def agree(a: np.ndarray, b: np.ndarray) -> bool:
        return compare_arrays(a, b, rtol, atol, exact=exact).match

    deps = dependencies(proto.graph)
    compared = compare_nodes(deps, ours.values, ref.values, agree)
    translation = translated[0] if translated else _translations(proto, level, shapes)
    translations = {t.name: t for t in translation.nodes} if translation is not None else {}
    records = {r.name: r for r in ours.record.nodes}
    nodes = tuple(
        NodeValidation(
            name,
            node.op_type,
            translations.get(name),
            records.get(name),
            compared.get(name, ((), None))[1],
            compared.get(name, ((), None))[0],
        )
        for name, node in walk_nodes(proto.graph)
        if is_gather_scatter(node)
    )

    outputs: list[OutputComparison] = []

    def blamed(output: str) -> bool:
        return bool(suspects(output, deps, nodes))

    for o in proto.graph.output:
        raw_got, raw_want = ours.outputs[o.name], ref.outputs[o.name]
        # bfloat16 and float8 outputs (OrtValues) compare as their values, decoded exactly to float32
        declared = o.type.tensor_type.elem_type if o.type.HasField("tensor_type") else None
        dtype = compared_dtype(raw_got, declared)
        bits = narrow_bits(raw_got, declared) if dtype is not None else None
        raw_got, raw_want = as_compared(raw_got, declared), as_compared(raw_want, declared)
        if is_array(raw_got) and is_array(raw_want):
            got, want = np.asarray(raw_got), np.asarray(raw_want)
            c = compare_arrays(got, want, rtol, atol, exact=exact)
        else:
            # Sequences and maps: the same structure, then the same elements.
            (got_kind, got), (want_kind, want) = comparable(raw_got), comparable(raw_want)
            c = (
                compare_arrays(got, want, rtol, atol, exact=exact)
                if got_kind == want_kind
                else Comparison(
                    False,
                    None,
                    got.size,
                    None,
                    f"{kind_text(raw_got)}, the reference gives {kind_text(raw_want)}",
                )
            )
        outputs.append(
            OutputComparison(
                name=o.name,
                match=c.match,
                dtype=dtype or str(got.dtype),
                shape=tuple(got.shape),
                max_abs_diff=c.max_abs_diff,
                mismatches=c.mismatches,
                first_mismatch=c.first_mismatch,
                problem=c.problem,
                upstream_nodes=upstream_order(o.name, deps, nodes),
                suspect_nodes=suspects(o.name, deps, nodes) if not c.match else (),
                whole_model=(
                    _whole(got, as_compared(whole[o.name], declared), c.match, blamed(o.name), dtype)
                    if whole is not None
                    else None
                ),
                dmlshim=got,
                reference=want,
                dmlshim_bits=bits,
            )
        )
    report = ValidationReport(
        model=loaded.path or "<in-memory model>",
        feature_level=level,
        match=all(o.match for o in outputs),
        outputs=tuple(outputs),
        nodes=nodes,
        warnings=tuple(node_warnings(nodes, level))
        + session_refusal_warnings(translation.session_refusals if translation is not None else ())
        + declared_shape_warnings(proto, ours.record, ours.outputs)
        + random_node_warnings(proto.graph),
        rtol=rtol,
        atol=atol,
        inputs_source=source,
        seed=seed if source == "random" else None,
        input_shapes=tuple(shapes.items()),
        input_symbols=tuple(generated.symbols.items()) if generated is not None else (),
        optimization_levels=tuple((side, opt_level) for side in SIDES),
        whole_model_error=whole_error,
        feeds=tuple(feeds.items()),
        runs=runs,
        engine=engine_name,
        emulation=_emulation_against(loaded, feeds, common, ours) if engine_name == "directml" else (),
        optimization_level_reason="; then ".join(notes) or None,
        loaded=loaded if engine_name == "directml" else None,
    )
    logger.info("validate %s at %s: %s", report.model, level.short, "match" if report.match else "MISMATCH")
    return report


def _emulation_against(
    loaded: LoadedModel, feeds: Mapping[str, np.ndarray], common: dict[str, Any], real: PartitionedRun
) -> tuple[tuple[str, str], ...]:
    """The third side of ``validate --engine directml``: dmlshim's emulation (the partitioned engine)
    against real DirectML's outputs, one ``(output, result)`` pair per output."""
    from ..directml.sweep import compare

    try:
        emulated, _ = engine_runs(
            loaded,
            feeds,
            engine=PARTITIONED,
            feature_level=common["feature_level"],
            index_mode=common["index_mode"],
            level=common["level"],
        )
    except DmlShimError as exc:
        return (("*", f"the emulation failed: {exc}"),)
    pairs = []
    for name, value in real.outputs.items():
        other = emulated.outputs.get(name)
        if not is_array(value) or not is_array(other):
            pairs.append((name, "not compared (not a tensor)"))
            continue
        pairs.append((name, compare([value], [other]).text))
    return tuple(pairs)


def _sides(
    loaded: LoadedModel,
    feeds: Mapping[str, np.ndarray],
    common: dict[str, Any],
    engine_name: str,
    while_building: Callable[[], None],
    notes: list[str],
) -> tuple[PartitionedRun, PartitionedRun, dict[str, Any] | None, str | None, str]:
    """dmlshim's run, the like-for-like reference, the whole model's outputs (or None and why not) and
    how the sides were run (:data:`RUNS_ONE`, :data:`RUNS_THREE` or :data:`RUNS_ENGINE`). Where the level
    had to change (``common["level"]`` then holds the new one), why is appended to ``notes``."""
    proto, opt_level = loaded.proto, common["level"]
    if engine_name != PARTITIONED:
        ours, ref = engine_runs(
            loaded,
            feeds,
            engine=engine_name,
            feature_level=common["feature_level"],
            index_mode=common["index_mode"],
            level=opt_level,
        )
        while_building()
        reason = custom_op_layout_reason(engine_name, opt_level, proto.graph, ours, ref)
        if reason is not None:
            logger.info("%s", reason)
            notes.append(reason)
            common["level"] = COMPARABLE_LEVEL
            return _sides(loaded, feeds, common, engine_name, while_building, notes)
        return ours, ref, dict(ref.outputs), None, RUNS_ENGINE
    one, engine = (
        checked_run(proto, feeds, **common, while_building=while_building)
        # Half floats: the whole model and the partitions round them at different places.
        if opt_level == ONE_RUN_LEVEL and not uses_half_floats(proto.graph)
        else (None, None)
    )
    if one is not None:
        return one, one, dict(one.outputs), None, RUNS_ONE
    ours = partitioned_run(proto, feeds, reference=False, engine=engine, **common)
    ref = partitioned_run(proto, feeds, reference=True, segments_from=ours.engine, **common)
    del engine
    # The engines' onnxruntime sessions (a copy of the weights) go before the whole-model session.
    ours, ref = dataclasses.replace(ours, engine=None), dataclasses.replace(ref, engine=None)
    # onnxruntime's own session of the model file (it reads and copies the weights itself)
    whole, whole_error = whole_model_run(proto, feeds, opt_level, loaded.path)
    return ours, ref, whole, whole_error, RUNS_THREE


def _whole(
    got: np.ndarray,
    onnxruntime: np.ndarray,
    like_for_like_match: bool,
    blamed: bool,
    dtype: str | None = None,
) -> WholeModelComparison:
    """``dtype``: the output's own type when its values were decoded to float32 (bfloat16, float8)."""
    if not is_array(onnxruntime):
        onnxruntime = comparable(onnxruntime)[1]  # a sequence or map: its elements, as ``got`` holds them
    onnxruntime = np.asarray(onnxruntime)
    rtol, atol = fitting_tolerance(onnxruntime, dtype)
    exact = compare_arrays(got, onnxruntime, exact=True)
    close = exact if exact.match else compare_arrays(got, onnxruntime, rtol, atol)
    if exact.match:
        cause = CAUSE_IDENTICAL
    elif like_for_like_match:
        cause = CAUSE_OTHER_NODES
    else:
        cause = CAUSE_GATHER_SCATTER if blamed else CAUSE_UNEXPLAINED
    return WholeModelComparison(
        rtol=rtol,
        atol=atol,
        identical=exact.match,
        within_tolerance=close.match,
        max_abs_diff=exact.max_abs_diff,
        mismatches=close.mismatches,
        first_mismatch=close.first_mismatch or exact.first_mismatch,
        problem=close.problem,
        cause=cause,
        onnxruntime=onnxruntime,
    )


def _translations(
    proto: onnx.ModelProto, level: FeatureLevel, shapes: Mapping[str, tuple[int, ...]]
) -> ModelTranslation | None:
    graph = proto.graph
    init = {t.name for t in graph.initializer}
    names = {v.name for v in graph.input if v.name not in init}
    try:
        translation = translate_model(proto, level, {k: v for k, v in shapes.items() if k in names})
    except DmlShimError as exc:
        logger.warning("static translation failed (%s): node records carry the run only", exc)
        return None
    return translation


def _level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except ValueError as exc:
        raise BadInputError(str(exc), value=text) from exc


def _index_mode(text: str) -> IndexMode:
    try:
        return IndexMode(text)
    except ValueError:
        raise BadInputError(f"index_mode must be 'error' or 'clamp', not {text!r}", value=text) from None
