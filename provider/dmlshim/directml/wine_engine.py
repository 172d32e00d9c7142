"""The ``directml`` engine on Linux: the model runs in the stack's Windows host process (onnxruntime-node
with the DirectML provider, under Wine on vkd3d and lavapipe); feeds go there and outputs come back.

Errors keep onnxruntime's message and are raised from an instance of the onnxruntime exception class
onnxruntime's Python API raises in that situation, so ``except InvalidArgument`` / ``except Fail`` work.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..errors import BadInputError, BadModelError, DmlShimError
from ..runtime.real import pybind_state
from ..translate.plan import DML_PROVIDER
from .empty_fetch import fetch_around_empty
from .host import Host, HostError, HostSession, shared_host
from .stack import Stack, load_stack

if TYPE_CHECKING:
    from ..execute.record import NodeRecord

logger = logging.getLogger(__name__)

DML_EP = "DmlExecutionProvider"
CPU_EP = "CPUExecutionProvider"
PLACEMENT_LOG = "onnxruntime's own node placement (its verbose log at session creation)"
PLACEMENT_PREDICTED = "dmlshim's prediction of onnxruntime-directml's placement (onnxruntime logged none)"

_CLASS_BY_MESSAGE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Exception during initialization", re.I), "RuntimeException"),
    (re.compile(r"No such file|doesn't exist|does not exist", re.I), "NoSuchFile"),
    (re.compile(r"Protobuf parsing failed|Failed to load model", re.I), "InvalidProtobuf"),
    (re.compile(r"Invalid (input|output) name|Unexpected input data type|Got invalid dimensions|"
                r"input .* is missing|invalid rank", re.I), "InvalidArgument"),
    (re.compile(r"NOT_IMPLEMENTED|Could not find an implementation", re.I), "NotImplemented"),
    (
        re.compile(r"This is an invalid model|Type Error|ShapeInferenceError|Node \(.*\) Op", re.I),
        "InvalidGraph",
    ),
)  # fmt: skip


def ort_class_name(message: str, stage: str) -> str:
    """The onnxruntime Python exception class name for a host error message (onnxruntime-node gives the
    message without its status code)."""
    for pattern, name in _CLASS_BY_MESSAGE:
        if pattern.search(message):
            return name
    return "RuntimeException" if stage == "load" else "Fail"


def _ort_exception(message: str, stage: str) -> BaseException:
    cls = getattr(pybind_state, ort_class_name(message, stage), None) or RuntimeError
    return cls(message)  # type: ignore[no-any-return]


_LEVELS = {0: "disabled", 1: "basic", 2: "extended", 3: "layout", 99: "all"}


def _optimization(config: Any) -> str:
    """onnxruntime-node's name for the caller's graph optimization level (``all`` by default)."""
    options = config.options_object() if hasattr(config, "options_object") else None
    level = getattr(options, "graph_optimization_level", None)
    name = _LEVELS.get(int(level), "all") if level is not None else "all"
    return "all" if name == "layout" else name


_SHAPE_CHECK_LINES = ("2853", "2844", "2597")
"""Where onnxruntime-directml's check of an output's inferred shape against its declared one fails (2597:
the copy of a CPU node's output to DirectML, checked against its declared value_info)."""


class LinuxDirectMLEngine:
    """The whole model on real DirectML 1.15 through the stack's host process.

    Args:
        model: the model (written to a temporary file the host loads).
        config: the engine configuration; ``providers`` naming only CPU... is not meaningful here.
        stack: the stack (the set-up one by default).
        host: the host process (the process-wide one by default).
        disable_cpu_fallback: onnxruntime's ``session.disable_cpu_ep_fallback``: refuse the model if any
            node would need the CPU provider.
    """

    name = "directml"

    def __init__(
        self,
        model: onnx.ModelProto,
        config: Any,
        *,
        stack: Stack | None = None,
        host: Host | None = None,
        disable_cpu_fallback: bool = False,
    ) -> None:
        from ..translate.ep_refusals import upfront_refusal_error

        refused = upfront_refusal_error(model)
        if refused is not None:  # before the host starts: the same error, known in advance
            raise BadModelError(refused) from _ort_exception(refused, "run")
        self.config = config
        self.optimized_away: frozenset[str] = frozenset()
        """gather/scatter nodes onnxruntime's graph optimizations removed before placement
        (:mod:`.optimized_away`)"""
        self.stack = stack or load_stack()
        self.host = host or shared_host(self.stack)
        self._tmp = tempfile.TemporaryDirectory(prefix="dmlshim-dml-")
        path = Path(self._tmp.name) / "model.onnx"
        onnx.save_model(model, str(path), save_as_external_data=model.ByteSize() > 1_500_000_000)
        try:
            self._session: HostSession = self.host.load(
                path, disable_cpu_fallback=disable_cpu_fallback, optimization=_optimization(config)
            )
        except HostError as exc:
            raise BadModelError(
                f"onnxruntime ({DML_EP}, real DirectML {self.stack.versions.get('directml', '?')}) "
                f"cannot load the model: {exc}{_known_refusals(model)}"
            ) from _ort_exception(str(exc), "load")
        self._nodes = self._records(model)
        self._model = model

    def _records(self, model: onnx.ModelProto) -> tuple[NodeRecord, ...]:
        from .optimized_away import optimized_away_nodes
        from .records import node_records

        placements = self._session.placements
        if placements is None:
            return node_records(model, self.config.feature_level, lambda t: t.ort_placement)
        # Nodes on the DirectML provider are fused (DmlFusedNode_*): the log lists the others. A node
        # onnxruntime's level-1 optimizations removed before placing nodes (folded into a constant, fused
        # into a Reshape) is in neither: it is placed with the CPU, as inspect places it, never on DirectML.
        self.optimized_away = optimized_away_nodes(
            model, _optimization(self.config), Path(self._tmp.name) / "model.onnx"
        )
        return node_records(
            model,
            self.config.feature_level,
            lambda t: (
                CPU_EP
                if t.name in self.optimized_away
                else placements.get(t.name, placements.get("*", DML_PROVIDER))
            ),
            self.optimized_away,
        )

    def stack_record(self) -> dict[str, Any]:
        """What ran: DirectML's version and the D3D12/Vulkan layers (for run records and reports)."""
        v = self.stack.versions
        return {
            "directml": self.stack.versions.get("directml"),
            "onnxruntime": self.stack.versions.get("onnxruntime_node"),
            "d3d12": f"vkd3d {v.get('vkd3d')} (DXIL on) in Wine {v.get('wine_d3d')}",
            "vulkan": f"Mesa {self.stack.versions.get('mesa')} lavapipe (llvmpipe, CPU)",
            "wine": self.stack.versions.get("wine_runtime"),
            "placement_source": PLACEMENT_LOG
            if self._session.placements is not None
            else PLACEMENT_PREDICTED,
            "nodes_on_cpu": ", ".join(self.cpu_nodes()) or "none",
            "nodes_optimized_away": ", ".join(sorted(self.optimized_away)) or "none",
            "description": self.stack.describe(),
        }

    def cpu_nodes(self) -> list[str]:
        """Every node (of any op) onnxruntime placed on its CPU provider, when its log said so."""
        placements = self._session.placements or {}
        return sorted(name for name, ep in placements.items() if ep == CPU_EP and name != "*")

    def get_providers(self) -> list[str]:
        return [DML_EP, CPU_EP]

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], Any]:
        from ..execute.record import PATH_DIRECTML, RunRecord

        try:
            given = {k: np.asarray(v) for k, v in feeds.items()}
            outputs = fetch_around_empty(
                lambda names: self.host.run(self._session, given, names), output_names
            )
        except HostError as exc:
            known = _known_refusals(self._model) + self._declared_shape_failure(str(exc), given)
            error: DmlShimError = BadInputError(
                f"onnxruntime ({DML_EP}) failed running the model: {exc}{known}"
            )
            raise error from _ort_exception(str(exc), "run")
        device = tuple((k, str(v)) for k, v in self.stack_record().items())
        return outputs, RunRecord(
            self.name, self.config.feature_level.dml_name, self._nodes, device=device, path=PATH_DIRECTML
        )

    def _declared_shape_failure(self, message: str, feeds: Mapping[str, np.ndarray]) -> str:
        """For a run failing with the provider's shape-check codes: the graph outputs, value_info values and
        If branch outputs whose declared shape onnxruntime CPU's run of the same feeds contradicts
        (``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE``) as a sentence to append to the error; "" when
        none or when onnxruntime CPU fails too."""
        from ..model.ort_errors import ORT_ERRORS
        from ..translate.ep_declared_shapes import DeclaredOutputs
        from .sweep import cpu_outputs, declared_shape_findings

        declared = DeclaredOutputs(self._model)
        if (declared.empty and not declared.values) or not any(
            f"MLOperatorAuthorImpl.cpp({line})" in message for line in _SHAPE_CHECK_LINES
        ):
            return ""
        names = [o.name for o in self._model.graph.output]
        try:
            reference = cpu_outputs(Path(self._tmp.name) / "model.onnx", feeds, names)
        except ORT_ERRORS:
            return ""
        found = declared_shape_findings(self._model, names, reference, feeds, self._session.placements)
        return "".join(f"; {c.message()}" for c in found)

    def close(self) -> None:
        """Release the session in the host."""
        self.host.release(self._session)
        self._tmp.cleanup()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the host may be gone
            self.close()


def _known_refusals(model: onnx.ModelProto) -> str:
    """The provider's refusals seen before on real DirectML that this model holds (what inspect's
    "onnxruntime-directml today" verdict names), as a sentence to append to its error."""
    from ..translate.ep_refusals import describe_refusals, session_refusals

    found = session_refusals(model)
    if not found:
        return ""
    return "; known onnxruntime-directml refusal(s) in this model: " + describe_refusals(
        [(name, refusal.code, refusal.form) for name, refusal in found]
    )
