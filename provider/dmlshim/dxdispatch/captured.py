"""What a capture holds: the values each gather/scatter node read, and the nodes it could not reach.

A large initializer a node reads stays a :class:`ModelWeight` (a reference to the model's tensor) until the
node is exported, so a capture never holds a copy of the model's weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..execute.weights.shared import is_large
from ..execute.weights.values import initializer_value
from ..model.weightless import is_external

__all__ = ["Capture", "CapturedNode", "ModelWeight", "Uncaptured", "model_value", "resolve"]


@dataclass(frozen=True)
class ModelWeight:
    """A large initializer a node reads, kept as the model holds it (inline, or a reference into the
    model's files relative to ``folder``) until its value is needed: a run of the capture never holds
    a copy of it."""

    tensor: onnx.TensorProto
    folder: str | None = None

    def value(self) -> np.ndarray:
        """The initializer's value, read now (a read-only memory map where the file allows)."""
        if self.folder is None and is_external(self.tensor):
            # a model given in memory: external data resolved as onnx resolves it
            return numpy_helper.to_array(self.tensor)
        return initializer_value(self.tensor, self.folder)


def model_value(tensor: onnx.TensorProto, folder: str | None) -> Any:
    """An initializer as a captured value: small ones as arrays, large ones as :class:`ModelWeight`."""
    if is_external(tensor) or is_large(tensor):
        return ModelWeight(tensor, folder)
    return numpy_helper.to_array(tensor)


def resolve(value: Any) -> Any:
    return value.value() if isinstance(value, ModelWeight) else value


@dataclass(frozen=True)
class CapturedNode:
    """A gather/scatter node with the values it read in one run.

    Attributes:
        position: the top-level graph position of the node, or of the control-flow node holding it.
        name: the node's path name (``loop/body/scatter_row``).
        node: the node.
        inputs: its inputs, in node order (None for an omitted optional input); a large initializer as
            a :class:`ModelWeight`, read from the model by :attr:`arrays`.
        output: its first output as onnxruntime computed it (None when not captured).
        iterations: the enclosing control-flow nodes, outermost first, with the iteration captured (None
            for an If: the branch taken is in the path).
    """

    position: int
    name: str
    node: onnx.NodeProto
    inputs: tuple[np.ndarray | ModelWeight | None, ...]
    output: np.ndarray | None
    iterations: tuple[tuple[str, int | None], ...] = ()

    @property
    def arrays(self) -> tuple[np.ndarray | None, ...]:
        """The node's inputs as arrays (initializers read from the model on each call: hold the result
        only while it is used)."""
        return tuple(v.value() if isinstance(v, ModelWeight) else v for v in self.inputs)


@dataclass(frozen=True)
class Uncaptured:
    """A gather/scatter node inside control flow whose inputs were not captured, and why."""

    position: int
    name: str
    op_type: str
    code: str
    reason: str


@dataclass(frozen=True)
class Capture:
    """Every gather/scatter node of a model: captured, or not with a reason; each in graph order."""

    nodes: tuple[CapturedNode, ...]
    missed: tuple[Uncaptured, ...]
