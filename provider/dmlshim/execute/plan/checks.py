"""The partitioned engine's model-level checks, made once when it is built: every graph output is
defined, and no statically shaped value exceeds the memory limit; and what an emulated node reads and
writes in the engine's value table (:class:`EmulatedIO`)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import onnx

from ...errors import BadModelError, DmlShimError, TooLargeError
from ...limits import check_static_values, unfeedable_inputs
from ...translate import TensorInfo

__all__ = ["EmulatedIO", "check_outputs_defined", "check_static_sizes"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmulatedIO:
    """An emulated node's place in the value table: what it reads and what it writes.

    Attributes:
        name: the node's display name.
        op_type: its op.
        inputs: its input value names ("" for an omitted optional input).
        output: its output value name.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    output: str


def check_outputs_defined(graph: onnx.GraphProto) -> None:
    """Every graph output must be computed by a node or be an input or initializer of the graph."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for node in graph.node for o in node.output if o}
    for out in graph.output:
        if out.name not in defined:
            raise BadModelError(
                f"graph output {out.name!r} is computed by no node and is no graph input or initializer",
                tensor=out.name,
                rule="every graph output must be defined in the graph",
            )


def check_static_sizes(
    graph: onnx.GraphProto,
    infos: Mapping[str, TensorInfo],
    names: Sequence[str],
    mapped: Collection[str] = (),
    model: onnx.ModelProto | None = None,
) -> None:
    """Refuse, before any allocation, a graph in which a statically shaped value cannot fit in memory
    (``mapped``: weights read from the model's files where they are needed, never allocated whole).

    Graph inputs are the caller's feeds, not allocated here. A graph input no feed could ever match (its
    static shape exceeds the memory limit) means no run can reach a node: the model loads, as in
    onnxruntime, and every run is refused for its feed's shape.

    ``model`` (the model ``graph`` was inferred from): a shape only its graph outputs or ``value_info``
    declare is the model's word, which onnxruntime does not take (it warns when a run's shape differs);
    such a value is refused only when inference without those declarations finds it as large. A Gather
    output declared ``[10000000000, 4]`` was refused on every machine though onnxruntime runs it."""
    unfeedable = unfeedable_inputs(graph)
    if unfeedable:
        logger.info("graph input(s) %s can never be fed on this machine; sizes left unchecked", unfeedable)
        return
    fed = {v.name for v in graph.input} - {t.name for t in graph.initializer}
    producers = {
        out: (names[i], node.op_type) for i, node in enumerate(graph.node) for out in node.output if out
    }
    shapes = {
        n: (i.static_shape, i.elem_type)
        for n, i in infos.items()
        if i.is_static and n not in mapped and n not in fed
    }
    try:
        check_static_values(shapes, producers=producers)
    except TooLargeError as exc:
        declared = _declared(model) if model is not None else set()
        if exc.tensor not in declared:
            raise
        assert model is not None
        undeclared = _undeclared_infos(model)
        for name in declared & shapes.keys():
            info = undeclared.get(name)
            if info is None or not info.is_static:
                del shapes[name]
            else:
                shapes[name] = (info.static_shape, info.elem_type)
        check_static_values(shapes, producers=producers)


def _declared(model: onnx.ModelProto) -> set[str]:
    """The top-level values whose shape ``model`` declares (graph outputs, ``value_info``)."""
    graph = model.graph
    return {v.name for v in (*graph.output, *graph.value_info) if v.type.tensor_type.HasField("shape")}


def _undeclared_infos(model: onnx.ModelProto) -> Mapping[str, TensorInfo]:
    """Types and shapes of ``model``'s top-level values as inference finds them without the shapes the
    model declares for its outputs and in ``value_info`` (empty when inference fails)."""
    from ...model.weightless import without_weights
    from ...translate import infer_shapes
    from ...translate.shapes_info import tensor_infos

    light = onnx.ModelProto()
    light.CopyFrom(without_weights(model))
    del light.graph.value_info[:]
    for out in light.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = infer_shapes(light)
    except DmlShimError as exc:
        logger.info("no shapes inferred without the declared ones (%s)", exc)
        return {}
    return tensor_infos(inferred.graph)
