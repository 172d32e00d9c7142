"""validate with an engine other than the partitioned one (``--engine customop``, ``cpu``, ``directml``).

Such an engine runs the whole model in one onnxruntime session (the custom-op engine with each translated
gather/scatter node as a custom op inside it), so its like-for-like reference is onnxruntime running the
whole model at the same optimisation level, single-threaded: the two differ only in what the gather/scatter
nodes computed, unless the custom ops change what onnxruntime's optimisers do around them (see
:mod:`dmlshim.validate.levels`). The engine exposes no intermediate values, so nodes are not attributed
one by one; the outputs are compared exactly as with the partitioned engine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from ..dml.enums import FeatureLevel
from ..errors import BadInputError
from ..execute.custom_ops.notes import LAYOUT_OP_TYPES, layout_nodes
from ..execute.weights.model_source import LoadedModel
from ..kernels.options import IndexMode
from ..text import names_text
from .references import PartitionedRun, session_options, whole_model_run

logger = logging.getLogger(__name__)

PARTITIONED = "partitioned"
CUSTOM_OP = "customop"
LAYOUT_LEVEL = "all"
"""The level at which onnxruntime adds its layout optimisations (NCHWc transforms around Conv and
pooling), which work differently around custom-op nodes."""
COMPARABLE_LEVEL = "extended"
"""The highest level without layout optimisations: the custom-op engine gives onnxruntime's outputs there."""
LAYOUT_OPS = LAYOUT_OP_TYPES


def differing_outputs(ours: PartitionedRun, ref: PartitionedRun) -> list[tuple[str, float | None]]:
    """The outputs whose bits differ, with the largest absolute difference (None: shape or dtype)."""
    found = []
    for name, got in ours.outputs.items():
        want = ref.outputs.get(name)
        if not (isinstance(got, np.ndarray) and isinstance(want, np.ndarray)):
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            found.append((name, None))
        elif got.tobytes() != want.tobytes() and not (
            got.dtype.kind == "f" and np.array_equal(got, want, equal_nan=True)
        ):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64)) if got.size else np.zeros(1)
            found.append((name, float(np.nanmax(diff))))
    return found


def custom_op_layout_reason(
    engine: str, level: str, graph: onnx.GraphProto, ours: PartitionedRun, ref: PartitionedRun
) -> str | None:
    """Why the custom-op engine's run at ``all`` is compared at ``extended`` instead, or None: its outputs
    differ from onnxruntime's at ``all`` and the model has nodes onnxruntime's layout optimisations
    transform (custom-op nodes change what those optimisations do around them)."""
    if engine != CUSTOM_OP or level != LAYOUT_LEVEL:
        return None
    nodes = layout_nodes(graph)
    differ = differing_outputs(ours, ref)
    if not nodes or not differ:
        return None
    diffs = ", ".join(f"{n} max |diff| {d:.3g}" if d is not None else f"{n} shape/dtype" for n, d in differ)
    shown = names_text(nodes, 3)
    return (
        f"the custom-op engine differs from onnxruntime at level {LAYOUT_LEVEL} ({diffs}): onnxruntime's "
        f"layout optimizations (NCHWc transforms around {len(nodes)} Conv/pooling/Resize node(s): "
        f"{shown}) work differently around custom-op nodes; compared at {COMPARABLE_LEVEL}, the highest "
        "level without them, where the engine gives onnxruntime's outputs"
    )


def engine_runs(
    loaded: LoadedModel,
    feeds: Mapping[str, np.ndarray],
    *,
    engine: str,
    feature_level: FeatureLevel,
    index_mode: IndexMode,
    level: str,
) -> tuple[PartitionedRun, PartitionedRun]:
    """dmlshim's run through ``engine`` and onnxruntime's whole-model run (the reference), both at
    optimisation ``level``.

    Raises:
        EngineUnavailableError: the engine is unknown or cannot run here.
        BadInputError: onnxruntime fails on these feeds (then the reference cannot be made).
        DmlShimError: the engine refused the run.
    """
    from ..ort.ortvalues import strings_decoded
    from ..ort.session import InferenceSession

    proto = loaded.proto
    source: Any = str(loaded.path) if loaded.path is not None else proto
    session = InferenceSession(
        source,
        session_options(level),
        feature_level=feature_level,
        engine=engine,
        index_mode=index_mode.value,
    )
    names = [o.name for o in proto.graph.output]
    values = strings_decoded(session._run_values(names, dict(feeds), None))
    record = session.last_run_record
    assert record is not None  # set by every run
    del session  # its onnxruntime session (a copy of the weights) goes before the reference's
    ours = PartitionedRun(dict(zip(names, values, strict=True)), {}, record, ())
    whole, error = whole_model_run(proto, feeds, level, loaded.path)  # onnxruntime reads the file itself
    if whole is None:
        raise BadInputError(
            f"the reference cannot be made: {error} (optimization level {level}); dmlshim's {engine} engine "
            "ran the model, but there is nothing to compare it with"
        )
    return ours, PartitionedRun(whole, {}, record, ())
