"""onnxruntime's constant folding of a gather/scatter node whose indices leave their axis.

With graph optimizations on (``ORT_ENABLE_BASIC`` and above), onnxruntime folds a node whose inputs are
all constant (initializers that are not graph inputs, or outputs of Constant nodes) at session creation.
Some onnxruntime releases then fail the session on out-of-range indices (InvalidArgument, "indices
element out of data bounds"); others skip folding that node and fail its first run. dmlshim's engines
that do not build a session of the whole model with the caller's options follow whichever this
onnxruntime does: :func:`folding_refusal` finds such nodes statically (top-level graph, shapes from the
initializers' dims, no large weight read), and asks this onnxruntime once per process, per operator and
level, whether its folding refuses a tiny model with such a node (:func:`_folding_refuses`).
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import BadModelError

logger = logging.getLogger(__name__)

FOLDED_OPS = frozenset({"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"})
FOLDING_RULE = "onnxruntime's constant folding refuses a node of constant inputs with indices off their axis"
_BASIC = 1  # ORT_ENABLE_BASIC: the first level that folds constants
_DEFAULT_LEVEL = 99  # ORT_ENABLE_ALL: a SessionOptions' default


def optimization_level(sess_options: object) -> int:
    """The graph optimization level ``sess_options`` gives a session (onnxruntime's default without)."""
    level = getattr(sess_options, "graph_optimization_level", None)
    return _DEFAULT_LEVEL if level is None else int(level)


def folding_refusal(
    model: onnx.ModelProto, sess_options: object, path: str | None = None
) -> BadModelError | None:
    """The refusal onnxruntime's constant folding gives ``model`` at session creation with
    ``sess_options``'s level, as :class:`BadModelError` carrying onnxruntime's class; None when it does not
    refuse it (no session is built unless a constant out-of-range index is found)."""
    level = optimization_level(sess_options)
    if level < _BASIC or not model.HasField("graph"):
        return None
    graph = model.graph
    if not any(n.op_type in FOLDED_OPS and n.domain in ("", "ai.onnx") for n in graph.node):
        return None
    inputs = {v.name for v in graph.input}
    shapes = {i.name: tuple(int(d) for d in i.dims) for i in graph.initializer if i.name not in inputs}
    constant_nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
    values: dict[str, np.ndarray | None] = {}  # each indices tensor read once (a walk of the graph)
    for node in graph.node:
        if node.op_type not in FOLDED_OPS or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        names = [n for n in node.input if n]
        if not all(n in shapes or n in constant_nodes for n in names):
            continue
        shape = shapes.get(node.input[0])
        if shape is None:
            shape = _constant_shape(constant_nodes[node.input[0]], graph)
        if shape is None:
            continue
        # imported here: most models have no gather/scatter node of constant inputs alone
        from .constant_indices import first_out_of_range
        from .ep_refusals import constant_value

        if node.input[1] not in values:
            values[node.input[1]] = constant_value((graph,), node.input[1])
        bad = first_out_of_range(node, shape, values[node.input[1]])
        if bad is None:
            continue
        cls = _folding_refuses(node.op_type, level)
        if cls is None:
            return None  # this onnxruntime skips folding such a node: its run fails instead
        where = f"{bad.tensor}{list(bad.position)}"
        error = BadModelError(
            f"constant index {bad.index} at {where} addresses axis {bad.axis} of {node.input[0]!r}, of "
            f"size {bad.size}: ONNX {node.op_type} takes indices in [{-bad.size}, {bad.size - 1}], and "
            f"this onnxruntime's constant folding (graph optimization level {level}) refuses the model "
            "at session creation",
            rule=FOLDING_RULE,
            value=bad.index,
            node=node.name,
            op_type=node.op_type,
            tensor=bad.tensor,
            path=path,
        )
        from ..runtime.exceptions import with_onnxruntime_class

        return with_onnxruntime_class(error, cls)
    return None


def _constant_shape(node: onnx.NodeProto, graph: onnx.GraphProto) -> tuple[int, ...] | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return tuple(int(d) for d in a.t.dims)
    from .ep_refusals import constant_value

    value = constant_value((graph,), node.output[0])  # value_ints, value_float, ...: small by nature
    return None if value is None else tuple(value.shape)


_PROBES: dict[str, tuple[list[list[int]], list[int] | None]] = {
    # op: (indices out of range for data [4, 3], shape of updates)
    "Gather": ([[7]], None),
    "GatherElements": ([[4, 0, 0]], None),
    "GatherND": ([[4, 0]], None),
    "ScatterElements": ([[4, 0, 0]], [1, 3]),
    "ScatterND": ([[4]], [1, 3]),
}


@functools.cache
def _folding_refuses(op_type: str, level: int) -> type[BaseException] | None:
    """The class of the error this onnxruntime raises creating a session, at ``level``, on a tiny model
    whose ``op_type`` node has constant inputs and an out-of-range index; None when it creates it."""
    import onnxruntime as ort

    from ..model.ort_errors import ORT_ERRORS
    from ..runtime.real import OrtInferenceSession

    indices, updates = _PROBES[op_type]
    inits = [
        numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W"),
        numpy_helper.from_array(np.array(indices, np.int64), "I"),
    ]
    if updates is not None:
        inits.append(numpy_helper.from_array(np.ones(updates, np.float32), "U"))
    nodes = [
        helper.make_node(op_type, [i.name for i in inits], ["y"], name="probe"),
        helper.make_node("Add", ["y", "x"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "folding_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 18)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel(level)
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        OrtInferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        logger.debug("onnxruntime's constant folding refuses %s at level %d: %s", op_type, level, exc)
        return type(exc)
    return None
