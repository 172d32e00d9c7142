"""The run record's nodes for an engine running the whole model on real DirectML: each gather/scatter
node placed where onnxruntime-directml put it (shared by the Windows and the Linux directml engines)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import onnx

from ..dml.enums import FeatureLevel
from ..execute.record import PLACEMENT_CPU, PLACEMENT_DML, NodeRecord
from ..translate import translate_model
from ..translate.plan import DML_PROVIDER, NodeTranslation

REASON_OPTIMIZED_AWAY = "ORT_OPTIMIZED_AWAY"
OPTIMIZED_AWAY_MESSAGE = (
    "onnxruntime's graph optimizations removed this node at session creation, before placing nodes on "
    "providers (constant folding computes it with its CPU kernels; a node only a folded one read is "
    "dropped): no DirectML kernel runs it"
)


def node_records(
    model: onnx.ModelProto,
    feature_level: FeatureLevel,
    placed: Callable[[NodeTranslation], str],
    optimized_away: Collection[str] = (),
) -> tuple[NodeRecord, ...]:
    """One record per node of ``model`` as translated at ``feature_level``, each placed on the execution
    provider ``placed`` names for it (onnxruntime's own assignment, however the engine learned it). The
    nodes named in ``optimized_away`` (:mod:`.optimized_away`) carry a reason saying so."""
    records = []
    for t in translate_model(model, feature_level).nodes:
        ep = placed(t)
        on_dml = ep == DML_PROVIDER
        reasons = tuple((r.code, r.message) for r in t.reasons)
        if t.name in optimized_away:
            reasons += ((REASON_OPTIMIZED_AWAY, OPTIMIZED_AWAY_MESSAGE),)
        records.append(
            NodeRecord(
                name=t.name,
                op_type=t.op_type,
                placement=PLACEMENT_DML if on_dml else PLACEMENT_CPU,
                status=t.status.value,
                operator=t.operator.operator_type.dml_name if on_dml and t.operator is not None else None,
                reasons=reasons,
                ort_placement=ep,
            )
        )
    return tuple(records)
