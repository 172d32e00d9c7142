"""Models onnxruntime-directml refuses at session creation, as data: each row is a refusal seen on real
DirectML (``docs/directml-linux.md``), with the node form that causes it.

These are nodes of any op type (not only gather/scatter) whose valid ONNX form the DirectML provider
accepts at partitioning and then fails to build a kernel for, so the whole session fails, with or without
CPU fallback. ``inspect``'s "onnxruntime-directml today" verdict is NO for such a model and names the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper


@dataclass(frozen=True)
class EpRefusal:
    """One form of node the DirectML provider refuses.

    Attributes:
        code: reason code (``EP_REFUSES_*``).
        op_type: the ONNX op.
        since: the first ai.onnx opset the form exists in.
        form: the node form, in words.
        seen: what onnxruntime-directml said on real DirectML (version, message).
        matches: ``(node, constants) -> bool``; ``constants`` maps names to the values of initializers and
            Constant outputs of the graph.
    """

    code: str
    op_type: str
    since: int
    form: str
    seen: str
    matches: Callable[[onnx.NodeProto, Mapping[str, np.ndarray]], bool]


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _reshape_allowzero_minus_one(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> bool:
    if _attr_int(node, "allowzero", 0) != 1 or len(node.input) < 2:
        return False
    shape = constants.get(node.input[1])
    return shape is not None and bool((np.asarray(shape) == -1).any())


EP_REFUSALS: tuple[EpRefusal, ...] = (
    EpRefusal(
        code="EP_REFUSES_RESHAPE_ALLOWZERO",
        op_type="Reshape",
        since=14,
        form="Reshape with allowzero=1 and a -1 in a constant shape (valid ONNX: only 0 and -1 together are "
        "invalid; onnxruntime CPU runs it)",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24: session creation fails, "
        "MLOperatorAuthorImpl.cpp(2853) 80070057 (E_INVALIDARG), with or without CPU fallback",
        matches=_reshape_allowzero_minus_one,
    ),
)
"""Every refusal seen on real DirectML (a sweep of onnx_models/ on DirectML 1.15.4)."""


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL and onnx.helper.tensor_dtype_to_np_dtype(init.data_type) != object:
            values[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for a in node.attribute:
                if a.name == "value" and a.t.data_location != onnx.TensorProto.EXTERNAL:
                    values[node.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_ints":
                    values[node.output[0]] = np.array(a.ints, dtype=np.int64)
    return values


def _graphs(graph: onnx.GraphProto, path: str = "") -> Iterator[tuple[str, onnx.GraphProto]]:
    yield path, graph
    for node in graph.node:
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                yield from _graphs(sub, f"{path}{node.name or node.op_type}/{a.name}/")


def session_refusals(model: onnx.ModelProto) -> tuple[tuple[str, EpRefusal], ...]:
    """``(node name, refusal)`` for every node of ``model`` (subgraphs included) in a refused form."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    found = []
    for path, graph in _graphs(model.graph):
        constants: dict[str, np.ndarray] | None = None
        for node in graph.node:
            for refusal in EP_REFUSALS:
                if node.op_type != refusal.op_type or node.domain not in ("", "ai.onnx") or opset < refusal.since:
                    continue
                if constants is None:
                    constants = _constants(graph)
                if refusal.matches(node, constants):
                    found.append((path + (node.name or node.op_type), refusal))
    return tuple(found)
