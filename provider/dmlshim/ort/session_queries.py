"""What an ``InferenceSession`` reports about itself and the calls onnxruntime keeps for other providers:
inputs, outputs, metadata, options, memory infos and devices, provider options, graph assignment, and the
fallback / tuning / captured-graph calls, answered as onnxruntime's CPU provider answers them; and
dmlshim's own properties (engine, feature level, index mode, model path, last run record)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import onnxruntime as ort

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, NotSupportedError
from ..execute.engine import Engine
from ..execute.feeds import ModelMetadata, NodeArg
from ..execute.record import RunRecord
from ..execute.weights.model_source import LoadedModel
from ..kernels.options import IndexMode
from ..runtime.exceptions import raises_onnxruntime_errors
from .attributes import settable_property
from .providers import ProviderChoice
from .session_copy import SessionCopy
from .session_info import (
    EpAssignedSubgraph,
    cpu_ep_device,
    cpu_memory_info,
    graph_assignment,
    graph_assignment_not_recorded,
)
from .session_options import GRAPH_ASSIGNMENT_KEY, config_entry

logger = logging.getLogger(__name__)


class SessionQueries:
    """The part of :class:`dmlshim.InferenceSession` that reports what the session holds (a mixin: the
    session sets these attributes when it is built)."""

    _inputs: tuple[NodeArg, ...]
    _outputs: tuple[NodeArg, ...]
    _overridable: tuple[NodeArg, ...]
    _meta: ModelMetadata
    _options: Any
    _choice: ProviderChoice
    _engine: Engine
    _loaded: LoadedModel
    _fallback_enabled: bool
    _feature_level: FeatureLevel
    _index_mode: IndexMode
    _model_path: str | None
    _last_run_record: RunRecord | None

    @property
    def _copy(self) -> SessionCopy:
        """onnxruntime's own copy of the session's options (made by the session)."""
        raise NotImplementedError

    # dmlshim's own properties

    @settable_property
    def engine(self) -> Engine:
        """The engine that runs the model."""
        return self._engine

    @settable_property
    def feature_level(self) -> FeatureLevel:
        """The DirectML feature level emulated."""
        return self._feature_level

    @settable_property
    def index_mode(self) -> IndexMode:
        """The out-of-range index policy."""
        return self._index_mode

    @settable_property
    def model_path(self) -> str | None:
        """The model file, when the session was built from a path."""
        return self._loaded.path if self._loaded.path is not None else self._model_path

    @settable_property
    def last_run_record(self) -> RunRecord | None:
        """The record of the latest ``run`` (None before the first run)."""
        return self._last_run_record

    def get_inputs(self) -> list[NodeArg]:
        """The graph inputs a caller feeds (initializers excluded), like onnxruntime's ``NodeArg`` list."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs, in graph order."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer as default value (may be fed or left out)."""
        return list(self._overridable)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata: producer, graph name, domain, description, version, custom map."""
        return self._meta

    def get_session_options(self) -> Any:
        """The session's own ``SessionOptions``, as onnxruntime's: a copy of the options it was created with
        (onnxruntime's defaults when none), the same object on every call; changing it changes neither the
        session nor the caller's object."""
        return self._copy.options

    def get_input_memory_infos(self) -> list[Any]:
        """Where each input lives: CPU memory (``OrtMemoryInfo``)."""
        return [cpu_memory_info() for _ in self._inputs]

    def get_output_memory_infos(self) -> list[Any]:
        """Where each output lives: CPU memory (``OrtMemoryInfo``)."""
        return [cpu_memory_info() for _ in self._outputs]

    def get_input_epdevices(self) -> list[Any]:
        """onnxruntime's CPU ``OrtEpDevice`` for each input (dmlshim reads every input on the CPU); needs
        onnxruntime 1.23 or newer, as in onnxruntime."""
        device = cpu_ep_device()
        return [device for _ in self._inputs]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Each provider's options as onnxruntime reports them: ``{}`` for the CPU provider and for
        DirectML (onnxruntime-directml's reports none), whatever they were given."""
        return self._copy.provider_options_for(self._choice)

    @raises_onnxruntime_errors()
    def get_provider_graph_assignment_info(self) -> list[EpAssignedSubgraph]:
        """Which provider runs each top-level node, as planned when the session was built.

        Needs the session config entry ``session.record_ep_graph_assignment_info`` set to ``"1"``, as in
        onnxruntime. Emulated gather/scatter nodes are on ``DmlExecutionProvider``; see
        ``last_run_record`` for what each run actually did.
        """
        if config_entry(self._options, GRAPH_ASSIGNMENT_KEY) != "1":
            raise graph_assignment_not_recorded(GRAPH_ASSIGNMENT_KEY)
        emulated = getattr(self._engine, "emulated_nodes", ())
        return graph_assignment(self._loaded.proto, frozenset(emulated))

    @raises_onnxruntime_errors()
    def create_ortvalue_from_shape_and_type(
        self,
        shape: Sequence[int],
        element_type: Any,
        device_type: str,
        device_id: int = 0,
        vendor_id: int = -1,
    ) -> Any:
        """A CPU ``onnxruntime.OrtValue`` of this shape and element type.

        Raises:
            NotSupportedError: ``device_type`` is not ``"cpu"`` (dmlshim runs on the CPU).
        """
        if str(device_type).lower() != "cpu":
            raise NotSupportedError(
                f"cannot allocate on device {device_type!r}: dmlshim runs on the CPU; use device_type='cpu'",
                value=device_type,
            )
        try:
            return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), element_type, "cpu", device_id)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise BadInputError(
                f"cannot create an OrtValue of shape {list(shape)} and type {element_type!r}: {exc}",
                value=element_type,
            ) from exc

    def disable_fallback(self) -> None:
        """Kept for onnxruntime compatibility: dmlshim never retries a run on other providers."""
        self._fallback_enabled = False

    def enable_fallback(self) -> None:
        """Kept for onnxruntime compatibility: an emulation error is raised, never hidden by a retry."""
        self._fallback_enabled = True

    def set_ep_dynamic_options(self, options: Mapping[str, str]) -> None:
        """Accepted and ignored, as onnxruntime's CPU provider does: the emulation has no dynamic options."""
        logger.debug("set_ep_dynamic_options ignored: %s", dict(options))

    def get_tuning_results(self) -> list[Any]:
        """No tunable kernels: always ``[]``, as onnxruntime's CPU provider."""
        return []

    def set_tuning_results(self, results: Any, *, error_on_invalid: bool = False) -> None:
        """Accepted and ignored: there are no tunable kernels to tune."""

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Nothing to release: no graph is captured (as onnxruntime's CPU provider)."""
