"""The directml engine: the whole model on onnxruntime's real ``DmlExecutionProvider`` (Windows, with the
onnxruntime-directml package; on Linux through the Wine stack ``dmlshim directml setup`` builds), so one
script can compare emulated and real DirectML results."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, BadModelError, EngineUnavailableError
from ..execute.engine import EngineConfig
from ..execute.plan.checks import refuse_static_sizes
from ..execute.record import PATH_DIRECTML, NodeRecord, RunRecord
from ..model.ort_errors import ORT_ERRORS
from ..runtime.real import OrtInferenceSession, ort_available_providers
from .empty_fetch import fetch_around_empty
from .records import node_records

logger = logging.getLogger(__name__)

DML_EP = "DmlExecutionProvider"
MIN_DEVICE_FEATURE_LEVEL = FeatureLevel.FL_5_0
"""onnxruntime's DirectML provider creates its device at this level or above."""

_ASSIGNMENT_ERRORS: tuple[type[BaseException], ...] = (AttributeError, *ORT_ERRORS)


def dml_available() -> bool:
    """Whether onnxruntime's DmlExecutionProvider can be used in this process."""
    return DML_EP in ort_available_providers()


def linux_stack_available() -> bool:
    """Whether real DirectML can run here through the Wine stack (``dmlshim directml setup``)."""
    from .stack import stack_available

    return stack_available()


def unavailable_reason() -> str:
    """Why the directml engine cannot run here (for messages and test skips)."""
    from .stack import stack_file

    return (
        f"{DML_EP} is not available on this machine (onnxruntime {ort.__version__} offers "
        f"{', '.join(ort_available_providers())}). The directml engine needs Windows 10/11 with a "
        "DirectX 12 GPU and the onnxruntime-directml package installed in place of onnxruntime "
        "(pip uninstall onnxruntime; pip install onnxruntime-directml); on Debian/Ubuntu Linux, "
        f"`dmlshim directml setup` builds real DirectML under Wine (no stack at {stack_file()}). Use "
        "engine='partitioned' to emulate DirectML on any machine."
    )


def _check_level(config: EngineConfig) -> None:
    if config.feature_level < MIN_DEVICE_FEATURE_LEVEL:
        raise EngineUnavailableError(
            f"the directml engine runs on a real device at {MIN_DEVICE_FEATURE_LEVEL.dml_name} or above; "
            f"{config.feature_level.dml_name} can only be emulated (engine='partitioned')",
            value=config.feature_level.dml_name,
        )


def create_engine(model: onnx.ModelProto, config: EngineConfig) -> Any:
    """The directml engine: in-process ``DmlExecutionProvider`` when onnxruntime has it, else real DirectML
    through the Linux Wine stack when it is set up.

    Raises:
        EngineUnavailableError: neither is available, or the feature level is below 5_0.
    """
    if dml_available() or not linux_stack_available():
        return DirectMLEngine(model, config)
    _check_level(config)
    refuse_static_sizes(model, config.sess_options)
    from .wine_engine import LinuxDirectMLEngine

    return LinuxDirectMLEngine(model, config)


class DirectMLEngine:
    """Runs the whole model on ``DmlExecutionProvider`` (CPU for what it does not take).

    The per-run record lists each gather/scatter node with the provider onnxruntime actually assigned it
    to (from onnxruntime's graph assignment info when available, else the translator's prediction).

    Raises:
        EngineUnavailableError: DmlExecutionProvider is not available, or the feature level asked for is
            below DML_FEATURE_LEVEL_5_0, which a real device under onnxruntime always exceeds.
    """

    name = "directml"

    def __init__(self, model: onnx.ModelProto, config: EngineConfig) -> None:
        if not dml_available():
            raise EngineUnavailableError(unavailable_reason(), value=ort_available_providers())
        _check_level(config)
        # onnxruntime would allocate them: when it loads the model or runs
        refuse_static_sizes(model, config.sess_options)
        self.config = config
        so = config.sess_options if config.sess_options is not None else ort.SessionOptions()
        # The DirectML provider supports neither memory patterns nor parallel execution.
        so.enable_mem_pattern = False
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        providers: list[Any] = (
            list(config.providers) if config.providers else [DML_EP, "CPUExecutionProvider"]
        )
        try:
            self._session = OrtInferenceSession(model.SerializeToString(), so, providers=providers)
        except ORT_ERRORS as exc:
            raise BadModelError(f"onnxruntime ({DML_EP}) cannot load the model: {exc}") from exc
        self._nodes = self._records(model)

    def _records(self, model: onnx.ModelProto) -> tuple[NodeRecord, ...]:
        assigned: dict[str, str] = {}
        try:
            for sub in self._session.get_provider_graph_assignment_info():
                for node in sub.get_nodes():
                    assigned[node.name] = sub.ep_name
        except _ASSIGNMENT_ERRORS as exc:
            logger.debug("no graph assignment info from onnxruntime: %s", exc)
        return node_records(model, self.config.feature_level, lambda t: assigned.get(t.name, t.ort_placement))

    def get_providers(self) -> list[str]:
        return list(self._session.get_providers())

    def ort_sessions(self) -> list[tuple[str, ort.InferenceSession]]:
        """The one onnxruntime session (for profiling)."""
        return [("the model", self._session)]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        try:
            given = dict(feeds)
            outputs = fetch_around_empty(
                lambda names: self._session.run(names, given, run_options), output_names
            )
        except ORT_ERRORS as exc:
            raise BadInputError(f"onnxruntime ({DML_EP}) failed running the model: {exc}") from exc
        return list(outputs), RunRecord(
            self.name, self.config.feature_level.dml_name, self._nodes, path=PATH_DIRECTML
        )
