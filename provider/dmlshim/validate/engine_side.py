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

from ..dml.enums import FeatureLevel
from ..errors import BadInputError
from ..execute.model_source import LoadedModel
from ..kernels.options import IndexMode
from .references import PartitionedRun, session_options, whole_model_run

logger = logging.getLogger(__name__)

PARTITIONED = "partitioned"


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
    values = session._run_values(names, dict(feeds), None)
    record = session.last_run_record
    assert record is not None  # set by every run
    del session  # its onnxruntime session (a copy of the weights) goes before the reference's
    ours = PartitionedRun(dict(zip(names, values, strict=True)), {}, record, ())
    whole, error = whole_model_run(proto, feeds, level, loaded.weights_path)
    if whole is None:
        raise BadInputError(
            f"the reference cannot be made: {error} (optimization level {level}); dmlshim's {engine} engine "
            "ran the model, but there is nothing to compare it with"
        )
    return ours, PartitionedRun(whole, {}, record, ())
