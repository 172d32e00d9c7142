"""The graph outputs as onnxruntime itself types them, when dmlshim's own reading of them cannot be sure.

dmlshim types a graph output as onnxruntime's first resolve does (:mod:`dmlshim.model.declared_types`),
from onnx's shape inference. That reading is onnxruntime's answer only when onnx's inference meets no
error and every node has an onnx schema. Elsewhere onnxruntime computes what onnx cannot:

* a declared type inference contradicts (an output's, or an intermediate ``value_info``'s) is merged
  leniently (the dimension unknown) and the nodes reading it are inferred from the merged type, where
  onnx keeps the declared size;
* onnxruntime's own operators (``com.microsoft`` ...) have schemas and inference onnx lacks;
* a model-local function is inlined after the first resolve, and the graph is resolved again (an output
  the first resolve left unknown gets the inferred size);
* nodes holding subgraphs (``Loop``, ``Scan``, ``If``) are inferred through their bodies.

For such models onnxruntime's acceptance session (built anyway on the model as given, graph optimizations
off: onnxruntime's first answer) is asked for its ``get_outputs()`` (:class:`OrtOutputs`); it is then built
rather than left to a session the engine builds with optimizations on (:mod:`dmlshim.model.ort_witness`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import onnx

__all__ = ["ONNX_DOMAINS", "OrtOutput", "OrtOutputs", "outputs_need_onnxruntime"]

ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
"""The domains onnx has schemas (and inference) for."""

_SUBGRAPH = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


@dataclass(frozen=True)
class OrtOutput:
    """One graph output as onnxruntime's ``NodeArg`` reports it."""

    name: str
    type: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class OrtOutputs:
    """onnxruntime's ``get_outputs()`` for the model as given, graph optimizations off."""

    outputs: tuple[OrtOutput, ...]

    @classmethod
    def of(cls, session: object) -> OrtOutputs:
        """The outputs of onnxruntime session ``session``."""
        return cls.of_args(session.get_outputs())  # type: ignore[attr-defined]

    @classmethod
    def of_args(cls, args: Iterable[Any]) -> OrtOutputs:
        """The outputs onnxruntime's ``NodeArg`` list ``args`` describes."""
        return cls(tuple(OrtOutput(a.name, str(a.type), tuple(a.shape)) for a in args))


def outputs_need_onnxruntime(model: onnx.ModelProto) -> str | None:
    """Why onnx's inference cannot type ``model``'s outputs as onnxruntime does, when the model's structure
    says so (model-local functions, an operator outside onnx's domains, a node holding subgraphs); None
    otherwise (onnx's inference errors, the other reason, are told by the inference itself)."""
    if model.functions:
        return f"{len(model.functions)} model-local functions (onnxruntime inlines them and infers again)"
    for node in model.graph.node:
        if node.domain not in ONNX_DOMAINS:
            return f"node {node.name!r} ({node.op_type}) of domain {node.domain!r} (no onnx schema)"
        if any(a.type in _SUBGRAPH for a in node.attribute):
            return f"node {node.name!r} ({node.op_type}) holds subgraphs"
    return None
