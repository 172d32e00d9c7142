"""A model with no gather/scatter node to emulate: the partitioned engine runs it as it is, in one
onnxruntime session, as the cpu engine does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..engine import EngineConfig
from ..plan.cpu_step import CpuStep, Values, run_session
from ..plan.sessions import ORT_ERRORS, cpu_session, ort_run_error
from ..weights.shared import SharedWeights, light_copy
from ..weights.values import initializer_value


def plain_model_step(
    model: onnx.ModelProto, config: EngineConfig, folder: str | None
) -> tuple[CpuStep, Mapping[str, np.ndarray]]:
    """The one step that runs the whole model, and the defaults of the initializers a caller may override
    (those onnxruntime takes as feeds: an IR 3 model's initializers listed as inputs are constants to it).
    """
    graph = model.graph
    graph_inputs = [v.name for v in graph.input]
    whole = (
        None
        if config.sess_options is not None
        else SharedWeights({t.name: t for t in graph.initializer}, model_path=config.model_path, graph=graph)
    )
    payload = light_copy(model, whole) if whole else model
    session = cpu_session(payload, config.sess_options, "the model", whole, config.own_options)
    step = CpuStep(session, graph_inputs, [o.name for o in graph.output], "the model")
    takes = {i.name for i in session.get_inputs()} | {i.name for i in session.get_overridable_initializers()}
    inputs = set(graph_inputs)
    defaults = {
        t.name: initializer_value(t, folder)
        for t in graph.initializer
        if t.name in inputs and t.name in takes
    }
    return step, defaults


def run_plain(step: CpuStep, values: Values, output_names: Sequence[str], run_options: Any) -> list[Any]:
    """Run the whole-model step on ``values`` (the feeds over the overridable defaults)."""
    feeds = {n: values[n] for n in step.inputs if n in values}
    try:
        return run_session(step.session, output_names, feeds, run_options)
    except ORT_ERRORS as exc:
        raise ort_run_error(exc, "onnxruntime failed running the model") from exc
