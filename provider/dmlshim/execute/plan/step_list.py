"""The partitioned engine's step list: one step per CPU segment (an onnxruntime session built on first
use) and one per emulated node, in the order a run walks them."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
import onnxruntime as ort

from ...runtime.options_copy import copy_options
from ...runtime.real import is_callers_options
from ...translate import Status, TensorInfo
from ..engine import EngineConfig
from ..weights.shared import SharedWeights
from .cpu_step import CpuStep, RunState, Values
from .partition import CpuSegment, Partition
from .segments import BoundaryTypes, segment_model
from .sessions import cpu_session
from .step_keys import static_key
from .steps import EmulatedStep

logger = logging.getLogger(__name__)

Step = Callable[[Values, RunState], None]
"""One step of a run: reads and writes the value table."""


def make_steps(
    model: onnx.ModelProto,
    partition: Partition,
    names: Sequence[str],
    candidates: Mapping[int, Any],
    slot_of: Mapping[int, Any],
    infos: Mapping[str, TensorInfo],
    types: Mapping[str, onnx.TypeProto],
    graph_inputs: Sequence[str],
    init_protos: Mapping[str, onnx.TensorProto],
    config: EngineConfig,
    shared: SharedWeights | None,
    reference: bool,
    same_segment: Callable[[str, Sequence[str], Sequence[str]], CpuStep | None] | None,
) -> tuple[list[Step], int]:
    """The step list a run walks, and its number of CPU segments: a :class:`CpuStep` per CPU segment (its
    session built on first use, or taken from ``same_segment``, which finds a step of that label, inputs
    and outputs in another engine), an :class:`EmulatedStep` per emulated node."""
    steps: list[Step] = []
    nodes = model.graph.node
    crossing = {n for step in partition.segments for n in step.inputs}
    boundary = BoundaryTypes(model, crossing, types, graph_inputs)
    segments = 0
    # A node onnxruntime runs alone gets its session at run time, once per kind of input: from a copy of
    # the program's own options taken now, which the program may change after construction (onnxruntime
    # reads them once, when the session is built). A copy carries all a one-node session of a standard
    # operator reads of them.
    one_node_options = config.options_object()
    if is_callers_options(one_node_options):
        one_node_options = copy_options(one_node_options)
    for step in partition.steps:
        if isinstance(step, CpuSegment):
            if not step.outputs:
                logger.debug("CPU segment %d produces nothing used later; skipped", step.index)
                continue
            label = f"CPU partition {segments} (nodes {names[step.nodes[0]]!r}..{names[step.nodes[-1]]!r})"
            same = same_segment(label, step.inputs, step.outputs) if same_segment else None
            if same is not None:
                steps.append(same)
                segments += 1
                continue
            args = (model, step, init_protos, config, label, shared)
            build = functools.partial(_segment_session, boundary, False, *args)
            relaxed = functools.partial(_segment_session, boundary, True, *args)
            steps.append(CpuStep(build, step.inputs, step.outputs, label, relaxed))
            segments += 1
        else:
            i = step.node
            since, t, node_infos = candidates[i]
            key = static_key(node_infos) if t.status is Status.DML else None
            steps.append(
                EmulatedStep(
                    node=nodes[i],
                    name=names[i],
                    since_version=since,
                    slot=slot_of[i],
                    feature_level=config.feature_level,
                    index_mode=config.index_mode,
                    model=model,
                    sess_options=one_node_options,
                    static=t if key is not None else None,
                    static_key=key,
                    inferred_output=infos.get(nodes[i].output[0]),
                    reference=reference,
                    full_check=config.full_check or config.profiling,
                )
            )
    return steps, segments


def _segment_session(
    boundary: BoundaryTypes,
    relaxed: bool,
    model: onnx.ModelProto,
    step: CpuSegment,
    init_protos: Mapping[str, onnx.TensorProto],
    config: EngineConfig,
    label: str,
    shared: SharedWeights | None,
) -> ort.InferenceSession | None:
    """A CPU segment's session, its inputs typed as :class:`BoundaryTypes` says; ``relaxed``: with element
    types only, or None when that declares nothing less."""
    if relaxed and not boundary.relaxes(step.inputs):
        return None
    types = boundary.elem_only if relaxed else boundary.strict
    return segment_session(model, step, types, init_protos, config, label, shared)


def segment_session(
    model: onnx.ModelProto,
    segment: CpuSegment,
    types: Mapping[str, onnx.TypeProto],
    init_protos: Mapping[str, onnx.TensorProto],
    config: EngineConfig,
    label: str,
    shared: SharedWeights | None,
) -> ort.InferenceSession:
    """The session of one CPU segment (built when first needed)."""
    seg_model = segment_model(model, segment, types, init_protos, shared)
    return cpu_session(seg_model, config.sess_options, label, shared, config.own_options)
