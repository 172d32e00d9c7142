"""The three runs ``dmlshim validate`` compares, on the same feeds and single-threaded:

* ``dmlshim``: the partitioned engine, gather/scatter nodes executed from their DirectML descriptors;
* ``reference``: the same engine with the same partition (same CPU segments, same boundaries), each
  emulated gather/scatter node run alone by onnxruntime instead of the kernels. It differs from dmlshim's
  run only in what the gather/scatter nodes computed, so the two must agree exactly;
* ``whole_model``: onnxruntime running the whole model in one session. Its fusions and fp16 handling cross
  the partition boundaries, so it may differ from both in the last bits; it is information.

Each side uses the same onnxruntime graph optimisation level (``disabled`` by default: then the fp32 ops
of the whole model compute exactly what the partitions compute, and the whole-model comparison shows what
fusion would add only when asked).

At ``disabled`` the three runs are first made as one (:func:`checked_run`): onnxruntime runs the whole model
once with every emulated node's inputs and output fetched, and each node's kernel runs on the inputs
onnxruntime computed for it. When every kernel reproduces onnxruntime's output bit for bit, the partition
boundaries change nothing at that level, so dmlshim's run, the reference and the whole model are the same
values, computed once, with one copy of the weights in onnxruntime (read from the model's files). When a
kernel differs or onnxruntime refuses the run, the three runs are made as above.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, BadModelError
from ..execute.engine import EngineConfig
from ..execute.engines.partitioned import PartitionedEngine
from ..execute.feeds import FeedValidator, load_npz, node_arg
from ..execute.plan.checks import EmulatedIO
from ..execute.plan.sessions import ORT_ERRORS
from ..execute.record import RunRecord
from ..execute.weights.model_source import LoadedModel
from ..inputs import GeneratedInputs, generate
from ..inputs.narrow_floats import NARROW_TYPE_NAMES, as_ortvalues, narrow_feeds
from ..inputs.sizes import refuse_run_sizes
from ..kernels.options import IndexMode
from ..runtime.real import OrtInferenceSession

OPTIMIZATION_LEVELS: dict[str, ort.GraphOptimizationLevel] = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
"""``--optimization-level`` names and onnxruntime's ``GraphOptimizationLevel`` they select."""

DEFAULT_OPTIMIZATION_LEVEL = "disabled"

SIDES = ("dmlshim", "reference", "whole_model")

ONE_RUN_LEVEL = "disabled"
"""The optimisation level at which the three runs can be one (:func:`checked_run`)."""


def optimization_level(name: str) -> ort.GraphOptimizationLevel:
    """onnxruntime's level for a name of :data:`OPTIMIZATION_LEVELS`.

    Raises:
        BadInputError: an unknown name.
    """
    try:
        return OPTIMIZATION_LEVELS[name]
    except KeyError:
        raise BadInputError(
            f"optimization level must be one of {', '.join(OPTIMIZATION_LEVELS)}, not {name!r}", value=name
        ) from None


def session_options(level: str = DEFAULT_OPTIMIZATION_LEVEL) -> ort.SessionOptions:
    """Single-threaded options (onnxruntime's ScatterND is racy on duplicates with more threads)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # our error paragraph is enough; onnxruntime's own line is noise
    so.graph_optimization_level = optimization_level(level)
    return so


def reference_session(
    model: onnx.ModelProto | bytes | str, optimization_level: str = DEFAULT_OPTIMIZATION_LEVEL
) -> ort.InferenceSession:
    """An onnxruntime CPU session of the whole model with one intra-op thread.

    Raises:
        BadModelError: onnxruntime cannot load the model.
    """
    so = session_options(optimization_level)
    payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    try:
        return OrtInferenceSession(payload, so, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise BadModelError(f"onnxruntime cannot load the model: {exc}") from exc


@dataclass(frozen=True)
class PartitionedRun:
    """One run of the partitioned engine.

    Attributes:
        outputs: every graph output by name.
        values: every value that crossed a step boundary (emulated nodes' inputs and outputs among them).
        record: the run record.
        emulated: the emulated nodes with the values they read and write.
    """

    outputs: Mapping[str, np.ndarray]
    values: Mapping[str, Any]
    record: RunRecord
    emulated: tuple[EmulatedIO, ...]
    engine: PartitionedEngine | None = None


def feeds_for(
    loaded: LoadedModel,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
    seed: int,
) -> tuple[dict[str, np.ndarray], str, GeneratedInputs | None]:
    """The feeds (checked against the graph inputs), their source (``random``, ``file`` or ``given``)
    and, for generated feeds, how they were generated."""
    generated = None
    if inputs is None:
        generated = generate(loaded, input_shapes=input_shapes, seed=seed)
        feeds, source = dict(generated.feeds), "random"
    elif isinstance(inputs, (str, os.PathLike)):
        # bfloat16 and float8 inputs: raw bits or float32 values (inputs/narrow_floats.py)
        feeds, source = narrow_feeds(loaded.proto.graph, load_npz(os.fspath(inputs))), "file"
    else:
        feeds, source = dict(inputs), "given"
    graph = loaded.proto.graph
    init_names = {t.name for t in graph.initializer}
    validator = FeedValidator(
        tuple(node_arg(v) for v in graph.input if v.name not in init_names),
        tuple(node_arg(v) for v in graph.input if v.name in init_names),
    )
    feeds = validator.validate(feeds)
    if generated is None:  # generated inputs were sized when they were drawn
        # also the sizes the feeds' values set (fed_values, computed_values, valued_shapes): refused
        # before onnxruntime (reference or engine) allocates them
        refuse_run_sizes(loaded.proto, feeds, path=loaded.path)
    return feeds, source, generated


def _config(
    feature_level: FeatureLevel, index_mode: IndexMode, level: str, model_path: str | None, check: bool
) -> EngineConfig:
    # dmlshim's own single-threaded options for every session: large weights are read from the model's
    # files by each session that needs them, never serialized into it.
    return EngineConfig(
        feature_level=feature_level,
        index_mode=index_mode,
        own_options=functools.partial(session_options, level),
        model_path=model_path,
        whole_model_check=check,
        full_check=True,  # every element of every scatter proved, on the one run validate makes
    )


def checked_run(
    proto: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    feature_level: FeatureLevel,
    index_mode: IndexMode,
    level: str,
    model_path: str | None,
    while_building: Callable[[], object] | None = None,
) -> tuple[PartitionedRun | None, PartitionedEngine]:
    """The three runs as one, when they can be (see the module docstring): dmlshim's run answered by the
    whole-model check, or None; and the engine, whose partitions the separate runs then walk.
    ``while_building`` is called while onnxruntime builds the check's session."""
    engine = PartitionedEngine(
        proto,
        _config(feature_level, index_mode, level, model_path, check=True),
        check_always=True,
        while_building=while_building,
    )
    names = [o.name for o in proto.graph.output]
    answer = engine.run_checked(names, feeds)
    if answer is None and not engine.emulated_nodes:
        # Nothing emulated: the model is one onnxruntime session, the same on every side.
        answer = engine.run_traced(names, feeds)
    engine.drop_check()  # its session (a copy of the weights) goes before any other is built
    if answer is None:
        return None, engine
    results, record, values = answer
    return (
        PartitionedRun(dict(zip(names, results, strict=True)), values, record, engine.emulated_io, None),
        engine,
    )


def partitioned_run(
    proto: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    feature_level: FeatureLevel,
    index_mode: IndexMode,
    level: str,
    reference: bool,
    model_path: str | None,
    segments_from: PartitionedEngine | None = None,
    engine: PartitionedEngine | None = None,
) -> PartitionedRun:
    """Run the model through the partitioned engine (``reference``: gather/scatter nodes by onnxruntime),
    with the CPU segments' sessions of ``segments_from`` when given (the same segments, built once), or
    through ``engine`` (one :func:`checked_run` built) when given."""
    if engine is None:
        # walk the partitions: they are what the two runs must share
        config = _config(feature_level, index_mode, level, model_path, check=False)
        engine = PartitionedEngine(proto, config, reference=reference, segments_from=segments_from)
    names = [o.name for o in proto.graph.output]
    results, record, values = engine.run_traced(names, feeds)
    return PartitionedRun(dict(zip(names, results, strict=True)), values, record, engine.emulated_io, engine)


def whole_model_run(
    proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], level: str, model_path: str | None = None
) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """onnxruntime running the whole model: the outputs by name, or None and why the run failed.

    Raises:
        BadModelError: onnxruntime cannot load the model (then a deployment could not either).
    """
    names = [o.name for o in proto.graph.output]
    # From the file when there is one (``proto`` was read from it): onnxruntime reads the weights there
    # itself, with no serialized copy of them.
    session = reference_session(model_path if model_path is not None else proto, level)
    try:
        results = _run_whole(session, names, feeds)
    except ORT_ERRORS as exc:
        return None, f"onnxruntime CPU failed on these inputs: {exc}"
    return dict(zip(names, results, strict=True)), None


def _run_whole(session: ort.InferenceSession, names: list[str], feeds: Mapping[str, Any]) -> list[Any]:
    """The outputs of one run. onnxruntime's ``run`` cannot return a bfloat16 or float8 output, so a
    model with one runs through ``run_with_ort_values``, those outputs kept as OrtValues (as dmlshim's
    runs give them) and the others read as arrays."""
    types = {o.name: o.type for o in session.get_outputs()}
    if not any(types.get(n, "") in NARROW_TYPE_NAMES for n in names):
        return list(session.run(names, dict(feeds)))
    values = session.run_with_ort_values(names, as_ortvalues(feeds))
    narrow = [types.get(n, "") in NARROW_TYPE_NAMES for n in names]
    return [v if keep else v.numpy() for v, keep in zip(values, narrow, strict=True)]
