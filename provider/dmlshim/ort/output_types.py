"""The graph outputs a session reports, with onnxruntime's own answer where it was asked
(:mod:`dmlshim.model.ort_outputs`): its acceptance session's ``get_outputs()``, graph optimizations off."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import onnx

from ..execute.feeds import NodeArg
from ..execute.weights.model_source import LoadedModel
from ..model.ort_outputs import OrtOutput, OrtOutputs
from ..model.weightless import without_weights
from ..runtime.real import OrtInferenceSession
from .free_dims import overrides_by_name

__all__ = ["overridden_outputs", "with_onnxruntime_outputs"]

logger = logging.getLogger(__name__)


def _elem_type(type_string: str) -> int:
    """The ONNX element type of onnxruntime's ``tensor(...)`` type string (0 for another type)."""
    if not (type_string.startswith("tensor(") and type_string.endswith(")")):
        return 0
    try:
        return int(onnx.TensorProto.DataType.Value(type_string[len("tensor(") : -1].upper()))
    except ValueError:
        return 0


def _theirs(ours: NodeArg, theirs: OrtOutput) -> NodeArg:
    """``ours`` typed and shaped as onnxruntime reports it."""
    dims = tuple(theirs.shape)
    if ours.type == theirs.type and ours.dims == dims:
        return ours
    elem = ours.elem_type if ours.type == theirs.type else _elem_type(theirs.type)
    # onnxruntime's [] is a scalar or no shape: a rank dmlshim knew and onnxruntime reports empty is lost
    rank_known = bool(dims) or (ours.rank_known and not ours.dims and ours.type == theirs.type)
    logger.debug(
        "output %r: onnxruntime reports %s %s (dmlshim's reading: %s %s)",
        ours.name,
        theirs.type,
        list(dims),
        ours.type,
        list(ours.dims),
    )
    return dataclasses.replace(ours, dims=dims, type=theirs.type, elem_type=elem, rank_known=rank_known)


def _asked(model: onnx.ModelProto, overrides: Mapping[str, int]) -> OrtOutputs | None:
    """onnxruntime's ``get_outputs()`` for ``model`` (its weights left out) with these free-dimension
    overrides, graph optimizations off (None: it refuses)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    for name, value in overrides.items():
        options.add_free_dimension_override_by_name(name, value)
    try:
        payload = without_weights(model).SerializeToString()
        session = OrtInferenceSession(payload, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # any refusal: dmlshim's own reading stays
        logger.debug("onnxruntime not asked for the outputs with the overrides: %s", exc)
        return None
    return OrtOutputs.of(session)


def _applied(
    outputs: tuple[NodeArg, ...], answer: OrtOutputs | None, model: onnx.ModelProto
) -> tuple[NodeArg, ...] | None:
    """``outputs`` as ``answer`` types them (None: no answer, or it names other outputs). An output that is
    a graph input or an initializer of ``model`` keeps its description from its source (in the answer's
    weightless model a large initializer is a graph input)."""
    if answer is None or [o.name for o in answer.outputs] != [o.name for o in outputs]:
        return None
    graph = model.graph
    sources = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    return tuple(
        ours if ours.name in sources else _theirs(ours, theirs)
        for ours, theirs in zip(outputs, answer.outputs, strict=True)
    )


def overridden_outputs(
    model: onnx.ModelProto, inputs: tuple[NodeArg, ...], outputs: tuple[NodeArg, ...]
) -> tuple[NodeArg, ...] | None:
    """The ``outputs`` of ``model`` (as described before free-dimension overrides) as onnxruntime reports
    them once the overrides that fixed the session's ``inputs`` are applied (which it does even with graph
    optimizations off, resolving the graph again): a session of the model with those overrides by name,
    graph optimizations off. None when they are no overrides by name (by denotation) or onnxruntime
    refuses: dmlshim then resolves twice itself (:func:`dmlshim.ort.free_dims.outputs_for_inputs`)."""
    overrides = overrides_by_name(model, inputs)
    if not overrides:
        return None
    return _applied(outputs, _asked(model, overrides), model)


def with_onnxruntime_outputs(
    loaded: LoadedModel, inputs: tuple[NodeArg, ...], outputs: tuple[NodeArg, ...]
) -> tuple[NodeArg, ...]:
    """A session's ``outputs`` as onnxruntime's acceptance session of ``loaded`` typed them, when it was
    built (``loaded.acceptance.outputs``). Unchanged without that answer, when it names other outputs, or
    when free-dimension overrides fixed some of the session's ``inputs`` (the acceptance session has none:
    :func:`overridden_outputs` answered then)."""
    if overrides_by_name(loaded.proto, inputs) != {}:
        return outputs
    applied = _applied(outputs, getattr(loaded.acceptance, "outputs", None), loaded.proto)
    return outputs if applied is None else applied
