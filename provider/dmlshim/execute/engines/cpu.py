"""The engine for ``providers=["CPUExecutionProvider"]``: nothing emulated, the whole model in one
onnxruntime CPU session, exactly as onnxruntime would run it with those providers. It takes the model as
read without its weights (``LoadedModel.weightless``) when onnxruntime's default options apply.

Its run record still lists every gather/scatter node, each on onnxruntime's CPU provider with the reason,
so a script that checks ``last_run_record`` sees why nothing ran as DirectML.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ...graph import display_names, is_gather_scatter
from ...model.ort_witness import session_built
from ..engine import EngineConfig
from ..plan.checks import refuse_static_sizes
from ..plan.cpu_step import run_session
from ..plan.fallback import has_deprecated_scatter
from ..plan.partition import nested_gather_scatter
from ..plan.sessions import ORT_ERRORS, cpu_session, indices_tensors, ort_run_error, subgraph_paths
from ..record import PATH_CPU, PLACEMENT_CPU, NodeRecord, RunRecord
from ..weights.shared import SharedWeights, light_copy

logger = logging.getLogger(__name__)

ENGINE_NAME = "cpu"
REASON_CPU_ONLY = "cpu_provider_only"
_CPU_ONLY_MESSAGE = (
    "providers did not include DmlExecutionProvider, so the whole model ran on onnxruntime's CPU provider "
    "(add DmlExecutionProvider to providers to emulate DirectML)"
)


class CpuEngine:
    """Runs the whole model in one onnxruntime ``CPUExecutionProvider`` session."""

    name = ENGINE_NAME

    def __init__(self, model: onnx.ModelProto, config: EngineConfig) -> None:
        self.config = config
        graph = model.graph
        # onnxruntime folds a ConstantOfShape of constants when it loads the model, and allocates a
        # branch's value when a run takes it: sizes past the memory limit are refused first
        refuse_static_sizes(model, config.sess_options)
        # With onnxruntime's default options and a model from a file, the large weights are not serialized:
        # the session reads them from the model's files (a model read without its weights, above 2 GiB say,
        # never holds them in Python at all), as the partitioned engine's sessions do.
        shared = (
            SharedWeights({t.name: t for t in graph.initializer}, model_path=config.model_path, graph=graph)
            if config.sess_options is None and config.model_path is not None
            else None
        )
        payload = light_copy(model, shared) if shared is not None else model
        self._session = cpu_session(payload, config.sess_options, "the model", shared, config.own_options)
        if config.sess_options is None and config.own_options is None and not has_deprecated_scatter(model):
            session_built(model)  # onnxruntime accepts the model: no acceptance session of its own
        nodes = list(graph.node)
        names = display_names(nodes)
        records = []
        for node, name in zip(nodes, names, strict=True):
            if is_gather_scatter(node):
                records.append(self._record(name, node.op_type))
            records.extend(
                self._record(n.path, n.node.op_type) for n in nested_gather_scatter([node], [name])
            )
        self._records = tuple(records)
        nested = nested_gather_scatter(nodes, names)
        self._indices = indices_tensors([*nodes, *(n.node for n in nested)])
        # onnxruntime names a body's node by its own name; the records name it by its path
        self._paths = subgraph_paths(nested)
        logger.debug("cpu engine: %d gather/scatter nodes, none emulated", len(records))

    def _record(self, name: str, op_type: str) -> NodeRecord:
        return NodeRecord(
            name=name,
            op_type=op_type,
            placement=PLACEMENT_CPU,
            status=REASON_CPU_ONLY,
            reasons=((REASON_CPU_ONLY, _CPU_ONLY_MESSAGE),),
            ort_placement="CPUExecutionProvider",
        )

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    def ort_sessions(self) -> list[tuple[str, Any]]:
        """The onnxruntime sessions this engine built, labelled (for profiling)."""
        return [("the model", self._session)]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        try:
            # Values numpy cannot hold (bfloat16, float8, ...) go in and come out as OrtValues, as in
            # onnxruntime's run_with_ort_values; run() itself refuses such outputs afterwards.
            outputs = run_session(self._session, output_names, feeds, run_options)
        except ORT_ERRORS as exc:
            raise ort_run_error(
                exc, "onnxruntime failed running the model", indices=self._indices, paths=self._paths
            ) from exc
        return outputs, RunRecord(
            self.name, self.config.feature_level.dml_name, self._records, cpu_partitions=1, path=PATH_CPU
        )


def create_engine(model: onnx.ModelProto, config: EngineConfig) -> CpuEngine:
    """The engine for ``InferenceSession(engine="cpu")`` (an ``EngineFactory``)."""
    return CpuEngine(model, config)
