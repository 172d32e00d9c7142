"""The parts of onnxruntime's session API that describe placement and memory: graph assignment info,
memory infos and EP devices, answered for dmlshim's CPU execution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx
import onnxruntime as ort

from ..errors import DmlShimError, NotSupportedError
from ..graph import display_names
from .providers import CPU_EP, DML_EP


@dataclass(frozen=True)
class EpAssignedNode:
    """A node and the provider it runs on (like ``onnxruntime.OrtEpAssignedNode``)."""

    name: str
    op_type: str
    domain: str


@dataclass(frozen=True)
class EpAssignedSubgraph:
    """The nodes one provider runs (like ``onnxruntime.OrtEpAssignedSubgraph``)."""

    ep_name: str
    nodes: tuple[EpAssignedNode, ...]

    def get_nodes(self) -> list[EpAssignedNode]:
        """The nodes, in graph order."""
        return list(self.nodes)


def graph_assignment(model: onnx.ModelProto, emulated: frozenset[str]) -> list[EpAssignedSubgraph]:
    """One subgraph per top-level node, in graph order, as onnxruntime reports nodes its providers run
    one by one: ``DmlExecutionProvider`` for those the engine planned to emulate (``emulated`` holds their
    display names), the CPU provider for every other."""
    nodes = list(model.graph.node)
    return [
        EpAssignedSubgraph(
            DML_EP if name in emulated else CPU_EP, (EpAssignedNode(node.name, node.op_type, node.domain),)
        )
        for node, name in zip(nodes, display_names(nodes), strict=True)
    ]


def graph_assignment_not_recorded(key: str) -> DmlShimError:
    """onnxruntime's ``Fail`` when graph assignment info is asked without the config entry ``key``
    (onnxruntime's sentence first)."""
    return DmlShimError(
        f'Session configuration entry {key!r} must be set to "1" to retrieve graph assignment information '
        "(sess_options.add_session_config_entry); last_run_record always says where each gather/scatter "
        "node ran",
        rule="onnxruntime records EP graph assignment only when asked",
    )


def cpu_memory_info() -> Any:
    """onnxruntime's description of CPU memory (every dmlshim input and output lives there)."""
    return ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)


def cpu_ep_device() -> Any:
    """onnxruntime's CPU ``OrtEpDevice`` (None when its device list names no CPU device).

    Raises:
        NotSupportedError: the installed onnxruntime is older than 1.23, which brought ``OrtEpDevice``.
    """
    get_ep_devices = getattr(ort, "get_ep_devices", None)
    if get_ep_devices is None:
        raise NotSupportedError(
            f"get_input_epdevices needs onnxruntime 1.23 or newer (onnxruntime {ort.__version__} has no "
            "OrtEpDevice); every dmlshim input is read on the CPU",
            value=ort.__version__,
        )
    try:
        devices = get_ep_devices()
    except RuntimeError:
        return None
    return next((d for d in devices if d.ep_name == CPU_EP), None)
